"""Lowering: constants (stored in the precision the program computes in)."""
from __future__ import annotations

from ..registry import lowering


@lowering("constant")
def _constant(ctx, node):
    t = ctx.out_type(node)
    return ctx.b.const(node.params["value"].astype(t.dtype.np, copy=False))
