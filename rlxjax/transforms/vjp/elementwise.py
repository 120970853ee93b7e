"""VJP rules: elementwise ops. Each follows JAX's own derivative convention (e.g. max/min
split ties, pow's log of a zero base) so gradients agree with ``jax.grad``."""
from __future__ import annotations

import math

from .registry import vjp_rule


def _pair(ctx, node, ct_x, ct_y, needs):
    x, y = node.inputs
    return [ctx.sum_to(ct_x, x.shape) if needs[0] and ct_x is not None else None,
            ctx.sum_to(ct_y, y.shape) if needs[1] and ct_y is not None else None]


@vjp_rule("add")
def _add(ctx, node, cts, needs):
    return _pair(ctx, node, cts[0], cts[0], needs)


@vjp_rule("sub")
def _sub(ctx, node, cts, needs):
    (ct,) = cts
    return _pair(ctx, node, ct, ctx.add("neg", ct) if needs[1] else None, needs)


@vjp_rule("mul")
def _mul(ctx, node, cts, needs):
    (ct,), (x, y) = cts, node.inputs
    return _pair(ctx, node, ctx.add("mul", ct, y) if needs[0] else None,
                 ctx.add("mul", ct, x) if needs[1] else None, needs)


@vjp_rule("div")
def _div(ctx, node, cts, needs):
    (ct,), (x, y), out = cts, node.inputs, node.output
    ct_x = ctx.add("div", ct, y) if needs[0] else None
    ct_y = ctx.add("neg", ctx.add("div", ctx.add("mul", ct, out), y)) if needs[1] else None
    return _pair(ctx, node, ct_x, ct_y, needs)


@vjp_rule("max", "min")
def _max_min(ctx, node, cts, needs):
    # JAX's convention: the cotangent goes to the operand equal to the result, split
    # in half where both are (lax._balanced_eq).
    (ct,), (x, y), out = cts, node.inputs, node.output
    one, half, zero = ctx.scalar(1.0, ct), ctx.scalar(0.5, ct), ctx.scalar(0.0, ct)

    def share(a, b):
        a_hit = ctx.add("eq", a, out)
        w = ctx.add("select", a_hit, zero,
                    ctx.add("select", ctx.add("eq", b, out), one, half))
        return ctx.add("mul", ct, w)

    return _pair(ctx, node, share(x, y) if needs[0] else None,
                 share(y, x) if needs[1] else None, needs)


@vjp_rule("pow")
def _pow(ctx, node, cts, needs):
    (ct,), (x, y), out = cts, node.inputs, node.output
    ct_x = ct_y = None
    if needs[0]:
        # d/dx x^y = y * x^(y-1)
        ym1 = ctx.add("sub", y, ctx.scalar(1.0, y))
        ct_x = ctx.add("mul", ct, ctx.add("mul", y, ctx.add("pow", x, ym1)))
    if needs[1]:
        # d/dy x^y = log(x) * x^y, with log of a zero base replaced by log(1) as in JAX
        zero = ctx.add("eq", x, ctx.scalar(0.0, x))
        safe = ctx.add("select", zero, x, ctx.scalar(1.0, x))
        ct_y = ctx.add("mul", ct, ctx.add("mul", ctx.add("log", safe), out))
    return _pair(ctx, node, ct_x, ct_y, needs)


@vjp_rule("rem")
def _rem(ctx, node, cts, needs):
    # rem(x, y) = x - y * trunc(x / y): d/dx = 1, d/dy = -trunc(x / y)
    (ct,), (x, y) = cts, node.inputs
    ct_y = None
    if needs[1]:
        q = ctx.add("div", x, y)
        trunc = ctx.add("mul", ctx.add("sign", q), ctx.add("floor", ctx.add("abs", q)))
        ct_y = ctx.add("neg", ctx.add("mul", ct, trunc))
    return _pair(ctx, node, ct, ct_y, needs)


def _unary(fn):
    """Register d(out)/dx as ``fn(ctx, x, out, ct) -> contribution``."""

    def rule(ctx, node, cts, needs):
        (ct,) = cts
        return [fn(ctx, node.inputs[0], node.output, ct, node)]

    return rule


def _k(ctx, v, like):
    return ctx.scalar(v, like)


_UNARY = {
    "neg": lambda c, x, o, ct, n: c.add("neg", ct),
    "exp": lambda c, x, o, ct, n: c.add("mul", ct, o),
    "exp2": lambda c, x, o, ct, n: c.add("mul", ct, c.add("mul", o, _k(c, math.log(2.0), o))),
    "log": lambda c, x, o, ct, n: c.add("div", ct, x),
    "log1p": lambda c, x, o, ct, n: c.add("div", ct, c.add("add", x, _k(c, 1.0, x))),
    "expm1": lambda c, x, o, ct, n: c.add("mul", ct, c.add("add", o, _k(c, 1.0, o))),
    "tanh": lambda c, x, o, ct, n: c.add(
        "mul", ct, c.add("sub", _k(c, 1.0, o), c.add("mul", o, o))),
    "logistic": lambda c, x, o, ct, n: c.add(
        "mul", ct, c.add("mul", o, c.add("sub", _k(c, 1.0, o), o))),
    "sqrt": lambda c, x, o, ct, n: c.add("mul", ct, c.add("div", _k(c, 0.5, o), o)),
    "rsqrt": lambda c, x, o, ct, n: c.add(
        "mul", ct, c.add("mul", _k(c, -0.5, o), c.add("div", o, x))),
    # JAX: +ct where x >= 0 (so at 0 too, unlike sign(x)), -ct elsewhere
    "abs": lambda c, x, o, ct, n: c.add(
        "select", c.add("ge", x, _k(c, 0.0, x)), c.add("neg", ct), ct),
    "erf": lambda c, x, o, ct, n: c.add("mul", ct, c.add(
        "mul", _k(c, 2.0 / math.sqrt(math.pi), x), c.add("exp", c.add("neg", c.add("mul", x, x))))),
    "erfc": lambda c, x, o, ct, n: c.add("mul", ct, c.add(
        "mul", _k(c, -2.0 / math.sqrt(math.pi), x), c.add("exp", c.add("neg", c.add("mul", x, x))))),
    "sin": lambda c, x, o, ct, n: c.add("mul", ct, c.add("cos", x)),
    "cos": lambda c, x, o, ct, n: c.add("neg", c.add("mul", ct, c.add("sin", x))),
    "square": lambda c, x, o, ct, n: c.add("mul", ct, c.add("mul", x, _k(c, 2.0, x))),
}
for _op, _fn in _UNARY.items():
    vjp_rule(_op)(_unary(_fn))


@vjp_rule("integer_pow")
def _integer_pow(ctx, node, cts, needs):
    (ct,), (x,), y = cts, node.inputs, node.params["y"]
    if y == 0:
        return [None]
    d = ctx.scalar(float(y), x)
    if y - 1 != 0:
        d = ctx.add("mul", d, ctx.add("integer_pow", x, y=y - 1))
    return [ctx.add("mul", ct, d)]


@vjp_rule("select")
def _select(ctx, node, cts, needs):
    (ct,), (pred, f, t) = cts, node.inputs
    zero = ctx.scalar(0.0, ct)
    out = [None, None, None]
    if needs[1]:
        out[1] = ctx.sum_to(ctx.add("select", pred, ct, zero), f.shape)
    if needs[2]:
        out[2] = ctx.sum_to(ctx.add("select", pred, zero, ct), t.shape)
    return out


@vjp_rule("clamp")
def _clamp(ctx, node, cts, needs):
    # JAX's clamp JVP: x gets the cotangent strictly inside (lo, hi), lo where it is above
    # x and below hi, hi where it is below x; nobody on exact ties.
    (ct,), (lo, x, hi) = cts, node.inputs
    zero = ctx.scalar(0.0, ct)
    conds = [
        lambda: ctx.add("and", ctx.add("gt", lo, x), ctx.add("lt", lo, hi)),
        lambda: ctx.add("and", ctx.add("gt", x, lo), ctx.add("lt", x, hi)),
        lambda: ctx.add("lt", hi, x),
    ]
    return [ctx.sum_to(ctx.add("select", cond(), zero, ct), v.shape) if need else None
            for cond, v, need in zip(conds, node.inputs, needs)]


@vjp_rule("convert")
def _convert(ctx, node, cts, needs):
    (ct,), (x,) = cts, node.inputs
    if not x.dtype.is_float or ct is None:
        return [None]
    return [ctx.add("convert", ct, dtype=x.dtype) if x.dtype != ct.dtype else ct]
