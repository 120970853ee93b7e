"""Lowering: ``convert`` (``lax.convert_element_type``) with XLA's semantics.

- to bool: ``x != 0`` (NaN is True); from bool: 0 / 1;
- integer -> integer: the value modulo 2**bits of the target type. int8 / uint8 are carried
  as int32 (coreml/smallint.py), so only a conversion to them changes the value: a wrap;
- to a float: MIL ``cast`` (round to nearest even);
- float -> integer: truncation toward zero, **saturating** at the target's range, NaN -> 0.
  XLA calls out-of-range conversions implementation-defined; this is what ``jax.jit``
  gives on CPU (and GPU). MIL's ``cast`` leaves NaN and out-of-range values undefined, so
  the value is made finite and in range first: NaN -> 0, clipped to the source type's
  values nearest the target's range (integers, or values whose truncation is in range),
  cast, and values beyond the clip bounds (only possible when the bound is not the target's
  extreme: int32 from f32 above 2**31 - 128, from f16 beyond +-65504) selected to the
  target's extremes.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType
from ..builder import cast_name
from ..registry import lowering
from ..smallint import in_range
from .common import Ew, scalar_like

_INT_RANGE = {DType.i32: (-2 ** 31, 2 ** 31 - 1), DType.i8: (-128, 127), DType.u8: (0, 255)}


def clip_bounds(ftype, lo: int, hi: int):
    """The smallest and the largest finite value of float type ``ftype`` whose truncation
    toward zero lies in the integer range ``[lo, hi]``, each as far out as the type allows."""
    f = np.dtype(ftype).type
    big = float(np.finfo(ftype).max)
    f_hi = f(min(hi + 1, big))
    if float(f_hi) >= hi + 1:  # rounded up to hi + 1: the next value down truncates to <= hi
        f_hi = np.nextafter(f_hi, f(0))
    f_lo = f(max(lo - 1, -big))
    if float(f_lo) <= lo - 1:
        f_lo = np.nextafter(f_lo, f(0))
    return f_lo, f_hi


def _float_to_int(ctx, x, to: DType):
    e = Ew(ctx.b)
    lo, hi = _INT_RANGE[to]
    f_lo, f_hi = clip_bounds(x.dtype.np, lo, hi)
    z = e.select(e.compare("equal", x, x), x, scalar_like(x, 0))  # NaN -> 0
    clipped = e.binary("minimum", e.binary("maximum", z, scalar_like(x, f_lo)),
                       scalar_like(x, f_hi))
    y = ctx.b.op("cast", clipped.type.with_dtype(DType.i32), x=clipped, dtype="int32")
    if int(f_hi) < hi:  # values above f_hi exist (up to inf): the top of the range
        y = e.select(e.compare("greater", z, scalar_like(x, f_hi)), np.asarray(hi, np.int32), y)
    if int(f_lo) > lo:
        y = e.select(e.compare("less", z, scalar_like(x, f_lo)), np.asarray(lo, np.int32), y)
    return y


@lowering("convert")
def _convert(ctx, node, x):
    src, to = node.inputs[0].type.dtype, node.params["dtype"]
    t = ctx.out_type(node)
    if to == DType.bool or to.is_float:
        if t.dtype == x.dtype:  # e.g. f32 -> f16 when the program computes in fp16 anyway
            return x
        return ctx.b.op("cast", t, x=x, dtype=cast_name(t.dtype))
    if src == DType.bool:
        return ctx.b.op("cast", t, x=x, dtype="int32")
    if src.is_float:
        return _float_to_int(ctx, x, to)
    return in_range(ctx.b, x, src, to)
