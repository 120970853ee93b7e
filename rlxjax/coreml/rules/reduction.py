"""Lowering: reductions."""
from __future__ import annotations

import numpy as np

from ..registry import lowering


@lowering("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")
def _reduce(ctx, node, x):
    # keep_dims is left at its default (False) rather than written as a const: with
    # numpy >= 2, coremltools' value inference of a reduction over a compile-time constant
    # (e.g. a broadcast cotangent in a gradient graph) passes that const's np.bool_ value
    # as numpy's keepdims, which numpy rejects, so the loader refused the program.
    # keep_dims (the decompositions' reductions, of values computed at run time) written
    # only when the RLX op keeps them: the other programs stay as they were
    keep = {"keep_dims": True} if node.params.get("keep_dims") else {}
    return ctx.b.op(node.op, ctx.out_type(node), x=x,
                    axes=np.asarray(node.params["axes"], np.int32), **keep)


@lowering("argmax", "argmin")
def _arg(ctx, node, x):
    # Both JAX and MIL return the first index among equal extrema.
    keep = {"keep_dims": True} if node.params.get("keep_dims") else {}  # see _reduce
    return ctx.b.op("reduce_" + node.op, ctx.out_type(node), x=x,
                    axis=np.int32(node.params["axis"]), **keep)
