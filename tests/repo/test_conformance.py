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
SAMPLE = set(C.sample(HARNESSES, C.DEFAULT_SAMPLE))
APPLICABLE = [i for i, h in enumerate(HARNESSES) if C.not_applicable(h) is None]


def _id(i):
    h = HARNESSES[i]
    name = h.fullname if len(h.fullname) <= 60 else (
        f"{h.fullname[:50]}~{zlib.crc32(h.fullname.encode()):08x}")
    return name


def _params(sampled: bool):
    out = []
    for i in APPLICABLE:
        if (i in SAMPLE) != sampled:
            continue
        for kind in ("fwd", "grad"):
            marks = [] if sampled else [pytest.mark.slow]
            known = C.KNOWN_WRONG.get(HARNESSES[i].fullname)
            if known:
                marks.append(pytest.mark.xfail(reason=known, strict=True))
            out.append(pytest.param(i, kind, id=f"{kind}-{_id(i)}", marks=marks))
    return out


def _check(i, kind):
    h = HARNESSES[i]
    status, detail = (C.run_forward if kind == "fwd" else C.run_grad)(h)
    assert status not in ("wrong", "crash"), f"{h.fullname} ({kind}): {status}: {detail}"
    if status == "unsupported":
        why = C.unsupported_reason(h, kind, detail)
        assert why, (f"{h.fullname} ({kind}) is unsupported but not listed in "
                     f"tools/conformance.py UNSUPPORTED: {detail}")


@pytest.mark.parametrize("i, kind", _params(sampled=True))
def test_harness_sample(i, kind):
    _check(i, kind)


@pytest.mark.parametrize("i, kind", _params(sampled=False))
def test_harness_all(i, kind):
    _check(i, kind)
