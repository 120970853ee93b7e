"""JAX's own primitive harnesses (``jax._src.internal_test_util.test_harnesses``) through
rlxjax against jax.jit and jax.grad: tools/conformance.py does the work (it says what
passes and why); the default run takes a deterministic sample of each group, ``-m slow``
all of them.

A harness fails this test when rlxjax gives a wrong answer or crashes (an exception that is
not an rlxjax error). An rlxjax error ("unsupported") is accepted only for what
``conformance.UNSUPPORTED`` lists with its reason (docs/primitives.md shows the table)."""
from __future__ import annotations

import os
import zlib

import pytest

from helpers import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tool():
    return load_tool('conformance')


C = _tool()
HARNESSES = C.harnesses()
SAMPLE = {HARNESSES[i].fullname for i in C.sample(HARNESSES, C.DEFAULT_SAMPLE)}
# By name, in name order: JAX builds its harness list partly from sets of dtypes, whose
# order can differ between processes, so an index would name another harness on another
# pytest-xdist worker (and the workers would collect the tests in different orders).
BY_NAME = {h.fullname: h for h in HARNESSES}
APPLICABLE = sorted(n for n, h in BY_NAME.items() if C.not_applicable(h) is None)


def _id(name):
    return name if len(name) <= 60 else f"{name[:50]}~{zlib.crc32(name.encode()):08x}"


def _params(sampled: bool):
    out = []
    for name in APPLICABLE:
        if (name in SAMPLE) != sampled:
            continue
        for kind in ("fwd", "grad"):
            marks = [] if sampled else [pytest.mark.slow]
            known = C.KNOWN_WRONG.get(name)
            if known:
                marks.append(pytest.mark.xfail(reason=known, strict=True))
            out.append(pytest.param(name, kind, id=f"{kind}-{_id(name)}", marks=marks))
    return out


def _check(name, kind):
    h = BY_NAME[name]
    status, detail = (C.run_forward if kind == "fwd" else C.run_grad)(h)
    assert status not in ("wrong", "crash"), f"{h.fullname} ({kind}): {status}: {detail}"
    if status == "unsupported":
        why = C.unsupported_reason(h, kind, detail)
        assert why, (f"{h.fullname} ({kind}) is unsupported but not listed in "
                     f"tools/conformance.py UNSUPPORTED: {detail}")


@pytest.mark.parametrize("name, kind", _params(sampled=True))
def test_harness_sample(name, kind):
    _check(name, kind)


@pytest.mark.parametrize("name, kind", _params(sampled=False))
def test_harness_all(name, kind):
    _check(name, kind)


@pytest.mark.slow
def test_worker_processes_run_the_harnesses_they_are_given():
    """run_jobs sends each worker process harness names: by index, a worker whose harness
    list came out in another dtype order (see above) ran another harness of the group,
    so a run missed some harnesses and ran others twice."""
    hs = C.harnesses()
    jobs = [(i, "fwd") for i, h in enumerate(hs) if h.group_name in ("abs", "neg", "sign")]
    got = [r["name"] for r in C.run_jobs(jobs, 2)]
    assert got == [hs[i].fullname for i, _ in jobs]
