"""Lowering: the inverse error function, composed from MIL ops (MIL has none; the
composition is ir/special_eval.py's), evaluated in fp32 (compose.upcast) when the program
computes in fp16. Accuracies against float64:
docs/numerics.md ("Elementwise math").
"""
from __future__ import annotations

from ....ir.special_eval import erf_inv
from ...registry import lowering
from .compose import upcast


@lowering("erf_inv")
def _erf_inv_lowering(ctx, node, x):
    return upcast(ctx, node, [x], erf_inv)
