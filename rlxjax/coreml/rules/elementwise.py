"""Lowering: elementwise ops, compositions that are exact where MIL has no direct op."""
from __future__ import annotations

import numpy as np

from ...ir import DType
from ..registry import lowering
from ..smallint import SMALL, wrap
from .bitwise import int_logical, int_not
from .common import Ew, scalar_like, select

_DIRECT_UNARY = {
    "exp": "exp", "exp2": "exp2", "tanh": "tanh", "sqrt": "sqrt", "erf": "erf", "sin": "sin",
    "cos": "cos", "floor": "floor", "ceil": "ceil", "square": "square", "abs": "abs",
    "sign": "sign", "logistic": "sigmoid",
}
_DIRECT_BINARY = {
    "add": "add", "sub": "sub", "mul": "mul", "max": "maximum", "min": "minimum", "pow": "pow",
    "eq": "equal", "ne": "not_equal", "lt": "less", "le": "less_equal", "gt": "greater",
    "ge": "greater_equal",
}
_COMPARE = ("eq", "ne", "lt", "le", "gt", "ge")
_LOGICAL = {"and": "logical_and", "or": "logical_or", "xor": "logical_xor"}


for _rlx, _mil in _DIRECT_UNARY.items():

    @lowering(_rlx)
    def _direct_unary(ctx, node, x, _mil=_mil):
        return ctx.b.op(_mil, ctx.out_type(node), x=x)


for _rlx, _mil in _DIRECT_BINARY.items():
    if _rlx in _COMPARE:
        continue

    @lowering(_rlx)
    def _direct_binary(ctx, node, x, y, _mil=_mil):
        return ctx.b.op(_mil, ctx.out_type(node), x=x, y=y)


@lowering(*_COMPARE)
def _compare(ctx, node, x, y):
    # MIL's comparisons take fp16/fp32/int32 only; JAX also compares bools (False < True).
    t, mil = ctx.out_type(node), _DIRECT_BINARY[node.op]
    if x.dtype != DType.bool:
        return ctx.b.op(mil, t, x=x, y=y)
    if node.op in ("eq", "ne"):
        ne = ctx.b.op("logical_xor", t, x=x, y=y)
        return ne if node.op == "ne" else ctx.b.op("logical_not", t, x=ne)
    xi = ctx.b.op("cast", x.type.with_dtype(DType.i32), x=x, dtype="int32")
    yi = ctx.b.op("cast", y.type.with_dtype(DType.i32), x=y, dtype="int32")
    return ctx.b.op(mil, t, x=xi, y=yi)


@lowering("and", "or", "xor")
def _logical(ctx, node, x, y):
    if x.dtype != DType.bool:
        return int_logical(ctx, node, x, y)  # composed from int32 arithmetic (bitwise.py)
    return ctx.b.op(_LOGICAL[node.op], ctx.out_type(node), x=x, y=y)


@lowering("not")
def _not(ctx, node, x):
    if x.dtype != DType.bool:
        return int_not(ctx, node, x)
    return ctx.b.op("logical_not", ctx.out_type(node), x=x)


@lowering("neg")
def _neg(ctx, node, x):
    # x * -1 is exact and keeps the sign of zero (0 - x would turn -0 into +0).
    return ctx.b.op("mul", ctx.out_type(node), x=x, y=scalar_like(x, -1))


@lowering("log")
def _log(ctx, node, x):
    return ctx.b.op("log", ctx.out_type(node), x=x, epsilon=scalar_like(x, 0))


@lowering("rsqrt")
def _rsqrt(ctx, node, x):
    return ctx.b.op("rsqrt", ctx.out_type(node), x=x, epsilon=scalar_like(x, 0))


@lowering("stop_gradient")
def _stop_gradient(ctx, node, x):
    return x


@lowering("select")
def _select(ctx, node, pred, on_false, on_true):
    return select(ctx.b, ctx.out_type(node), pred, on_true, on_false)


@lowering("clamp")
def _clamp(ctx, node, lo, x, hi):
    # MIL's clip wants const bounds; lax.clamp(lo, x, hi) is min(max(x, lo), hi) exactly.
    e = Ew(ctx.b)
    return e.binary("minimum", e.binary("maximum", x, lo), hi)


@lowering("div")
def _div(ctx, node, x, y):
    t = ctx.out_type(node)
    if x.dtype.is_float:
        return ctx.b.op("real_div", t, x=x, y=y)
    q, _, zero = _int_quotient(ctx.b, t, x, y)
    return q if zero is None else Ew(ctx.b).select(zero, scalar_like(q, -1), q)


@lowering("rem")
def _rem(ctx, node, x, y):
    e = Ew(ctx.b)
    t = ctx.out_type(node)
    if not x.dtype.is_float:  # x - y * trunc(x / y): exact in int32, INT_MIN included
        q, ys, zero = _int_quotient(ctx.b, t, x, y)
        r = e.binary("sub", x, e.binary("mul", q, ys))
        return r if zero is None else e.select(zero, x, r)
    # JAX's rem takes the sign of the dividend (C fmod); MIL's mod is the floor modulo.
    # On magnitudes both agree, so fmod(x, y) = sign(x) * mod(|x|, |y|), exactly.
    m = ctx.b.op("mod", t, x=e.unary("abs", x), y=e.unary("abs", y))
    return e.select(e.compare("less", x, scalar_like(x, 0)),
                    e.binary("mul", m, scalar_like(m, -1)), m)


def _int_quotient(b, t, x, y):
    """(trunc(x / y), the divisor used, mask of y == 0 or None) of integers. Integer
    division truncates toward zero in JAX; MIL's floor_div floors: trunc(x/y) = floor(x/y) + 1
    where the remainder is non-zero and the signs differ. A zero divisor (MIL leaves it
    undefined) is replaced by 1; XLA's results there (x / 0 = -1, x % 0 = x) are selected by
    the caller with the mask (None when y is a constant without zeros)."""
    e = Ew(b)
    known = b.known(y) if not isinstance(y, np.ndarray) else y
    zero = None
    if known is None or np.any(np.asarray(known) == 0):
        zero = e.compare("equal", y, scalar_like(y, 0))
        y = e.select(zero, scalar_like(y, 1), y)
    q = b.op("floor_div", t, x=x, y=y)
    r = e.binary("sub", x, e.binary("mul", q, y))
    signs_differ = e.binary("logical_xor", e.compare("less", x, scalar_like(x, 0)),
                            e.compare("less", y, scalar_like(y, 0)), DType.bool)
    fix = e.binary("logical_and", e.compare("not_equal", r, scalar_like(r, 0)),
                   signs_differ, DType.bool)
    return e.select(fix, e.binary("add", q, scalar_like(x, 1)), q), y, zero


@lowering("log1p")
def _log1p(ctx, node, x):
    # Exact-rounding trick (Goldberg): u = 1 + x; log1p(x) = log(u) * x / (u - 1), and
    # x itself where u == 1. MIL has no log1p and log(1 + x) loses all digits of tiny x.
    e = Ew(ctx.b)
    u = e.binary("add", x, scalar_like(x, 1))
    d = e.binary("sub", u, scalar_like(x, 1))
    logu = ctx.b.op("log", u.type, x=u, epsilon=scalar_like(x, 0))
    general = e.binary("mul", logu, e.binary("real_div", x, d))
    out = e.select(e.compare("equal", d, scalar_like(x, 0)), x, general)
    return e.select(e.compare("equal", u, scalar_like(x, np.inf)), u, out)


@lowering("expm1")
def _expm1(ctx, node, x):
    # Kahan's trick: u = exp(x); expm1(x) = (u - 1) * x / log(u), x where u == 1,
    # -1 where u - 1 == -1; exp(x) - 1 would cancel catastrophically for small x.
    e = Ew(ctx.b)
    u = e.unary("exp", x)
    d = e.binary("sub", u, scalar_like(x, 1))
    logu = ctx.b.op("log", u.type, x=u, epsilon=scalar_like(x, 0))
    general = e.binary("real_div", e.binary("mul", d, x), logu)
    out = e.select(e.compare("equal", d, scalar_like(x, -1)), scalar_like(x, -1), general)
    out = e.select(e.compare("equal", u, scalar_like(x, 1)), x, out)
    return e.select(e.compare("equal", u, scalar_like(x, np.inf)), u, out)


@lowering("round")
def _round(ctx, node, x):
    # MIL's round does not document its tie rule, so build both JAX rules from floor:
    # x - floor(x) is exact in binary floating point.
    e = Ew(ctx.b)
    one, half = scalar_like(x, 1), scalar_like(x, 0.5)
    if node.params["method"] == "half_away":
        a = e.unary("abs", x)
        t = e.unary("floor", a)
        up = e.compare("greater_equal", e.binary("sub", a, t), half)
        r = e.select(up, e.binary("add", t, one), t)
        return e.select(e.compare("less", x, scalar_like(x, 0)),
                        e.binary("mul", r, scalar_like(x, -1)), r)
    t = e.unary("floor", x)
    d = e.binary("sub", x, t)
    t_half = e.binary("mul", t, half)
    odd = e.compare("not_equal", e.unary("floor", t_half), t_half)
    tie_up = e.binary("logical_and", e.compare("equal", d, half), odd, DType.bool)
    up = e.binary("logical_or", e.compare("greater", d, half), tie_up, DType.bool)
    return e.select(up, e.binary("add", t, one), t)


@lowering("integer_pow")
def _integer_pow(ctx, node, x):
    # The same square-and-multiply sequence as JAX's own lowering, so results match
    # bit for bit rather than going through pow().
    y = node.params["y"]
    e = Ew(ctx.b)
    if y == 0:
        return ctx.b.full(ctx.out_type(node), 1)
    dtype = node.inputs[0].type.dtype
    if dtype in SMALL:  # int8 / uint8, carried as int32: wrapped after every product, so
        # that no int32 intermediate overflows (coreml/smallint.py)
        mul = lambda a, b: wrap(ctx.b, e.binary("mul", a, b), dtype)  # noqa: E731
    else:
        mul = lambda a, b: e.binary("mul", a, b)  # noqa: E731
    acc, base, n = None, x, abs(y)
    while n > 0:
        if n & 1:
            acc = base if acc is None else mul(acc, base)
        n >>= 1
        if n:
            base = mul(base, base)
    if y < 0:
        acc = e.binary("real_div", scalar_like(x, 1), acc)
    return acc
