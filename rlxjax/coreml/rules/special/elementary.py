"""Lowering: inverse trigonometric and hyperbolic functions, cube root, nextafter.

MIL (iOS15 elementwise_unary) has tan, asin, acos, atan, sinh, cosh and atanh: those lower
to the one op. asinh, acosh, atan2 and cbrt are composed here from exact reductions and
MIL ops, nextafter from float arithmetic that is exact under IEEE round-to-nearest (MIL
has no bitcast); atan2, cbrt and nextafter are ir/special_eval.py's compositions.
Accuracies against float64: docs/numerics.md ("Elementwise math").
"""
from __future__ import annotations

import math

import numpy as np

from ....ir import DType, special_eval
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
    return special_eval.atan2(_fx(ctx, node), y, x)


@lowering("cbrt")
def _cbrt(ctx, node, x):
    return special_eval.cbrt(_fx(ctx, node), x)


@lowering("nextafter")
def _nextafter(ctx, node, x, y):
    t = ctx.out_type(node)
    if node.outputs[0].type.dtype != t.dtype:
        raise ctx.unsupported(node, "nextafter must step in float32 exactly, and this "
                                    "program computes float32 in float16 (precision="
                                    "'fp16'): compile it with precision='fp32'")
    return special_eval.nextafter(_fx(ctx, node), x, y)
