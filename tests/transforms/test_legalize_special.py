"""The special functions and reduce_precision, decomposed once in the RLX graph
(transforms/legalize/special.py on special_fx.py's ``Fx``, reduce_precision.py): Core AI
takes the decompositions, Core ML keeps its own rules. The decompositions hold no Core AI
op: here they are lowered by the Core ML format instead of its own rules (legalized with
the op taken as not native) and run on its reference interpreter, against ``jax.jit``.
Core AI runs them on its runtime in tests/coreai_format (test_coreai_linalg.py,
test_coreai_special_loops.py, test_coreai_fp16.py)."""
from __future__ import annotations

import tempfile

import jax
import numpy as np
import pytest
from jax import lax

special = pytest.importorskip("scipy.special")

from rlxjax.coreai.lower import native as coreai_native
from rlxjax.coreml import lower as _coreml_lower  # noqa: F401  (registers its lowerings)
from rlxjax.coreml.interpreter.interpreter import ReferenceProgram
from rlxjax.coreml.lower import lower_graph
from rlxjax.coreml.registry import LOWERINGS
from rlxjax.coreml.targets import get_target
from rlxjax.frontend import trace
from rlxjax.ir import verify
from rlxjax.transforms.legalize import decomposition, legalize

F32 = np.float32
EPS = float(np.finfo(F32).eps)
#: op -> (float64 reference, the worst error measured on Core AI (the same composition):
#: ulps of the float64 value, eps the floor of an ulp; tests/coreai_format/test_coreai_linalg.py
#: and test_coreai_special_loops.py's "mixed" error, rounded up)
REF = {"cbrt": (np.cbrt, 1.0), "lgamma": (special.gammaln, 5.0),
       "polygamma": (lambda x: special.polygamma(1, x), 2.5),
       "igamma": (special.gammainc, 10.0), "betainc": (special.betainc, 440.0)}
_X = np.concatenate([np.linspace(0.05, 6, 23), [1.0, 2.0, 1e-3, 30.0, np.inf, np.nan]]).astype(F32)
CASES = {  # op -> (jax function, arguments)
    "cbrt": (lax.cbrt, (np.concatenate([-_X, _X]),)),
    "lgamma": (lax.lgamma, (np.concatenate([-_X + 0.5, _X]),)),
    "polygamma": (lambda x: lax.polygamma(F32(1.0), x), (_X,)),  # a constant order
    "igamma": (lax.igamma, (_X, np.roll(_X, 3))),  # a while loop
    "betainc": (lax.betainc, (_X[:20], np.roll(_X, 5)[:20], np.linspace(0, 1, 20).astype(F32))),
    "reduce_precision": (lambda x: lax.reduce_precision(x, 5, 7),
                         (np.concatenate([_X, -_X * 1e3, F32([6e-5, 1e-7, 7e4])]),)),
}


def _graph(fn, args):
    return trace(fn, args, [f"a{k}" for k in range(len(args))]).graph


@pytest.mark.parametrize("op", sorted(CASES))
def test_decomposed_for_core_ai_kept_by_core_ml(op):
    g = _graph(*CASES[op])
    assert decomposition(op) is not None and op in {n.op for n in g.nodes}
    assert legalize(g, lambda n: n.op in LOWERINGS) is g
    new = legalize(g, coreai_native)
    verify(new)
    assert op not in {n.op for n in new.nodes} and all(coreai_native(n) for n in new.nodes)


@pytest.mark.parametrize("op", sorted(CASES))
def test_the_decomposition_is_format_neutral_and_matches_jax(op):
    fn, args = CASES[op]
    g = legalize(_graph(fn, args), lambda n: n.op in LOWERINGS and n.op != op)
    assert op not in {n.op for n in g.nodes}
    with tempfile.TemporaryDirectory() as tmp:
        model, _, _ = lower_graph(g, get_target("iOS17"), "fp32", tmp)
        feeds = {name: a for (name, _), a in zip(g.inputs, args)}
        (got,) = ReferenceProgram(model, tmp).run(feeds).values()
    want = np.asarray(jax.jit(fn)(*args))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    if op == "reduce_precision":  # exact: bit for bit
        np.testing.assert_array_equal(got, want)
        return
    fin = np.isfinite(want)
    np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
    ref, worst = REF[op]
    exact = ref(*[a.astype(np.float64)[fin] for a in args])
    err = np.abs(got[fin] - exact) / (np.spacing(np.abs(exact).astype(F32)) + EPS)
    assert err.max() <= worst, (op, err.max())
