"""Lowering: erfc (an elementwise op of ir/ops.py), which MIL lacks, composed to float32
accuracy.

MIL has ``erf`` only, and ``1 - erf(x)`` loses every digit of small results
(erfc(4) = 1.5e-8 is below erf's rounding). For |x| >= 1 we use
erfc(|x|) = exp(-x²)·f(|x|)/|x| with f(x) = x·exp(x²)·erfc(x) smooth, evaluated by two
fitted polynomials (derivation and error: tools/fit_erfc.py; float32 Horner relative error
<= 8.6e-8 against 30-digit mpmath); exp(-x²) is taken as exp(-h²)·exp(-(x-h)(x+h)) with h
= x truncated to 12 significant bits, so h² is exact and the large exponent carries no
rounding error.
For |x| < 1, 1 - erf(x) is accurate (erfc >= 0.157 there); erfc(-x) = 2 - erfc(x).
"""
from __future__ import annotations

import numpy as np

from ...ir.special import ERFC_A as _ERFC_A, ERFC_B as _ERFC_B, ERFC_HI as _HI, \
    ERFC_LO as _LO
from ..registry import lowering
from .common import Ew


def horner(e, coeffs, u):
    c = lambda v: np.asarray(v, dtype=u.dtype.np)  # noqa: E731
    acc = e.binary("mul", u, c(coeffs[0]))
    for k in coeffs[1:-1]:
        acc = e.binary("mul", e.binary("add", acc, c(k)), u)
    return e.binary("add", acc, c(coeffs[-1]))


@lowering("erfc")
def _erfc(ctx, node, x):
    e = Ew(ctx.b)
    c = lambda v: np.asarray(v, dtype=x.dtype.np)  # noqa: E731
    a = e.unary("abs", x)
    # f(|x|) from the piece that covers it
    fa = horner(e, _ERFC_A, e.binary("sub", a, c(2.0)))
    t = e.binary("real_div", c(1.0), e.binary("mul", a, a))
    u = e.binary("real_div", e.binary("sub", e.binary("mul", t, c(2.0)), c(_LO + _HI)),
                 c(_HI - _LO))
    fb = horner(e, _ERFC_B, u)
    f = e.select(e.compare("less", a, c(3.0)), fa, fb)
    # exp(-a²) with a split so that the big part of the exponent is exact
    # h = a to 8 fractional bits: for a < 16 that is <= 12 significant bits, so h² (24 bits)
    # is exact in float32
    h = e.binary("real_div", e.unary("floor", e.binary("mul", a, c(256.0))), c(256.0))
    small = e.binary("mul", e.binary("sub", a, h), e.binary("add", a, h))
    expo = e.binary("mul", e.unary("exp", e.binary("mul", e.binary("mul", h, h), c(-1.0))),
                    e.unary("exp", e.binary("mul", small, c(-1.0))))
    tail = e.binary("real_div", e.binary("mul", expo, f), a)       # erfc(|x|), |x| >= 1
    tail = e.select(e.compare("less", x, c(0.0)), e.binary("sub", c(2.0), tail), tail)
    near = e.binary("sub", c(1.0), e.unary("erf", x))                # |x| < 1
    out = e.select(e.compare("less", a, c(1.0)), near, tail)
    # a = inf: f/a is 0·0; keep exact limits (and NaN flows through `near`)
    return e.select(e.compare("equal", a, c(np.inf)),
                    e.select(e.compare("less", x, c(0.0)), ctx.b.const(c(2.0)), c(0.0)), out)
