"""``erfc`` -> Core AI (which has ``erf`` only): the Core ML lowering's composition
(coreml/rules/erfc.py; the polynomials are ir/special.py's, derived by tools/fit_erfc.py):
``1 - erf(x)`` for |x| < 1 (erfc >= 0.157 there), else ``exp(-x²)·f(|x|)/|x|`` with f a
fitted polynomial on [1, 3] and [3, 10.5] and ``exp(-x²)`` split as
``exp(-h²)·exp(-(x-h)(x+h))`` (h = x to 8 fractional bits: h² exact);
``erfc(-x) = 2 - erfc(x)``. Measured against float64 in docs/coreai.md.
"""
from __future__ import annotations

import numpy as np

from ..ir import DType
from ..ir.special import ERFC_A as _ERFC_A, ERFC_B as _ERFC_B, ERFC_HI as _HI, \
    ERFC_LO as _LO
from .ops_base import rule, unsupported
from .ops_elementwise import floor

def _horner(ctx, coeffs, u, dt):
    acc = ctx.mul(u, ctx.scalar(coeffs[0], dt))
    for k in coeffs[1:-1]:
        acc = ctx.mul(ctx.add(acc, ctx.scalar(k, dt)), u)
    return ctx.add(acc, ctx.scalar(coeffs[-1], dt))


@rule("erfc")
def _erfc(ctx, node, ins):
    x, dt = ins[0], node.inputs[0].type.dtype
    # fp16 values: in their fp32 carriers, rounded once (ops_base.py); not in Core AI fp16
    if not erfc_lowers(ctx, dt):
        raise unsupported(node, f"erfc of {dt} is not lowered for Core AI yet")
    return erfc_of(ctx, x, dt)


def erfc_lowers(ctx, dt) -> bool:
    """Whether ``erfc_of`` computes values of ``dt``: fp32, and fp16 values carried in fp32."""
    return dt == DType.f32 or (dt == DType.f16 and not ctx.native_f16)


def erfc_of(ctx, x, dt):
    """erfc(x), the composition above (also exact gelu's, as JAX writes it)."""
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
