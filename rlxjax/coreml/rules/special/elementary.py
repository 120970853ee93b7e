"""Lowering: inverse trigonometric and hyperbolic functions, cube root, nextafter.

MIL (iOS15 elementwise_unary) has tan, asin, acos, atan, sinh, cosh and atanh: those lower
to the one op. asinh, acosh, atan2 and cbrt are composed here from exact reductions and
MIL ops, nextafter from float arithmetic that is exact under IEEE round-to-nearest (MIL
has no bitcast). Accuracies against float64: docs/numerics.md ("Elementwise math").
"""
from __future__ import annotations

import math

import numpy as np

from ....ir import DType
from ...registry import lowering
from .compose import Fx

_NATIVE = {
    "tan": lambda b, t, x: b.op("tan", t, x=x),
    "asin": lambda b, t, x: b.op("asin", t, x=x),
    "acos": lambda b, t, x: b.op("acos", t, x=x),
    "atan": lambda b, t, x: b.op("atan", t, x=x),
    "sinh": lambda b, t, x: b.op("sinh", t, x=x),
    "cosh": lambda b, t, x: b.op("cosh", t, x=x),
    "atanh": lambda b, t, x: b.op("atanh", t, x=x),
}


@lowering(*_NATIVE)
def _native(ctx, node, x):
    return _NATIVE[node.op](ctx.b, ctx.out_type(node), x)


def _fx(ctx, node) -> Fx:
    return Fx(ctx.b, ctx.out_type(node).dtype)


def _big(f: Fx) -> float:
    """Beyond this |x|, asinh(x) = acosh(x) = log(2|x|) to within 1/(4x²), far below an ulp."""
    return 2.0 ** 13 if f.dt == DType.f32 else 2.0 ** 6


@lowering("asinh")
def _asinh(ctx, node, x):
    # asinh(a) = log1p(a + a²/(1 + sqrt(1 + a²))) (no cancellation for a >= 0), odd in x;
    # log(a) + log 2 for large a (a² would overflow); x itself where a² < ulp (keeps -0).
    f = _fx(ctx, node)
    a = f.abs(x)
    a2 = f.mul(a, a)
    mid = f.log1p(f.add(a, f.div(a2, f.add(f.sqrt(f.add(a2, 1)), 1))))
    big = f.add(f.log(a), math.log(2.0))
    r = f.select(f.lt(a, _big(f)), mid, big)
    r = f.select(f.lt(x, 0), f.neg(r), r)
    return f.select(f.lt(a, 2.0 ** -12 if f.dt == DType.f32 else 2.0 ** -6), x, r)


@lowering("acosh")
def _acosh(ctx, node, x):
    # acosh(x) = log1p(t + sqrt(t·(t + 2))), t = x - 1 (exact near 1, where log(x + ...)
    # would lose the digits of a small result); log(x) + log 2 for large x; NaN below 1.
    f = _fx(ctx, node)
    t = f.sub(x, 1)
    mid = f.log1p(f.add(t, f.sqrt(f.mul(t, f.add(t, 2)))))
    big = f.add(f.log(x), math.log(2.0))
    r = f.select(f.lt(x, _big(f)), mid, big)
    return f.select(f.lt(x, 1), np.nan, r)


@lowering("atan2")
def _atan2(ctx, node, y, x):
    # atan of min(|x|,|y|)/max(|x|,|y|) in [0, 1], then the octant: pi/2 - t when |y| > |x|,
    # pi - t when x < 0 (or -0), the sign of y (or -0). 0/0 and inf/inf are fixed up: the
    # ratio is 0 for two zeros and 1 for two infinities, as C's atan2.
    f = _fx(ctx, node)
    ax, ay = f.abs(x), f.abs(y)
    mn, mx = f.min(ax, ay), f.max(ax, ay)
    r = f.div(mn, mx)
    r = f.select(f.eq(mx, 0), 0.0, r)
    r = f.select(f.and_(f.isinf(ax), f.isinf(ay)), 1.0, r)
    t = f.atan(r)
    t = f.select(f.gt(ay, ax), f.sub(np.pi / 2, t), t)
    t = f.select(f.is_negative(x), f.sub(np.pi, t), t)
    t = f.select(f.is_negative(y), f.neg(t), t)
    return f.select(f.or_(f.isnan(x), f.isnan(y)), np.nan, t)


@lowering("cbrt")
def _cbrt(ctx, node, x):
    # pow(|x|, 1/3), then one Newton step y - (y - a/y²)/3, which removes pow's error and
    # the error of the rounded exponent 1/3 (|log a|·3e-8 relative, 12 ulps at 1e30);
    # zeros, infinities and NaN pass through; the sign is x's.
    f = _fx(ctx, node)
    a = f.abs(x)
    y = f.pow(a, 1.0 / 3.0)
    y = f.sub(y, f.div(f.sub(y, f.div(a, f.mul(y, y))), 3.0))
    y = f.select(f.lt(x, 0), f.neg(y), y)
    return f.select(f.or_(f.eq(a, 0), f.eq(a, np.inf)), x, y)


@lowering("nextafter")
def _nextafter(ctx, node, x, y):
    # Exact without a bitcast, under IEEE round-to-nearest: with c = 0.625·2^(1-p) (p the
    # significand bits), |x|·c lies strictly between half and one and a half of the gap
    # to x's neighbour on either side (the gap below a power of two is half the gap
    # above it, and 0.625 fits both), so x ± |x|·c rounds to that neighbour. Below
    # 2^(emin+p+1) the step would be subnormal: x is scaled by 2^(p+1) first (exact),
    # stepped, scaled back (exact: the result is normal). At or below the smallest normal
    # the gap is the smallest subnormal on both sides. Zeros, infinities, NaN and x == y
    # follow C's nextafter (a zero result keeps x's sign).
    t = ctx.out_type(node)
    if node.outputs[0].type.dtype != t.dtype:
        raise ctx.unsupported(node, "nextafter must step in float32 exactly, and this "
                                    "program computes float32 in float16 (precision="
                                    "'fp16'): compile it with precision='fp32'")
    f = _fx(ctx, node)
    fi = np.finfo(t.dtype.np)
    p = fi.nmant + 1
    c = 0.625 * 2.0 ** (1 - p)
    scale = 2.0 ** (p + 1)
    up = f.gt(y, x)
    ax = f.abs(x)
    big = f.add(x, f.select(up, f.mul(ax, c), f.mul(ax, -c)))
    xs = f.mul(x, scale)
    axs = f.abs(xs)
    small = f.mul(f.add(xs, f.select(up, f.mul(axs, c), f.mul(axs, -c))), 1.0 / scale)
    sub = f.add(x, f.select(up, float(fi.smallest_subnormal), -float(fi.smallest_subnormal)))
    r = f.select(f.lt(ax, float(fi.smallest_normal) * scale), small, big)
    r = f.select(f.le(ax, float(fi.smallest_normal)), sub, r)
    r = f.select(f.eq(r, 0), f.mul(x, 0.0), r)
    r = f.select(f.eq(ax, np.inf), f.select(f.lt(x, 0), -float(fi.max), float(fi.max)), r)
    r = f.select(f.eq(x, y), y, r)
    return f.select(f.or_(f.isnan(x), f.isnan(y)), np.nan, r)
