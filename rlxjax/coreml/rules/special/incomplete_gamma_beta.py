"""Lowering: the regularized incomplete gamma functions igamma = P(a, x), igammac = Q(a, x),
igamma_grad_a = dP/da, and the regularized incomplete beta function betainc(a, b, x), in
fp32 (compose.upcast). The compositions are ir/special_incomplete.py's (shared with the
Core AI lowering: JAX's own algorithms, MIL ``while_loop``s here), described there.
Accuracies against float64: docs/numerics.md.
"""
from __future__ import annotations

import numpy as np

from ....ir.special_incomplete import betainc, igamma, igamma_grad_a, igammac
from ...registry import lowering
from ..common import reshape
from .compose import broadcast_all, upcast


def elementwise_loop(ctx, node, inputs, fn):
    """``fn(fx, *inputs)`` on the inputs broadcast to the output's shape (loop state has
    one shape; rank 0 travels as [1]), in fp32; an empty output needs no loop."""
    t = ctx.out_type(node)
    if t.size == 0:
        return ctx.b.const(np.zeros(tuple(t.shape), t.dtype.np))
    shape = tuple(t.shape) or (1,)

    def run(f, *xs):
        xs = broadcast_all(f, [reshape(f.b, v, (1,) * len(shape)) if v.type.rank == 0 else v
                               for v in xs], shape)
        return reshape(f.b, fn(f, *xs), tuple(t.shape))

    return upcast(ctx, node, inputs, run)


@lowering("igamma")
def _igamma(ctx, node, a, x):
    return elementwise_loop(ctx, node, [a, x], igamma)


@lowering("igammac")
def _igammac(ctx, node, a, x):
    return elementwise_loop(ctx, node, [a, x], igammac)


@lowering("igamma_grad_a")
def _igamma_grad_a(ctx, node, a, x):
    return elementwise_loop(ctx, node, [a, x], igamma_grad_a)


@lowering("betainc")
def _betainc(ctx, node, a, b, x):
    return elementwise_loop(ctx, node, [a, b, x], betainc)
