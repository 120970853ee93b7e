"""Measure Core AI's own gelu op against float64, next to rlxjax's and XLA's gelu.

Both modes of the op (``approximate="none"`` / ``"tanh"``), rlxjax's written-out gelu on
Core AI (transforms/legalize/activation.py) and XLA's ``jax.nn.gelu`` on the same points.

    python tools/coreai_gelu.py

For each mode and domain: the worst error in fp32 ulps of the float64 value of the same
formula (exact: x·Φ(x) by scipy's erfc; tanh: JAX's formula evaluated in float64) and in
ulps of max(|exact|, 1) (tools/math_accuracy.py's measure), and how many results of the op
equal rlxjax's composition bit for bit; also JAX's own exact formula ``0.5·x·erfc(-x·√½)``
with rlxjax's Core AI erfc ("erfc form"; the tanh mode's column repeats rlxjax's). The op
and the erfc form are reached by swapping the ``gelu`` rule for the duration of the run
(rlxjax uses neither: docs/coreai.md).
"""
from __future__ import annotations

import os
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

F32 = np.float32


def _domains():
    lin = np.linspace(-10, 10, 200001).astype(F32)
    small = np.geomspace(1e-6, 1, 20001).astype(F32)
    big = np.geomspace(10, 1e4, 20001).astype(F32)
    return [("[-10, 10]", lin), ("abs(x) in [1e-6, 1]", np.concatenate([-small, small])),
            ("x in [-1e4, -10]", -big), ("x in [10, 1e4]", big)]


def _exact(x, approximate):
    import scipy.special as sp

    x = x.astype(np.float64)
    if approximate:
        c = np.sqrt(2.0 / np.pi)
        return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x ** 3)))
    return 0.5 * x * sp.erfc(-x / np.sqrt(2.0))


def _op_rule(ctx, node, ins):
    return ctx.ca.gelu(ins[0], approximate="tanh" if node.params["approximate"] else "none")


def _erfc_rule(ctx, node, ins):
    """JAX's own exact formula, 0.5·x·erfc(-x·√½), with rlxjax's Core AI erfc."""
    from rlxjax.coreai.ops_base import RULES

    if node.params["approximate"]:
        return _SAVED(ctx, node, ins)
    x, f32 = ins[0], node.inputs[0].type.dtype
    erfc = RULES["erfc"](ctx, node, [ctx.mul(x, ctx.scalar(-float(np.sqrt(F32(0.5))), f32))])
    return ctx.mul(ctx.mul(ctx.scalar(0.5, f32), x), erfc)


_SAVED = None


def _run_with(rule, fn, x):
    import rlxjax
    from rlxjax.coreai.ops_base import RULES
    from rlxjax.ir.ops import LOWERINGS, OPS

    global _SAVED
    _SAVED = RULES["gelu"]
    impls = OPS["gelu"].impls  # the op record's Core AI lowering, swapped for the run
    impls[LOWERINGS["coreai"]] = rule
    try:
        return np.asarray(rlxjax.coreml_jit(fn, format="aimodel")(x))
    finally:
        impls[LOWERINGS["coreai"]] = _SAVED


def main():
    import jax
    import rlxjax
    import math_accuracy

    print("| mode | domain | op ulp | op mixed | rlxjax ulp | rlxjax mixed | erfc form ulp | "
          "erfc form mixed | XLA ulp | XLA mixed | op = rlxjax bit for bit |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for approximate in (False, True):
        fn = lambda x, a=approximate: jax.nn.gelu(x, approximate=a)  # noqa: E731
        for label, x in _domains():
            exact = _exact(x, approximate)
            mine = np.asarray(rlxjax.coreml_jit(fn, format="aimodel")(x))
            op = _run_with(_op_rule, fn, x)
            erfc = _run_with(_erfc_rule, fn, x) if not approximate else mine
            xla = np.asarray(jax.jit(fn)(x))
            cols = []
            for v in (op, mine, erfc, xla):
                e, m = math_accuracy.errors(v, exact)
                cols += [f"{e.max():.3g}", f"{m.max():.3g}"]
            same = np.mean(op.view(np.int32) == mine.view(np.int32))
            print(f"| {'tanh' if approximate else 'exact'} | {label} | " + " | ".join(cols)
                  + f" | {same:.1%} |", flush=True)
    # the specials: NaN, ±inf, ±0
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], F32)
    for approximate in (False, True):
        fn = lambda x, a=approximate: jax.nn.gelu(x, approximate=a)  # noqa: E731
        op = _run_with(_op_rule, fn, x)
        print(f"{'tanh' if approximate else 'exact'} at NaN, inf, -inf, 0, -0: op {op}, "
              f"rlxjax {np.asarray(rlxjax.coreml_jit(fn, format='aimodel')(x))}, "
              f"XLA {np.asarray(jax.jit(fn)(x))}")


if __name__ == "__main__":
    main()
