"""Lowering: the exponentially scaled modified Bessel functions of orders 0 and 1
(bessel_i0e, bessel_i1e), composed from MIL ops (MIL has none of them; Cephes' expansions,
ir/special_eval.py), evaluated in fp32 (compose.upcast) when the program computes in fp16.
Accuracies against float64: docs/numerics.md ("Elementwise math").
"""
from __future__ import annotations

from ....ir.special_eval import i0e, i1e
from ...registry import lowering
from .compose import upcast


@lowering("bessel_i0e")
def _i0e(ctx, node, x):
    return upcast(ctx, node, [x], i0e)


@lowering("bessel_i1e")
def _i1e(ctx, node, x):
    return upcast(ctx, node, [x], i1e)
