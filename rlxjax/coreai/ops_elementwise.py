"""RLX elementwise ops -> Core AI, each exact where Core AI has no op of the same meaning
(docs/coreai.md lists every composition and its accuracy):

* ``floor`` is ``floor_divide(x, 1)`` (exact, -0.0 kept) with ±inf passed through (Core AI
  gives NaN there); ``ceil(x) = -floor(-x)``; ``round`` half-even is Core AI's ``round``
  (ties to even, measured bit for bit against ``np.rint``), half-away is composed from floor;
* ``sign`` keeps ±0 and NaN; ``neg`` is ``x * -1`` (``0 - x`` turns -0.0 into +0.0);
* ``log1p``: ``2·atanh(x / (x + 2))`` on (-0.5, 1], ``log(1 + x)`` elsewhere (Core AI's
  compiler folds ``(x + 1) - 1`` into ``x``, which breaks Goldberg's trick); ``expm1``:
  Kahan's trick (as the Core ML lowering; measured intact);
* float ``rem`` is Core AI's ``modulo`` (C ``fmod``: the sign of the dividend, as
  ``lax.rem``); integer ``div`` / ``rem`` never divide by 0 or compute INT_MIN / -1 (Core AI's
  runtime dies with SIGILL there): the divisor is replaced by 1 where it is 0 or -1 and
  XLA's results are selected (x / 0 = -1, x % 0 = x, x / -1 = -x wrapping, x % -1 = 0);
  Core AI's integer ``floor_divide`` floors, its ``modulo`` truncates, so the truncating
  quotient is ``floor_divide(x - modulo(x, y), y)``, an exact division;
* comparisons: Core AI has ``equal`` / ``not_equal`` / ``greater``; bools compare as int32;
* integer ``and`` / ``or`` / ``xor`` / ``not`` are Core AI's bitwise ops (``not`` = xor -1).
"""
from __future__ import annotations

import numpy as np

from ..ir import DType
from . import ca_private
from .ops_base import NP, SMALL, carried, rule, unsupported

_BINARY = {"add": "broadcasting_add", "sub": "broadcasting_sub", "mul": "broadcasting_mul",
           "max": "broadcasting_maximum", "min": "broadcasting_minimum"}
_UNARY = {"exp": "exp", "log": "log", "tanh": "tanh", "sqrt": "sqrt", "rsqrt": "rsqrt",
          "logistic": "sigmoid", "sin": "sin", "cos": "cos", "erf": "erf", "tan": "tan",
          "asin": "asin", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "asinh": "asinh",
          "atanh": "atanh"}


def _t(node, i=0):
    return node.inputs[i].type


@rule(*_BINARY)
def _binary(ctx, node, ins):
    return getattr(ctx.ca, _BINARY[node.op])(*ins)


@rule("pow")
def _pow(ctx, node, ins):
    if not _t(node).dtype.is_float:
        raise unsupported(node, "integer pow is not lowered for Core AI yet")
    return ctx.ca.broadcasting_pow(*ins)


@rule(*_UNARY)
def _unary(ctx, node, ins):
    if not _t(node).dtype.is_float:
        raise unsupported(node, f"{node.op} of {_t(node).dtype} is not lowered for Core AI")
    return getattr(ctx.ca, _UNARY[node.op])(ins[0])


@rule("acos", "acosh")
def _private_unary(ctx, node, ins):  # the dialect's own ops (not in the authoring API):
    t = node.outputs[0].type  # acos 0.75 ulp, acosh 1.21 ulp at worst (docs/coreai.md)
    if not t.dtype.is_float:
        raise unsupported(node, f"{node.op} of {t.dtype} is not lowered for Core AI")
    return ca_private.typed(node.op, t.shape, carried(t.dtype).np.name, x=ins[0])


@rule("exp2")
def _exp2(ctx, node, ins):  # pow(2, x): 0.50 ulp at worst on [-6, 6] (docs/coreai.md)
    return ctx.ca.broadcasting_pow(ctx.scalar(2, _t(node).dtype), ins[0])


@rule("abs")
def _abs(ctx, node, ins):
    return ctx.ca.abs_(ins[0])


@rule("neg")
def _neg(ctx, node, ins):
    return ctx.neg(ins[0], _t(node).dtype)


@rule("square")
def _square(ctx, node, ins):
    return ctx.mul(ins[0], ins[0])


@rule("stop_gradient")
def _identity(ctx, node, ins):
    return ins[0]


def floor(ctx, x, dt: DType):
    """floor(x), exact: Core AI's float floor_divide by 1, ±inf kept (it gives NaN), tested
    as ``|x| > max finite``: Core AI's compiler folded ``equal(2.0, inf)`` of two constants
    to true (a constant operand: the special functions' decompositions, legalize/special.py)."""
    f = ctx.ca.broadcasting_floor_divide(x, ctx.scalar(1, dt))
    inf = ctx.gt(ctx.ca.abs_(x), ctx.scalar(np.finfo(NP[carried(dt)]).max, dt))
    return ctx.where(inf, x, f)


@rule("floor")
def _floor(ctx, node, ins):
    return floor(ctx, ins[0], _t(node).dtype)


@rule("ceil")
def _ceil(ctx, node, ins):
    dt = _t(node).dtype
    return ctx.neg(floor(ctx, ctx.neg(ins[0], dt), dt), dt)


@rule("round")
def _round(ctx, node, ins):
    x, dt = ins[0], _t(node).dtype
    if node.params["method"] == "half_even":
        return ctx.ca.round_(x)
    a = ctx.ca.abs_(x)
    t = floor(ctx, a, dt)
    half = ctx.gt(ctx.scalar(0.5, dt), ctx.sub(a, t))  # a - t < 0.5 (exact: a - t)
    r = ctx.where(half, t, ctx.add(t, ctx.scalar(1, dt)))
    r = ctx.where(ctx.lt(x, ctx.scalar(0, dt)), ctx.neg(r, dt), r)
    return ctx.where(ctx.eq(x, ctx.scalar(0, dt)), x, r)  # -0.0 stays -0.0


@rule("sign")
def _sign(ctx, node, ins):
    x, dt = ins[0], _t(node).dtype
    zero = ctx.scalar(0, dt)
    s = ctx.where(ctx.lt(x, zero), ctx.scalar(-1, dt), x)  # 0, -0, NaN stay themselves
    return ctx.where(ctx.gt(x, zero), ctx.scalar(1, dt), s)


@rule("log1p")
def _log1p(ctx, node, ins):
    # Goldberg's log(u)·x/(u − 1) is undone by Core AI's compiler, which folds (x + 1) − 1
    # into x (measured: log1p(1e-30) came out 0). Instead, by range:
    #   x in (-0.5, 1]: 2·atanh(x / (x + 2)) (an identity; atanh well conditioned there),
    #   else log(1 + x) (1 + x is exact on [-1, -0.5]; above 1 its rounding costs < 1 ulp).
    x, dt = ins[0], _t(node).dtype
    one = ctx.scalar(1, dt)
    direct = ctx.ca.log(ctx.add(x, one))
    s = ctx.div(x, ctx.add(x, ctx.scalar(2, dt)))
    small = ctx.mul(ctx.scalar(2, dt), ctx.ca.atanh(s))
    inside = ctx.and_(ctx.gt(x, ctx.scalar(-0.5, dt)), ctx.gt(ctx.scalar(1, dt), x))
    return ctx.where(ctx.or_(inside, ctx.eq(x, one)), small, direct)


@rule("expm1")
def _expm1(ctx, node, ins):
    # Kahan: u = exp(x); expm1(x) = (u - 1) * x / log(u), x where u == 1, -1 where u - 1 == -1
    x, dt = ins[0], _t(node).dtype
    one = ctx.scalar(1, dt)
    u = ctx.ca.exp(x)
    d = ctx.sub(u, one)
    general = ctx.div(ctx.mul(d, x), ctx.ca.log(u))
    out = ctx.where(ctx.eq(d, ctx.scalar(-1, dt)), ctx.scalar(-1, dt), general)
    out = ctx.where(ctx.eq(u, one), x, out)
    return ctx.where(ctx.eq(u, ctx.scalar(np.inf, dt)), u, out)


@rule("clamp")
def _clamp(ctx, node, ins):
    lo, x, hi = ins  # lax.clamp(lo, x, hi) = min(max(x, lo), hi)
    return ctx.ca.broadcasting_minimum(ctx.ca.broadcasting_maximum(x, lo), hi)


def _safe_divisor(ctx, y, dt):
    """(y with 0 and -1 replaced by 1, mask y == 0, mask y == -1)."""
    zero = ctx.eq(y, ctx.scalar(0, dt))
    minus1 = ctx.eq(y, ctx.scalar(-1, dt))
    return ctx.where(ctx.or_(zero, minus1), ctx.scalar(1, dt), y), zero, minus1


@rule("div")
def _div(ctx, node, ins):
    x, y = ins
    dt = node.outputs[0].type.dtype
    if dt.is_float:
        return ctx.div(x, y)
    ys, zero, minus1 = _safe_divisor(ctx, y, dt)
    q = ctx.ca.broadcasting_floor_divide(ctx.sub(x, ctx.ca.broadcasting_modulo(x, ys)), ys)
    q = ctx.where(minus1, ctx.sub(ctx.scalar(0, dt), x), q)  # wraps: INT_MIN / -1 = INT_MIN
    return ctx.where(zero, ctx.scalar(-1, dt), q)


@rule("rem")
def _rem(ctx, node, ins):
    x, y = ins
    dt = node.outputs[0].type.dtype
    if dt.is_float:
        return ctx.ca.broadcasting_modulo(x, y)  # fmod, as lax.rem (measured)
    ys, zero, _ = _safe_divisor(ctx, y, dt)
    r = ctx.ca.broadcasting_modulo(x, ys)  # x % 1 = 0 = x % -1
    return ctx.where(zero, x, r)


@rule("integer_pow")
def _integer_pow(ctx, node, ins):
    x, y, t = ins[0], node.params["y"], node.outputs[0].type
    if y == 0:
        return ctx.full(1, t)
    acc, base, n = None, x, abs(y)
    # fp16: each product rounded, as XLA rounds each f16 multiply
    rnd = ctx.round16 if t.dtype == DType.f16 and not ctx.native_f16 else (lambda v: v)
    while n:  # square and multiply: the products XLA's integer_pow computes
        if n & 1:
            acc = base if acc is None else rnd(ctx.mul(acc, base))
        n >>= 1
        if n:
            base = rnd(ctx.mul(base, base))
    if y < 0:  # (the last rounding is lower_nodes')
        acc = ctx.div(ctx.scalar(1, t.dtype), acc)
    return acc


@rule("and", "or", "xor", "not")
def _logic(ctx, node, ins):
    ca, dt = ctx.ca, node.outputs[0].type.dtype
    if dt == DType.bool:
        return ca.not_(ins[0]) if node.op == "not" else \
            getattr(ca, f"broadcasting_{node.op}")(*ins)
    if node.op == "not":
        return ca.broadcasting_bitwise_xor(ins[0], ctx.scalar(-1, dt))
    return getattr(ca, f"broadcasting_bitwise_{node.op}")(*ins)


@rule("eq", "ne", "gt", "lt", "ge", "le")
def compare(ctx, node, ins):
    a, b = ins
    if _t(node).dtype == DType.bool:
        a, b = ctx.cast(a, DType.i32), ctx.cast(b, DType.i32)
    op = node.op
    if op in ("eq", "ne", "gt", "lt"):
        return getattr(ctx, op)(a, b)
    gt = ctx.gt(a, b) if op == "ge" else ctx.lt(a, b)
    return ctx.or_(gt, ctx.eq(a, b))  # exact, NaN included (both false)


@rule("select")
def _select(ctx, node, ins):  # select(which, case0, case1, ...), as lax.select_n
    which, cases = ins[0], ins[1:]
    if _t(node).dtype == DType.bool:
        if ctx.loops:  # in a counted loop (Ctx.widen: broadcasting where-s hung there)
            return ctx.select_in_loop(which, cases[1], cases[0], node.outputs[0].type.dtype)
        return ctx.where(which, cases[1], cases[0])
    out = cases[0]
    for k in range(1, len(cases)):
        out = ctx.where(ctx.eq(which, ctx.scalar(k, _t(node).dtype)), cases[k], out)
    return out


@rule("constant")
def _constant(ctx, node, ins):
    return ctx.const(node.params["value"], NP[carried(node.outputs[0].type.dtype)])


@rule("convert")
def _convert(ctx, node, ins):
    src, dst = _t(node).dtype, node.outputs[0].type.dtype
    if carried(dst) == carried(src):  # f16 <-> f32: the rounding is lower_nodes'
        return ins[0]
    if dst == DType.bool:  # x != 0: NaN is True, as in JAX
        return ctx.ne(ins[0], ctx.scalar(0, src))
    if dst not in NP and dst not in SMALL:
        raise unsupported(node, f"convert {src} -> {dst} is not lowered for Core AI")
    if dst in SMALL:
        if src.is_float:  # truncation saturating at the 8-bit range, NaN -> 0 (XLA's)
            lo, hi = (-128, 127) if dst == DType.i8 else (0, 255)
            z = ctx.where(ctx.isnan(ins[0]), ctx.scalar(0, src), ins[0])
            z = ctx.ca.broadcasting_minimum(ctx.ca.broadcasting_maximum(
                z, ctx.scalar(lo, src)), ctx.scalar(hi, src))
            return ctx.cast(z, DType.i32)
        v = ins[0] if src != DType.bool else ctx.cast(ins[0], DType.i32)
        return ctx.wrap(v, dst) if src not in SMALL or src != dst else v
    if src in SMALL:
        return ins[0] if dst == DType.i32 else ctx.cast(ins[0], dst)
    return ctx.cast(ins[0], dst)  # float -> int32 truncates and saturates, NaN -> 0, as XLA
