"""JAX's primitive harnesses through rlxjax with format="aimodel", run on Apple's Core AI
runtime (tools/conformance.py --format aimodel; each program in its worker process, a death
or hang counting as a crash). Slow: the whole run takes long (a worker per program); the
default suite samples the Core AI rules in tests/coreai_format/test_coreai_ops.py.

A harness fails here when rlxjax gives a wrong answer or crashes; an rlxjax error naming
what Core AI does not take yet ("unsupported") is accepted (docs/coreai.md counts them)."""
from __future__ import annotations

import pytest

from helpers import load_tool

pytest.importorskip("coreai")

C = load_tool("conformance")
HARNESSES = {h.fullname: h for h in C.harnesses()}
APPLICABLE = sorted(n for n, h in HARNESSES.items() if C.not_applicable(h) is None)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ("fwd", "grad"))
@pytest.mark.parametrize("name", APPLICABLE)
def test_harness_on_core_ai(name, kind, monkeypatch):
    monkeypatch.setattr(C, "FORMAT", "aimodel")
    h = HARNESSES[name]
    status, detail = (C.run_forward if kind == "fwd" else C.run_grad)(h)
    assert status not in ("wrong", "crash"), f"{name} ({kind}) on Core AI: {status}: {detail}"
