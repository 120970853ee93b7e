"""VJP rules: the elementwise math of ir/special.py, each JAX's own derivative formula
(jax/_src/lax/lax.py and special.py), so gradients agree with ``jax.grad`` also where the
formula meets a singularity. Where JAX has no derivative (nextafter, igamma_grad_a, zeta;
polygamma in its order, betainc in a and b) rlxjax refuses too, naming the line."""
from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedPrimitiveError
from .registry import refuse_vjp, vjp_rule


def _k(ctx, v, like):
    return ctx.scalar(v, like)


def _unary(fn):
    """Register ``fn(ctx, x, out) -> d(out)/dx``; the rule multiplies by the cotangent."""

    def rule(ctx, node, cts, needs):
        (ct,) = cts
        return [ctx.add("mul", ct, fn(ctx, node.inputs[0], node.output))]

    return rule


def _one_minus_x2(c, x):
    return c.add("sub", _k(c, 1.0, x), c.add("mul", x, x))


def _i1e_slope(c, x, o):
    # JAX: i0e(x) - i1e(x)·(sign(x) + 1/x), and 1/2 where |x| <= eps (x guarded there)
    eps = _k(c, float(np.finfo(x.dtype.np).eps), x)
    not_tiny = c.add("gt", c.add("abs", x), eps)
    safe = c.add("select", not_tiny, eps, x)
    slope = c.add("sub", c.add("bessel_i0e", safe),
                  c.add("mul", o, c.add("add", c.add("sign", safe),
                                        c.add("div", _k(c, 1.0, x), safe))))
    return c.add("select", not_tiny, _k(c, 0.5, x), slope)


_UNARY = {
    "tan": lambda c, x, o: c.add("add", _k(c, 1.0, o), c.add("mul", o, o)),
    "asin": lambda c, x, o: c.add("rsqrt", _one_minus_x2(c, x)),
    "acos": lambda c, x, o: c.add("neg", c.add("rsqrt", _one_minus_x2(c, x))),
    "atan": lambda c, x, o: c.add("div", _k(c, 1.0, x),
                                  c.add("add", _k(c, 1.0, x), c.add("mul", x, x))),
    "sinh": lambda c, x, o: c.add("cosh", x),
    "cosh": lambda c, x, o: c.add("sinh", x),
    "asinh": lambda c, x, o: c.add("rsqrt", c.add("add", c.add("mul", x, x), _k(c, 1.0, x))),
    "acosh": lambda c, x, o: c.add("rsqrt", c.add("sub", c.add("mul", x, x), _k(c, 1.0, x))),
    "atanh": lambda c, x, o: c.add("div", c.add("div", _k(c, 1.0, x), c.add(
        "add", _k(c, 1.0, x), x)), c.add("sub", _k(c, 1.0, x), x)),
    "cbrt": lambda c, x, o: c.add("mul", _k(c, 1.0 / 3.0, x), c.add("integer_pow", o, y=-2)),
    "erf_inv": lambda c, x, o: c.add("mul", _k(c, math.sqrt(math.pi) / 2.0, x),
                                     c.add("exp", c.add("mul", o, o))),
    "lgamma": lambda c, x, o: c.add("digamma", x),
    "digamma": lambda c, x, o: c.add("polygamma", _k(c, 1.0, x), x),
    "bessel_i0e": lambda c, x, o: c.add("sub", c.add("bessel_i1e", x),
                                        c.add("mul", c.add("sign", x), o)),
    "bessel_i1e": _i1e_slope,
}
for _op, _fn in _UNARY.items():
    vjp_rule(_op)(_unary(_fn))


def _pair(ctx, node, ct_a, ct_b):
    a, b = node.inputs[:2]
    return [None if ct_a is None else ctx.sum_to(ct_a, a.shape),
            None if ct_b is None else ctx.sum_to(ct_b, b.shape)]


@vjp_rule("atan2")
def _atan2(ctx, node, cts, needs):
    # atan2(y, x): d/dy = x / (x² + y²), d/dx = -y / (x² + y²)
    (ct,), (y, x) = cts, node.inputs
    r2 = ctx.add("add", ctx.add("mul", y, y), ctx.add("mul", x, x))
    return _pair(ctx, node, ctx.add("mul", ct, ctx.add("div", x, r2)) if needs[0] else None,
                 ctx.add("mul", ct, ctx.add("div", ctx.add("neg", y), r2)) if needs[1] else None)


def _igamma_dx(ctx, a, x):
    """d/dx igamma(a, x) = exp(-x + (a - 1)·log(x) - lgamma(a)) (JAX's igamma_gradx)."""
    am1 = ctx.add("sub", a, _k(ctx, 1.0, a))
    e = ctx.add("sub", ctx.add("add", ctx.add("neg", x), ctx.add("mul", am1, ctx.add("log", x))),
                ctx.add("lgamma", a))
    return ctx.add("exp", e)


@vjp_rule("igamma", "igammac")
def _igamma(ctx, node, cts, needs):
    (ct,), (a, x) = cts, node.inputs
    sign = "neg" if node.op == "igammac" else None

    def signed(v):
        return ctx.add(sign, v) if sign else v

    ct_a = signed(ctx.add("mul", ct, ctx.add("igamma_grad_a", a, x))) if needs[0] else None
    ct_x = signed(ctx.add("mul", ct, _igamma_dx(ctx, a, x))) if needs[1] else None
    return _pair(ctx, node, ct_a, ct_x)


@vjp_rule("polygamma")
def _polygamma(ctx, node, cts, needs):
    (ct,), (m, x) = cts, node.inputs
    if needs[0]:
        raise UnsupportedPrimitiveError(
            "polygamma", node.source, "its derivative in the order m is not defined "
            "(JAX does not define it either); differentiate in x only")
    m1 = ctx.add("add", m, _k(ctx, 1.0, m))
    return _pair(ctx, node, None, ctx.add("mul", ct, ctx.add("polygamma", m1, x)))


@vjp_rule("betainc")
def _betainc(ctx, node, cts, needs):
    (ct,), (a, b, x) = cts, node.inputs
    if needs[0] or needs[1]:
        raise UnsupportedPrimitiveError(
            "regularized_incomplete_beta", node.source, "its derivative in a and b is not "
            "implemented (JAX does not implement it either); differentiate in x only")
    one = _k(ctx, 1.0, x)
    lbeta = ctx.add("sub", ctx.add("add", ctx.add("lgamma", a), ctx.add("lgamma", b)),
                    ctx.add("lgamma", ctx.add("add", a, b)))
    e = ctx.add("add", ctx.add("mul", ctx.add("sub", b, one),
                               ctx.add("log1p", ctx.add("neg", x))),
                ctx.add("mul", ctx.add("sub", a, one), ctx.add("log", x)))
    dx = ctx.add("exp", ctx.add("sub", e, lbeta))
    return [None, None, ctx.sum_to(ctx.add("mul", ct, dx), x.shape)]


refuse_vjp("nextafter has no derivative in JAX either (it is piecewise constant)", "nextafter")
refuse_vjp("JAX defines no derivative of igamma_grad_a (a second derivative of igamma in a)",
           "igamma_grad_a")
refuse_vjp("JAX defines no derivative of the Hurwitz zeta function", "zeta")
