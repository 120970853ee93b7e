"""Frontend rules: elementwise arithmetic, comparisons, logic, select, casts."""
from __future__ import annotations

import numpy as np

from ...ir import DType, dtype_from_numpy
from ..registry import rule

_SAME_NAME_UNARY = ("neg", "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "sqrt",
                    "rsqrt", "abs", "sign", "floor", "ceil", "erf", "sin", "cos", "square")
_SAME_NAME_BINARY = ("add", "sub", "mul", "div", "rem",
                     "eq", "ne", "lt", "le", "gt", "ge")  # and/or/xor/not: bitwise.py


def _unary(op):
    def fn(ctx, eqn, x):
        return ctx.add(op, x)

    return fn


def _binary(op):
    def fn(ctx, eqn, x, y):
        return ctx.add(op, x, y)

    return fn


for _p in _SAME_NAME_UNARY:
    rule(_p)(_unary(_p))
for _p in _SAME_NAME_BINARY:
    rule(_p)(_binary(_p))
rule("add_any")(_binary("add"))


@rule("max", "min")
def _max_min(ctx, eqn, x, y):
    # JAX orders bools False < True: max is 'or', min is 'and' (MIL's maximum takes numbers).
    if x.dtype == DType.bool:
        return ctx.add("or" if eqn.primitive.name == "max" else "and", x, y)
    return ctx.add(eqn.primitive.name, x, y)


@rule("pow")
def _pow(ctx, eqn, x, y):
    # lax.pow takes an integer exponent array too; XLA converts it to the base's type
    # before the power (as JAX's own lowering does), so do the same.
    if y.dtype != x.dtype:
        y = ctx.add("convert", y, dtype=x.dtype)
    return ctx.add("pow", x, y)


@rule("integer_pow")
def _integer_pow(ctx, eqn, x):
    return ctx.add("integer_pow", x, y=int(eqn.params["y"]))


@rule("round")
def _round(ctx, eqn, x):
    method = int(eqn.params["rounding_method"])  # lax.RoundingMethod: 0 away, 1 to even
    return ctx.add("round", x, method="half_even" if method == 1 else "half_away")


@rule("copy", "copy_p", "optimization_barrier")
def _identity(ctx, eqn, *xs):
    return list(xs)


@rule("stop_gradient")
def _stop_gradient(ctx, eqn, x):
    return ctx.add("stop_gradient", x)


@rule("convert_element_type")
def _convert(ctx, eqn, x):
    new = np.dtype(eqn.params["new_dtype"])
    # uint32 travels as int32 (its range is checked by frontend/uint32.py)
    to = DType.i32 if new == np.dtype(np.uint32) else dtype_from_numpy(new)
    if to == x.dtype:
        return x
    return ctx.add("convert", x, dtype=to)


@rule("select_n")
def _select_n(ctx, eqn, pred, *cases):
    """select_n(p, c0, c1, ...) picks cases[p]; a bool p picks c1 where True."""
    if pred.dtype == DType.bool:
        if len(cases) == 1:
            return cases[0]
        return ctx.add("select", pred, cases[0], cases[1])
    out = cases[0]
    for i, c in enumerate(cases[1:], start=1):
        hit = ctx.add("eq", pred, ctx.constant(np.asarray(i, dtype=pred.dtype.np)))
        out = ctx.add("select", hit, out, c)
    return out


@rule("clamp")
def _clamp(ctx, eqn, lo, x, hi):
    # Its own op, not min(max(x, lo), hi): lax.clamp's gradient is zero at the bounds,
    # where max/min would split the cotangent.
    return ctx.add("clamp", lo, x, hi)


@rule("erfc")
def _erfc(ctx, eqn, x):
    return ctx.add("erfc", x)


@rule("is_finite")
def _is_finite(ctx, eqn, x):
    # |x| < inf is False exactly for +-inf and NaN (every comparison with NaN is False).
    inf = ctx.constant(np.asarray(np.inf, dtype=x.dtype.np))
    return ctx.add("lt", ctx.add("abs", x), inf)


@rule("device_put")
def _device_put(ctx, eqn, *xs):
    """``jax.device_put`` inside a function: the identity (a Core ML program runs on one
    device, and its values are not JAX arrays with a placement)."""
    return list(xs)
