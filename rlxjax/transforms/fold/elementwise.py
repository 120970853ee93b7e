"""Fold: elementwise ops, in the operands' dtype (numpy's float32 kernels for the
transcendentals, as Core ML's own within an ulp). Where an op's rounding is specified
(integer_pow's square-and-multiply, round's tie rules, fmod) the same sequence is used,
so folding is bit-exact."""
from __future__ import annotations

import math

import numpy as np

from ...ir.ops import register_impl

_UNARY = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log1p": np.log1p, "expm1": np.expm1,
    "tanh": np.tanh, "sqrt": np.sqrt, "floor": np.floor, "ceil": np.ceil, "sin": np.sin,
    "cos": np.cos, "abs": np.abs, "sign": np.sign, "square": np.square,
}
_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
    "min": np.minimum, "pow": np.power, "eq": np.equal, "ne": np.not_equal, "lt": np.less,
    "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
}
_LOGIC = {"and": (np.logical_and, np.bitwise_and), "or": (np.logical_or, np.bitwise_or),
          "xor": (np.logical_xor, np.bitwise_xor)}


def _same(x, r):
    return np.asarray(r, dtype=x.dtype)


for _name, _fn in _UNARY.items():
    register_impl("fold", _name)(lambda p, x, _fn=_fn: _same(x, _fn(x)))

for _name, _fn in _BINARY.items():
    register_impl("fold", _name)(lambda p, x, y, _fn=_fn: np.asarray(_fn(x, y)))

for _name, (_bool, _bits) in _LOGIC.items():
    register_impl("fold", _name)(
        lambda p, x, y, _b=_bool, _i=_bits: np.asarray((_b if x.dtype == bool else _i)(x, y)))


@register_impl("fold", "not")
def _not(p, x):
    return np.asarray(np.logical_not(x) if x.dtype == bool else np.invert(x))


@register_impl("fold", "neg")
def _neg(p, x):
    return _same(x, np.negative(x))


@register_impl("fold", "logistic")
def _logistic(p, x):
    one = x.dtype.type(1)
    return _same(x, one / (one + np.exp(-x)))


@register_impl("fold", "rsqrt")
def _rsqrt(p, x):
    return _same(x, x.dtype.type(1) / np.sqrt(x))


_erf64 = np.frompyfunc(math.erf, 1, 1)
_erfc64 = np.frompyfunc(math.erfc, 1, 1)


@register_impl("fold", "erf")
def _erf(p, x):  # numpy has no erf: float64 math.erf, rounded once to x's dtype
    return np.asarray(_erf64(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


@register_impl("fold", "erfc")
def _erfc(p, x):
    return np.asarray(_erfc64(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


@register_impl("fold", "stop_gradient")
def _identity(p, x):
    return x


@register_impl("fold", "round")
def _round(p, x):
    if p["method"] == "half_even":
        return _same(x, np.rint(x))
    # half away from zero from floor, as JAX's lowering: |x| - floor(|x|) is exact
    a = np.abs(x)
    t = np.floor(a)
    r = np.where(a - t >= x.dtype.type(0.5), t + x.dtype.type(1), t)
    return _same(x, np.copysign(r, x))


@register_impl("fold", "integer_pow")
def _integer_pow(p, x):
    y = p["y"]
    if y == 0:
        return np.ones_like(x)
    acc, base, n = None, x, abs(y)
    while n > 0:  # square-and-multiply, the sequence JAX's lowering uses
        if n & 1:
            acc = base if acc is None else _same(x, acc * base)
        n >>= 1
        if n:
            base = _same(x, base * base)
    return _same(x, x.dtype.type(1) / acc) if y < 0 else _same(x, acc)


@register_impl("fold", "div")
def _div(p, x, y):
    if x.dtype.kind == "f":
        return _same(x, np.divide(x, y))
    if _int_division_undefined(x, y):
        return None
    q = np.floor_divide(x, y)  # JAX truncates toward zero
    fix = (q * y != x) & ((x < 0) != (y < 0))
    return _same(x, q + fix.astype(x.dtype))


@register_impl("fold", "rem")
def _rem(p, x, y):
    if x.dtype.kind != "f" and _int_division_undefined(x, y):
        return None
    return _same(x, np.fmod(x, y))  # the sign of the dividend, as C and JAX


def _int_division_undefined(x, y) -> bool:
    """Division by zero, or INT_MIN / -1: XLA and Core ML each define their own result."""
    lo = np.iinfo(x.dtype).min
    return bool(np.any(y == 0) or np.any((x == lo) & (y == -1)))


@register_impl("fold", "select")
def _select(p, pred, on_false, on_true):
    return np.asarray(np.where(pred, on_true, on_false))


@register_impl("fold", "clamp")
def _clamp(p, lo, x, hi):
    return np.asarray(np.minimum(np.maximum(x, lo), hi))


@register_impl("fold", "convert")
def _convert(p, x):
    to = np.dtype(p["dtype"].np)
    if to.kind in "iu" and x.dtype.kind == "f":
        # XLA (jax.jit on CPU): truncate, saturate at the type's range, NaN -> 0; the Core
        # ML lowering (coreml/rules/convert.py) computes the same
        info = np.iinfo(to)
        t = np.trunc(x.astype(np.float64))
        return np.asarray(np.clip(np.where(np.isnan(t), 0, t), info.min, info.max).astype(to))
    if to == np.bool_:
        return np.asarray(x != 0)
    return np.asarray(x.astype(to))
