"""Frontend rule: bitcast_convert_type, where Core ML can compute it exactly.

MIL has no bit reinterpretation. Two cases are exact without one: the same dtype (the
identity; JAX's derivative of a bitcast is zero, so no gradient flows through it) and
int8 <-> uint8, which reinterprets two's complement: the value modulo 2**8, i.e. a
``convert``. Anything else (float <-> int bits, widths that change the shape) is refused.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType
from ..registry import rule

_SMALL = (DType.i8, DType.u8)


@rule("bitcast_convert_type")
def _bitcast_convert_type(ctx, eqn, x):
    new = np.dtype(eqn.params["new_dtype"])
    old = np.dtype(eqn.invars[0].aval.dtype)
    if new == old:
        return ctx.add("stop_gradient", x) if x.dtype.is_float else x
    if x.dtype in _SMALL and new in (np.dtype(np.int8), np.dtype(np.uint8)):
        return ctx.add("convert", x, dtype=DType.i8 if new == np.int8 else DType.u8)
    raise ctx.unsupported(
        f"bitcast from {old.name} to {new.name}: Core ML has no bit reinterpretation (rlxjax "
        "computes only same-dtype and int8 <-> uint8 bitcasts, which need none)")
