"""Lowering: lgamma, digamma, and the Hurwitz zeta / polygamma functions digamma's
derivative reaches, composed from MIL ops in fp32 (compose.upcast). The compositions are
ir/special_eval.py's (shared with the Core AI lowering), described there. Accuracies against
float64: docs/numerics.md ("Elementwise math").
"""
from __future__ import annotations

from ....ir.special_eval import digamma, lgamma, polygamma, zeta
from ...registry import lowering
from .compose import upcast


@lowering("lgamma")
def _lgamma(ctx, node, x):
    return upcast(ctx, node, [x], lgamma)


@lowering("digamma")
def _digamma(ctx, node, x):
    return upcast(ctx, node, [x], digamma)


@lowering("zeta")
def _zeta(ctx, node, s, q):
    return upcast(ctx, node, [s, q], zeta)


@lowering("polygamma")
def _polygamma(ctx, node, m, x):
    return upcast(ctx, node, [m, x], polygamma)
