"""VJP rules: reduce_precision (the shifts and bit counts are integer ops: no cotangent)."""
from __future__ import annotations

from .registry import vjp_rule


@vjp_rule("reduce_precision")
def _reduce_precision(ctx, node, cts, needs):
    # JAX treats it as linear: the cotangent is rounded the same way.
    (ct,) = cts
    if ct is None or not needs[0]:
        return [None]
    p = node.params
    return [ctx.add("reduce_precision", ct, exponent_bits=p["exponent_bits"],
                    mantissa_bits=p["mantissa_bits"])]
