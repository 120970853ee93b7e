"""VJP rules: the random family.

``bernoulli`` has no inputs, so it passes no cotangent on: its rule returns nothing. The
gradient of dropout flows through the ``mul`` by the drawn mask, which reuses the forward's
mask value (the mask is never redrawn in the backward pass).
"""
from __future__ import annotations

from .registry import vjp_rule


@vjp_rule("bernoulli")
def _bernoulli(ctx, node, cts, needs):
    return []


@vjp_rule("random_uniform", "random_normal")
def _draw(ctx, node, cts, needs):
    # a draw has no inputs: it is a constant of the differentiation (zero gradient)
    return []
