"""RLX int32 shifts and bit counts (rlxjax/ir/bitwise.py) -> Core AI, which has bitwise
and / or / xor but no shifts (measured). Composed so that no int32 intermediate overflows
(Core AI does not document how it wraps) and no division by 0 is emitted:

* per-element powers of two are looked up in a constant table (``gather_nd``, the shift
  clamped into [0, 31]);
* ``shift_right_arithmetic(x, s)`` = ``floor_divide(x, 2**s)`` for s in [0, 30] (floor
  division by a power of two is the arithmetic shift), the sign fill for s >= 31 or s < 0
  (XLA reads the shift as unsigned);
* ``shift_right_logical(x, s)`` = ``sra(x, s) & (2**(32-s) - 1)`` for s in [1, 31], x for
  s = 0, 0 otherwise;
* ``shift_left(x, s)``: the bits below the new sign bit, ``(x & (2**(31-s) - 1))·2**s``
  (< 2**31), or-ed with INT_MIN when bit 31-s of x is set; 0 for s outside [0, 31];
* ``population_count`` / ``clz`` from the 31 low bits ``floor_divide(x, 2**i) & 1`` and
  the sign.
"""
from __future__ import annotations

import numpy as np

from ..ir import DType
from .ops_base import rule

I32 = DType.i32
INT_MIN = np.int32(-2 ** 31)
#: 2**s for s in 0..30; the entry for 31 is 1, never 0: it is read as a divisor under a
#: ``where`` that discards the quotient, and a division by 0 kills the runtime (SIGILL,
#: measured) even there
POW2 = np.asarray([1 << k for k in range(31)] + [1], np.int32)
LOW_MASK = np.asarray([0] + [(1 << (32 - k)) - 1 for k in range(1, 32)], np.int64
                      ).astype(np.int32)  # 2**(32-s) - 1 for s in 1..31 (s = 0 unused)
BELOW_SIGN = np.asarray([(1 << (31 - k)) - 1 for k in range(32)], np.int32)
SIGN_BIT_AT = np.asarray([1 << (31 - k) if k >= 1 else 1 for k in range(32)], np.int32)


def _lookup(ctx, table, s, shape):
    """table[clamp(s, 0, 31)] elementwise (``s`` of ``shape``)."""
    k = ctx.ca.broadcasting_minimum(ctx.ca.broadcasting_maximum(s, ctx.scalar(0, I32)),
                                    ctx.scalar(31, I32))
    return ctx.ca.gather_nd(ctx.const(table), ctx.reshape(k, tuple(shape) + (1,)))


def _operands(ctx, node, ins):
    shape = node.outputs[0].type.shape
    x, s = ins
    xs, ss = node.inputs[0].type.shape, node.inputs[1].type.shape
    x = x if tuple(xs) == tuple(shape) else ctx.broadcast(x, shape, I32)
    s = s if tuple(ss) == tuple(shape) else ctx.broadcast(s, shape, I32)
    return x, s, shape


def _in_range(ctx, s, lo, hi):
    return ctx.and_(ctx.gt(s, ctx.scalar(lo - 1, I32)), ctx.lt(s, ctx.scalar(hi + 1, I32)))


def _sra(ctx, x, s, shape):
    q = ctx.ca.broadcasting_floor_divide(x, _lookup(ctx, POW2, s, shape))  # s clamped: > 0
    fill = ctx.where(ctx.lt(x, ctx.scalar(0, I32)), ctx.scalar(-1, I32), ctx.scalar(0, I32))
    return ctx.where(_in_range(ctx, s, 0, 30), q, fill)


@rule("shift_right_arithmetic")
def _shift_right_arithmetic(ctx, node, ins):
    x, s, shape = _operands(ctx, node, ins)
    return _sra(ctx, x, s, shape)


@rule("shift_right_logical")
def _shift_right_logical(ctx, node, ins):
    x, s, shape = _operands(ctx, node, ins)
    r = ctx.ca.broadcasting_bitwise_and(_sra(ctx, x, s, shape), _lookup(ctx, LOW_MASK, s, shape))
    r = ctx.where(ctx.eq(s, ctx.scalar(0, I32)), x, r)
    return ctx.where(_in_range(ctx, s, 0, 31), r, ctx.scalar(0, I32))


@rule("shift_left")
def _shift_left(ctx, node, ins):
    x, s, shape = _operands(ctx, node, ins)
    low = ctx.ca.broadcasting_bitwise_and(x, _lookup(ctx, BELOW_SIGN, s, shape))
    r = ctx.mul(low, _lookup(ctx, POW2, s, shape))  # < 2**31 (s = 31: low = 0, any factor)
    top = ctx.ca.broadcasting_bitwise_and(x, _lookup(ctx, SIGN_BIT_AT, s, shape))
    signed = ctx.and_(ctx.ne(top, ctx.scalar(0, I32)), ctx.gt(s, ctx.scalar(0, I32)))
    r = ctx.where(signed, ctx.ca.broadcasting_bitwise_or(r, ctx.scalar(INT_MIN, I32)), r)
    r = ctx.where(ctx.eq(s, ctx.scalar(0, I32)), x, r)
    return ctx.where(_in_range(ctx, s, 0, 31), r, ctx.scalar(0, I32))


def _bits(ctx, x, shape):
    """(the 31 low bits of x as 0/1 along a new last axis, x < 0)."""
    col = ctx.reshape(x, tuple(shape) + (1,))
    q = ctx.ca.broadcasting_floor_divide(col, ctx.const(POW2[:31]))
    return ctx.ca.broadcasting_bitwise_and(q, ctx.scalar(1, I32)), ctx.lt(x, ctx.scalar(0, I32))


@rule("population_count")
def _population_count(ctx, node, ins):
    shape = node.outputs[0].type.shape
    bits, neg = _bits(ctx, ins[0], shape)
    n = ctx.reduce("sum", bits, [len(shape)], shape)
    return ctx.add(n, ctx.cast(neg, I32))


@rule("clz")
def _clz(ctx, node, ins):
    shape = node.outputs[0].type.shape
    bits, neg = _bits(ctx, ins[0], shape)
    pos = ctx.where(ctx.eq(bits, ctx.scalar(1, I32)),
                    ctx.const(np.arange(31, dtype=np.int32)), ctx.scalar(-1, I32))
    hi = ctx.reduce("max", pos, [len(shape)], shape)
    return ctx.where(neg, ctx.scalar(0, I32), ctx.sub(ctx.scalar(31, I32), hi))
