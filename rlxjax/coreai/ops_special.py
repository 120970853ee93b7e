"""``erfc`` -> Core AI (which has ``erf`` only): the Core ML lowering's composition
(coreml/rules/erfc.py, whose polynomials it reads; derivation in tools/fit_erfc.py):
``1 - erf(x)`` for |x| < 1 (erfc >= 0.157 there), else ``exp(-x²)·f(|x|)/|x|`` with f a
fitted polynomial on [1, 3] and [3, 10.5] and ``exp(-x²)`` split as
``exp(-h²)·exp(-(x-h)(x+h))`` (h = x to 8 fractional bits: h² exact);
``erfc(-x) = 2 - erfc(x)``. Measured against float64 in docs/coreai.md.
"""
from __future__ import annotations

import numpy as np

from ..ir import DType
from .ops_base import rule, unsupported
from .ops_elementwise import floor

# the fitted coefficients: the same numbers as coreml/rules/erfc.py (format-neutral data,
# copied rather than imported: a format module imports no other format's rules)
_ERFC_A = (-8.9861497851032659e-06, 2.9367471408893778e-05, -7.1136734477332094e-05,
           2.1674416785613779e-04, -6.4782245750472783e-04, 1.7800081829546690e-03,
           -4.5789150418021922e-03, 1.0881038038523883e-02, -2.3190976485714290e-02,
           4.1802773057551201e-02, 5.1079135287713351e-01)
_ERFC_B = (-4.9434631194531132e-08, 2.3206072567315718e-07, -1.2621965315271319e-06,
           8.6306646832990324e-06, -7.0582075550043160e-05, 7.5028242373620651e-04,
           -1.2258853323664585e-02, 5.4857505508028637e-01)
_LO, _HI = 0.009070294784580499, 0.1111111111111111


def _horner(ctx, coeffs, u, dt):
    acc = ctx.mul(u, ctx.scalar(coeffs[0], dt))
    for k in coeffs[1:-1]:
        acc = ctx.mul(ctx.add(acc, ctx.scalar(k, dt)), u)
    return ctx.add(acc, ctx.scalar(coeffs[-1], dt))


@rule("erfc")
def _erfc(ctx, node, ins):
    x, dt = ins[0], node.inputs[0].type.dtype
    if dt != DType.f32:
        raise unsupported(node, f"erfc of {dt} is not lowered for Core AI yet")
    c = lambda v: ctx.scalar(v, dt)  # noqa: E731
    a = ctx.ca.abs_(x)
    fa = _horner(ctx, _ERFC_A, ctx.sub(a, c(2.0)), dt)
    t = ctx.div(c(1.0), ctx.mul(a, a))
    u = ctx.div(ctx.sub(ctx.mul(t, c(2.0)), c(_LO + _HI)), c(_HI - _LO))
    fb = _horner(ctx, _ERFC_B, u, dt)
    f = ctx.where(ctx.lt(a, c(3.0)), fa, fb)
    h = ctx.div(floor(ctx, ctx.mul(a, c(256.0)), dt), c(256.0))
    small = ctx.mul(ctx.sub(a, h), ctx.add(a, h))
    expo = ctx.mul(ctx.ca.exp(ctx.neg(ctx.mul(h, h), dt)), ctx.ca.exp(ctx.neg(small, dt)))
    tail = ctx.div(ctx.mul(expo, f), a)
    tail = ctx.where(ctx.lt(x, c(0.0)), ctx.sub(c(2.0), tail), tail)
    near = ctx.sub(c(1.0), ctx.ca.erf(x))
    out = ctx.where(ctx.lt(a, c(1.0)), near, tail)
    limit = ctx.where(ctx.lt(x, c(0.0)), c(2.0), c(0.0))
    return ctx.where(ctx.eq(a, c(np.inf)), limit, out)
