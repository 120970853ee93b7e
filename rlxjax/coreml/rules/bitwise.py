"""Lowering: integer and/or/xor/not, shifts, population count, count-leading-zeros and
reduce_precision, composed exactly from MIL arithmetic. MIL has no bitwise integer op
(logical_and etc. take bool only) and no bit cast.

int32 compositions never rely on how an int32 overflow wraps (Core ML does not document
it): every intermediate value is in [-2**31, 2**31), as the comment beside it says.
Dividing by a positive power of two with ``floor_div`` is the arithmetic right shift of
the two's complement pattern, and ``mod`` by it (floor modulo, non-negative) its low bits,
for negative values too.

reduce_precision is the float arithmetic of Veltkamp's splitting, checked bit for bit
against XLA's integer algorithm (exhaustively for fp16, per binade for fp32) in
tests/frontend/test_reduce_precision.py.
"""
from __future__ import annotations

import numpy as np

from ...errors import RlxError
from ...ir import DType, TensorType, broadcast_shapes
from ..registry import lowering
from .common import reshape

I32 = DType.i32
INT_MIN = np.int32(-2 ** 31)
#: 2**k for k = 0 .. 30 (every power of two int32 holds)
POW2 = np.asarray([1 << k for k in range(31)], np.int32)


def _shape(v):
    return tuple(v.shape) if hasattr(v, "shape") else ()


def _i32(v) -> np.ndarray:
    return np.asarray(v, np.int32)


class _Ops:
    """Elementwise MIL ops with numpy-broadcast result types."""

    def __init__(self, b):
        self.b = b

    def _type(self, dtype, *vs):
        if dtype is None:
            dtype = next(v.dtype for v in vs if not isinstance(v, np.ndarray))
        return TensorType(broadcast_shapes(*(_shape(v) for v in vs)), dtype)

    def binary(self, op, x, y, dtype=None):
        return self.b.op(op, self._type(dtype, x, y), x=x, y=y)

    def compare(self, op, x, y):
        return self.binary(op, x, y, DType.bool)

    def unary(self, op, x):
        return self.b.op(op, x.type, x=x)

    def cast(self, x, dtype: DType, name: str):
        return self.b.op("cast", x.type.with_dtype(dtype), x=x, dtype=name)

    def select(self, cond, a, b):
        t = self._type(None, a, b)
        full = broadcast_shapes(_shape(cond), t.shape)
        if tuple(t.shape) != full:  # MIL infers select's shape from its branches alone
            raise RlxError(f"internal: select branches {_shape(a)}, {_shape(b)} do not carry "
                           f"the result shape {full}")
        return self.b.op("select", t, cond=cond, a=a, b=b)

    def flag(self, cond):
        """A bool tensor as int32 0 / 1."""
        return self.cast(cond, I32, "int32")

    def gather(self, table: np.ndarray, idx):
        """``table[idx]`` for int32 ``idx`` in range: a constant when ``idx`` is one."""
        known = self.b.known(idx)
        if known is not None:
            return self.b.const(table[np.asarray(known)])
        return self.b.op("gather", TensorType(tuple(idx.shape), I32), x=table, indices=idx,
                         axis=np.int32(0))

    def reduce_last(self, x):
        shape = tuple(x.shape[:-1])
        return self.b.op("reduce_sum", TensorType(shape, x.dtype), x=x,
                         axes=np.asarray([len(shape)], np.int32))


# -- and / or / xor / not ------------------------------------------------------------------
def _low_bits(e, x):
    """(x < 0, bits): ``bits[..., k]`` (int32 0/1) is bit k of x for k < 31; bit 31 is the
    sign."""
    neg = e.compare("less", x, _i32(0))
    # x + 2**31 where x < 0, in [0, 2**31); else x itself. The offset is 0 or INT_MIN
    # (1 * INT_MIN), so no operation here leaves the int32 range.
    low = e.binary("sub", x, e.binary("mul", e.flag(neg), INT_MIN))
    col = reshape(e.b, low, _shape(low) + (1,))
    return neg, e.binary("mod", e.binary("floor_div", col, POW2), _i32(2))  # col >= 0


def _from_bits(e, neg, bits):
    """The int32 whose sign bit is ``neg`` and bits 0..30 are ``bits[..., k]``."""
    low = e.reduce_last(e.binary("mul", bits, POW2))  # distinct powers: in [0, 2**31)
    return e.binary("add", low, e.binary("mul", e.flag(neg), INT_MIN))  # low + INT_MIN < 0


def int_logical(ctx, node, x, y):
    """and / or / xor of int32 tensors, bit by bit."""
    _require_i32(ctx, node, x)
    e = _Ops(ctx.b)
    (nx, bx), (ny, by) = _low_bits(e, x), _low_bits(e, y)
    if node.op == "and":
        bits, sign = e.binary("mul", bx, by), e.binary("logical_and", nx, ny, DType.bool)
    elif node.op == "or":
        bits, sign = e.binary("maximum", bx, by), e.binary("logical_or", nx, ny, DType.bool)
    else:
        bits = e.unary("abs", e.binary("sub", bx, by))
        sign = e.binary("logical_xor", nx, ny, DType.bool)
    return _from_bits(e, sign, bits)


def int_not(ctx, node, x):
    """~x == -1 - x for every int32 x (INT_MIN -> INT_MAX: no overflow)."""
    _require_i32(ctx, node, x)
    return ctx.b.op("sub", ctx.out_type(node), x=_i32(-1), y=x)


def _require_i32(ctx, node, x):
    if x.dtype != I32:
        raise ctx.unsupported(node, f"bitwise '{node.op}' on {x.dtype}: the frontend carries "
                                    "integers narrower than int32 through int32")


# -- shifts --------------------------------------------------------------------------------
def _amount(e, s):
    """(s clamped into [0, 31], s outside [0, 32)): XLA reads the amount as unsigned, so a
    negative amount is out of range too."""
    oob = e.binary("logical_or", e.compare("less", s, _i32(0)), e.compare("greater", s, _i32(31)),
                DType.bool)
    return e.binary("minimum", e.binary("maximum", s, _i32(0)), _i32(31)), oob


# 2**(31 - s) for s = 0..31 (s = 0: unused, 1); 2**s for s = 0..31 (s = 31: unused, 0)
_POW_31_MINUS = np.asarray([1] + [1 << (31 - s) for s in range(1, 32)], np.int32)
_POW_S = np.asarray([1 << s for s in range(31)] + [0], np.int32)
# 2**(s - 1) for s = 1..31 (s = 0: unused, 1)
_POW_S_MINUS_1 = np.asarray([1] + [1 << (s - 1) for s in range(1, 32)], np.int32)


@lowering("shift_left")
def _shift_left(ctx, node, x, s):
    e = _Ops(ctx.b)
    sc, oob = _amount(e, s)
    # For s in [1, 31]: x << s keeps bits 0 .. 30-s of x as bits s .. 30, and bit 31-s of
    # x as the sign bit.
    a = e.gather(_POW_31_MINUS, sc)                        # 2**(31-s) in [1, 2**30]
    kept = e.binary("mod", x, a)                              # in [0, 2**(31-s))
    top = e.binary("mod", e.binary("floor_div", x, a), _i32(2))  # bit 31-s of x: 0 / 1
    low = e.binary("mul", kept, e.gather(_POW_S, sc))         # < 2**31 (s = 31: kept = 0)
    r = e.binary("add", low, e.binary("mul", top, INT_MIN))      # low + INT_MIN < 0
    r = e.select(e.compare("equal", sc, _i32(0)), x, r)
    return e.select(oob, _i32(0), r)


@lowering("shift_right_arithmetic")
def _shift_right_arithmetic(ctx, node, x, s):
    e = _Ops(ctx.b)
    sc, oob = _amount(e, s)
    # floor(x / 2**s) is the arithmetic shift; s >= 31 (or out of range) leaves the sign
    # fill floor(x / 2**31) = floor(floor(x / 2**30) / 2).
    q = e.binary("floor_div", x, e.gather(POW2, e.binary("minimum", sc, _i32(30))))
    fill = e.binary("floor_div", e.binary("floor_div", x, POW2[30]), _i32(2))
    wide = e.binary("logical_or", oob, e.compare("equal", sc, _i32(31)), DType.bool)
    return e.select(wide, fill, q)


@lowering("shift_right_logical")
def _shift_right_logical(ctx, node, x, s):
    e = _Ops(ctx.b)
    sc, oob = _amount(e, s)
    # For s in [1, 31]: q = floor(x / 2**s) (two steps: 2**31 is no int32). Where x < 0
    # the unsigned pattern is x + 2**32, so the result is q + 2**(32-s), added as two
    # halves h = 2**(31-s): q + h in [0, h), q + 2h in [h, 2h) -- all inside int32
    # (where x >= 0, h is replaced by 0: q + 2h could overflow there).
    q = e.binary("floor_div", e.binary("floor_div", x, e.gather(_POW_S_MINUS_1, sc)), _i32(2))
    h = e.binary("mul", e.flag(e.compare("less", x, _i32(0))), e.gather(_POW_31_MINUS, sc))
    r = e.binary("add", e.binary("add", q, h), h)
    r = e.select(e.compare("equal", sc, _i32(0)), x, r)
    return e.select(oob, _i32(0), r)


# -- bit counts ----------------------------------------------------------------------------
@lowering("population_count")
def _population_count(ctx, node, x):
    e = _Ops(ctx.b)
    neg, bits = _low_bits(e, x)
    return e.binary("add", e.reduce_last(bits), e.flag(neg))  # in [0, 32]


@lowering("clz")
def _clz(ctx, node, x):
    # x > 0 in [2**j, 2**(j+1)): clz = 31 - j = 1 + #{k <= 30 : 2**k > x}; x = 0 gives
    # 1 + 31 = 32; x < 0 (sign bit set) gives 0.
    e = _Ops(ctx.b)
    col = reshape(e.b, x, _shape(x) + (1,))
    above = e.reduce_last(e.flag(e.compare("greater", POW2, col)))
    n = e.binary("add", above, _i32(1))
    return e.select(e.compare("less", x, _i32(0)), _i32(0), n)


# -- reduce_precision ----------------------------------------------------------------------
#: (exponent bits, mantissa bits) of the formats a program computes in
FORMATS = {DType.f32: (8, 23), DType.f16: (5, 10)}


@lowering("reduce_precision")
def _reduce_precision(ctx, node, x):
    """XLA's ReducePrecision (round the mantissa to nearest even, then overflow to +-inf and
    flush values below the smallest normal to +-0, NaN kept), in fp32 arithmetic on the
    format the value is computed in (fp16 values are widened exactly)."""
    p = node.params
    e_bits, m_bits = p["exponent_bits"], p["mantissa_bits"]
    src = x.dtype
    src_e, src_m = FORMATS[src]
    if e_bits >= src_e and m_bits >= src_m:
        return x
    if m_bits == 0:
        raise ctx.unsupported(node, "mantissa_bits=0 (XLA breaks those ties by the parity "
                                    "of the exponent, which fp32 arithmetic cannot see)")
    e, f = _Ops(ctx.b), np.float32
    xf = x if src == DType.f32 else e.cast(x, DType.f32, "fp32")
    ax = e.unary("abs", xf)
    r = xf
    if m_bits < src_m:
        # Veltkamp: c = x * (2**s + 1); c - (c - x) is x rounded to nearest even at 24 - s
        # significant bits. Values >= 2**100 are scaled by 2**-64 first (exact) so that c
        # cannot overflow, and scaled back (a result rounding up past the largest float
        # becomes inf, as in XLA).
        s = 23 - m_bits
        big = e.compare("greater_equal", ax, f(2.0 ** 100))
        xs = e.select(big, e.binary("mul", xf, f(2.0 ** -64)), xf)
        c = e.binary("mul", xs, f(2.0 ** s + 1))
        hi = e.binary("sub", c, e.binary("sub", c, xs))
        hi = e.select(big, e.binary("mul", hi, f(2.0 ** 64)), hi)
        # Below the source format's smallest normal mn, XLA rounds the subnormal's bits:
        # to a multiple of q = mn * 2**-m_bits, ties to even: (|x| + C) - C with
        # C = 1.5 * 2**23 * q, whose ulp is q; the sign (of zero too) put back after.
        bias = (1 << (src_e - 1)) - 1
        mn, q = f(2.0 ** (1 - bias)), 2.0 ** (1 - bias - m_bits)
        C = f(1.5 * 2 ** 23 * q)
        mag = e.binary("sub", e.binary("add", ax, C), C)
        signed = e.select(e.compare("less", xf, f(0)), e.binary("mul", mag, f(-1)), mag)
        tiny = e.select(e.compare("equal", mag, f(0)), e.binary("mul", xf, f(0)), signed)
        r = e.select(e.compare("less", ax, mn), tiny, hi)
        r = e.select(e.compare("equal", ax, f(np.inf)), xf, r)
    if e_bits < src_e:
        rb = (1 << (e_bits - 1)) - 1  # the reduced format's largest exponent
        ar = e.unary("abs", r)
        r = e.select(e.compare("greater_equal", ar, f(2.0 ** (rb + 1))), e.binary("mul", xf, f(np.inf)), r)
        r = e.select(e.compare("less", ar, f(2.0 ** (1 - rb))), e.binary("mul", xf, f(0)), r)
    r = e.select(e.compare("not_equal", xf, xf), xf, r)  # NaN stays NaN (and its payload)
    return r if src == DType.f32 else e.cast(r, src, "fp16")
