"""Fold: shifts, bit counts and reduce_precision, on the bit patterns (numpy's unsigned
views), exactly as XLA defines them: a shift amount is read as unsigned, and one of at
least the bit width gives 0 (logical) or the sign fill (arithmetic); reduce_precision is
XLA's integer algorithm (xla/service/elemental_ir_emitter.cc, EmitReducePrecisionIR)."""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl


def _amount(s):
    su = np.asarray(s).astype(np.int64) & 0xFFFFFFFF  # the unsigned reading of the amount
    return su, np.minimum(su, 31).astype(np.uint32)


@register_impl("fold", "shift_left")
def _shift_left(p, x, s):
    su, sc = _amount(s)
    r = np.left_shift(x.view(np.uint32), sc)
    return np.where(su < 32, r, np.uint32(0)).astype(np.uint32).view(np.int32)


@register_impl("fold", "shift_right_logical")
def _shift_right_logical(p, x, s):
    su, sc = _amount(s)
    r = np.right_shift(x.view(np.uint32), sc)
    return np.where(su < 32, r, np.uint32(0)).astype(np.uint32).view(np.int32)


@register_impl("fold", "shift_right_arithmetic")
def _shift_right_arithmetic(p, x, s):
    _, sc = _amount(s)
    return np.asarray(np.right_shift(x, sc.astype(np.int32)), np.int32)  # sign fill at 31


@register_impl("fold", "population_count")
def _population_count(p, x):
    return np.asarray(np.bitwise_count(x.view(np.uint32)), np.int32)


@register_impl("fold", "clz")
def _clz(p, x):
    u = x.view(np.uint32).astype(np.float64)  # exact: < 2**53
    _, bit_length = np.frexp(u)  # u = m * 2**e, m in [0.5, 1): e is u's bit length
    return np.asarray(32 - np.where(u == 0, 0, bit_length), np.int32)


#: (exponent bits, mantissa bits, unsigned view) of the float formats
_FORMATS = {np.dtype(np.float32): (8, 23, np.uint32), np.dtype(np.float16): (5, 10, np.uint16)}


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """XLA's ReducePrecision of a float32 / float16 array, on its bit pattern."""
    src_e, src_m, unsigned = _FORMATS[x.dtype]
    nbits = 8 * x.dtype.itemsize
    full = (1 << nbits) - 1
    xi = np.ascontiguousarray(x).view(unsigned).astype(np.uint64)
    if mantissa_bits < src_m:
        last = 1 << (src_m - mantissa_bits)  # the last mantissa bit kept
        bias = (last >> 1) - 1 + ((xi & last) >> (src_m - mantissa_bits))  # ties to even
        xi = ((xi + bias) & full) & (~(last - 1) & full)
    if exponent_bits < src_e:
        sign, exp_mask = 1 << (nbits - 1), ((1 << src_e) - 1) << src_m
        reduced_bias, src_bias = (1 << (exponent_bits - 1)) - 1, (1 << (src_e - 1)) - 1
        exp = xi & exp_mask
        zero = xi & sign
        xi = np.where(exp > ((src_bias + reduced_bias) << src_m), zero | exp_mask,
                      np.where(exp <= ((src_bias - reduced_bias) << src_m), zero, xi))
    r = xi.astype(unsigned).view(x.dtype).reshape(x.shape)
    if mantissa_bits > 0:
        r = np.where(np.isnan(x), x, r)
    return np.asarray(r, x.dtype)


@register_impl("fold", "reduce_precision")
def _reduce_precision(p, x):
    if p["mantissa_bits"] == 0:
        return None  # not lowered either (coreml/rules/bitwise.py)
    return reduce_precision(x, p["exponent_bits"], p["mantissa_bits"])
