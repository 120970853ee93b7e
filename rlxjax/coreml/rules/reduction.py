"""Lowering: reductions."""
from __future__ import annotations

import numpy as np

from ..registry import lowering


@lowering("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
def _reduce(ctx, node, x):
    return ctx.b.op(node.op, ctx.out_type(node), x=x,
                    axes=np.asarray(node.params["axes"], np.int32), keep_dims=False)


@lowering("argmax", "argmin")
def _arg(ctx, node, x):
    # Both JAX and MIL return the first index among equal extrema.
    return ctx.b.op("reduce_" + node.op, ctx.out_type(node), x=x,
                    axis=np.int32(node.params["axis"]), keep_dims=False)
