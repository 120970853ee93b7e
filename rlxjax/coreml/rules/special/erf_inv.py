"""Lowering: the inverse error function, composed from MIL ops (MIL has none), evaluated in
fp32 (compose.upcast) when the program computes in fp16. Accuracies against float64:
docs/numerics.md ("Elementwise math").
"""
from __future__ import annotations

import numpy as np

from ...registry import lowering
from .compose import upcast

# erf_inv: Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single
# precision: erfinv(x) = x·p(w), w = -log((1 - x)(1 + x)), p a polynomial in w - 2.5 for
# w < 5 and in sqrt(w) - 3 beyond (highest degree first).
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                   0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
                0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


def _erf_inv(f, x):
    # (1 - x)(1 + x) rather than 1 - x²: 1 - x is exact for |x| >= 1/2, so w keeps its
    # digits as |x| -> 1, where the result is most sensitive to it.
    w = f.neg(f.log(f.mul(f.sub(1.0, x), f.add(x, 1.0))))
    central = f.horner(_ERFINV_CENTRAL, f.sub(w, 2.5))
    tail = f.horner(_ERFINV_TAIL, f.sub(f.sqrt(w), 3.0))
    r = f.mul(f.select(f.lt(w, 5.0), central, tail), x)
    r = f.select(f.eq(f.abs(x), 1.0), f.mul(x, np.inf), r)
    return f.select(f.gt(f.abs(x), 1.0), np.nan, r)


@lowering("erf_inv")
def _erf_inv_lowering(ctx, node, x):
    return upcast(ctx, node, [x], _erf_inv)
