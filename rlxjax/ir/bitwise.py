"""Ops of the elementwise family defined on bit patterns: the int32 shifts, population
count and count-leading-zeros, and ``reduce_precision`` (rounding a float to fewer
exponent / mantissa bits).

Integer and/or/xor/not are the ``and``/``or``/``xor``/``not`` ops of rlxjax/ir/ops.py
(bool or int). These ops take int32 only: the frontend carries int8 / uint8 through int32
(frontend/rules/bitwise.py), so each bit width's semantics is spelled out once there.
"""
from __future__ import annotations

from .ops import IRTypeError, broadcast_shapes, defop
from .schema import INT, Param
from .types import DType, TensorType

SHIFTS = ("shift_left", "shift_right_logical", "shift_right_arithmetic")
BIT_COUNTS = ("population_count", "clz")


def _shift(name):
    def infer(ts, p):
        x, s = ts
        if not (x.dtype == s.dtype == DType.i32):
            raise IRTypeError(f"{name} takes int32 operands, got {x} and {s}")
        return [TensorType(broadcast_shapes(x.shape, s.shape), DType.i32)]

    return infer


def _count(name):
    def infer(ts, p):
        (x,) = ts
        if x.dtype != DType.i32:
            raise IRTypeError(f"{name} takes an int32 operand, got {x}")
        return [x]

    return infer


for _n in SHIFTS:
    defop(_n, "elementwise", 2, params={}, differentiable=False)(_shift(_n))
for _n in BIT_COUNTS:
    defop(_n, "elementwise", 1, params={}, differentiable=False)(_count(_n))


@defop("reduce_precision", "elementwise", 1,
       params={"exponent_bits": Param(INT), "mantissa_bits": Param(INT)})
def _reduce_precision(ts, p):
    """XLA's ReducePrecision: round to nearest even at ``mantissa_bits``, then values beyond
    the range of ``exponent_bits`` become +-inf and values below its smallest normal +-0;
    NaN stays NaN."""
    (x,) = ts
    if not x.dtype.is_float:
        raise IRTypeError(f"reduce_precision takes a float operand, got {x}")
    if p["exponent_bits"] < 1 or p["mantissa_bits"] < 0:
        raise IRTypeError(f"reduce_precision needs exponent_bits >= 1 and mantissa_bits >= 0, "
                          f"got {p['exponent_bits']} and {p['mantissa_bits']}")
    return [x]
