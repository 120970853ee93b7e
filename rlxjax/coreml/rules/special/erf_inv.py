"""Lowering: the inverse error function, composed from MIL ops (MIL has none), evaluated in
fp32 (compose.upcast) when the program computes in fp16. Accuracies against float64:
docs/numerics.md ("Elementwise math").
"""
from __future__ import annotations

import numpy as np

from ...registry import lowering
from .compose import upcast
from ....ir.special import ERFINV_CENTRAL as _ERFINV_CENTRAL, ERFINV_TAIL as _ERFINV_TAIL


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
