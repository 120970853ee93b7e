"""Frontend rules: bitwise and/or/xor/not, shifts, population_count, clz (the RLX ops are
int32-only below bool; int8 / uint8 travel through int32 here, with their own bit width's
semantics), and reduce_precision.

An 8-bit value is handled as its bit pattern p in [0, 256) (or its signed reading in
[-128, 128) for the arithmetic shift), held exactly in int32, so the int32 ops give the
8-bit results: a shift amount of at least 8 is clamped to 8, where every 8-bit shift has
reached its final value (0 or the sign fill).
"""
from __future__ import annotations

import numpy as np

from ...ir import DType
from ..registry import rule

NARROW = (DType.i8, DType.u8)


def _i32(ctx, v):
    return ctx.constant(np.asarray(v, np.int32))


def _select(ctx, pred, on_true, on_false):
    return ctx.add("select", pred, on_false, on_true)


def pattern(ctx, x):
    """The 8-bit pattern of an int8 / uint8 value, as int32 in [0, 256)."""
    xi = ctx.add("convert", x, dtype=DType.i32)
    if x.dtype == DType.u8:
        return xi
    return _select(ctx, ctx.add("lt", xi, _i32(ctx, 0)), ctx.add("add", xi, _i32(ctx, 256)), xi)


def signed(ctx, x):
    """The two's complement reading of an 8-bit pattern, as int32 in [-128, 128)."""
    xi = ctx.add("convert", x, dtype=DType.i32)
    if x.dtype == DType.i8:
        return xi
    return _select(ctx, ctx.add("ge", xi, _i32(ctx, 128)), ctx.add("sub", xi, _i32(ctx, 256)), xi)


def from_pattern(ctx, p, dtype):
    if dtype == DType.i8:
        p = _select(ctx, ctx.add("ge", p, _i32(ctx, 128)), ctx.add("sub", p, _i32(ctx, 256)), p)
    return ctx.add("convert", p, dtype=dtype)


def wrap(ctx, v, dtype):
    """An int32 result of 8-bit arithmetic wrapped to ``dtype`` (int8 / uint8), as XLA's
    8-bit add / mul wrap."""
    p = ctx.add("rem", v, _i32(ctx, 256))  # in (-256, 256), the dividend's sign
    p = _select(ctx, ctx.add("lt", p, _i32(ctx, 0)), ctx.add("add", p, _i32(ctx, 256)), p)
    return from_pattern(ctx, p, dtype)


def from_signed(ctx, v, dtype):
    if dtype == DType.u8:
        v = _select(ctx, ctx.add("lt", v, _i32(ctx, 0)), ctx.add("add", v, _i32(ctx, 256)), v)
    return ctx.add("convert", v, dtype=dtype)


@rule("and", "or", "xor")
def _logical(ctx, eqn, x, y):
    op = eqn.primitive.name
    if x.dtype not in NARROW:
        return ctx.add(op, x, y)
    return from_pattern(ctx, ctx.add(op, pattern(ctx, x), pattern(ctx, y)), x.dtype)


@rule("not")
def _not(ctx, eqn, x):
    if x.dtype not in NARROW:
        return ctx.add("not", x)
    return from_pattern(ctx, ctx.add("sub", _i32(ctx, 255), pattern(ctx, x)), x.dtype)


def _narrow_amount(ctx, s):
    """An 8-bit shift amount, read as unsigned (as XLA does) and clamped to 8."""
    return ctx.add("min", pattern(ctx, s), _i32(ctx, 8))


@rule("shift_left")
def _shift_left(ctx, eqn, x, s):
    if x.dtype not in NARROW:
        return ctx.add("shift_left", x, s)
    wide = ctx.add("shift_left", pattern(ctx, x), _narrow_amount(ctx, s))  # < 2**16
    return from_pattern(ctx, ctx.add("rem", wide, _i32(ctx, 256)), x.dtype)


@rule("shift_right_logical")
def _shift_right_logical(ctx, eqn, x, s):
    if x.dtype not in NARROW:
        return ctx.add("shift_right_logical", x, s)
    r = ctx.add("shift_right_logical", pattern(ctx, x), _narrow_amount(ctx, s))
    return from_pattern(ctx, r, x.dtype)


@rule("shift_right_arithmetic")
def _shift_right_arithmetic(ctx, eqn, x, s):
    if x.dtype not in NARROW:
        return ctx.add("shift_right_arithmetic", x, s)
    r = ctx.add("shift_right_arithmetic", signed(ctx, x), _narrow_amount(ctx, s))
    return from_signed(ctx, r, x.dtype)


@rule("population_count")
def _population_count(ctx, eqn, x):
    if x.dtype not in NARROW:
        return ctx.add("population_count", x)
    return from_pattern(ctx, ctx.add("population_count", pattern(ctx, x)), x.dtype)


@rule("clz")
def _clz(ctx, eqn, x):
    if x.dtype not in NARROW:
        return ctx.add("clz", x)
    n = ctx.add("sub", ctx.add("clz", pattern(ctx, x)), _i32(ctx, 24))
    return from_pattern(ctx, n, x.dtype)


#: (exponent bits, mantissa bits) of the float dtypes
_FORMATS = {DType.f32: (8, 23), DType.f16: (5, 10)}


@rule("reduce_precision")
def _reduce_precision(ctx, eqn, x):
    e, m = int(eqn.params["exponent_bits"]), int(eqn.params["mantissa_bits"])
    src_e, src_m = _FORMATS[x.dtype]
    if e >= src_e and m >= src_m:
        return x  # the value's own format already
    if m == 0 and src_m > 0:
        raise ctx.unsupported("mantissa_bits=0: XLA breaks its rounding ties by the parity of "
                              "the exponent, which Core ML's float arithmetic cannot see")
    return ctx.add("reduce_precision", x, exponent_bits=e, mantissa_bits=m)
