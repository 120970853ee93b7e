"""Lowering: reshape, transpose, broadcast, reverse, concat, slice."""
from __future__ import annotations

import numpy as np

from ...ir import TensorType
from ..registry import lowering


def reshape(b, x, shape):
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    return b.op("reshape", TensorType(shape, x.dtype), x=x, shape=np.asarray(shape, np.int32))


def transpose(b, x, perm):
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return x
    return b.op("transpose", TensorType(tuple(x.shape[i] for i in perm), x.dtype), x=x,
                perm=np.asarray(perm, np.int32))


@lowering("reshape")
def _reshape(ctx, node, x):
    return reshape(ctx.b, x, node.params["shape"])


@lowering("transpose")
def _transpose(ctx, node, x):
    return transpose(ctx.b, x, node.params["perm"])


@lowering("broadcast_in_dim")
def _broadcast_in_dim(ctx, node, x):
    shape, dims = node.params["shape"], node.params["dims"]
    # Place operand dims at their output positions (size-1 elsewhere), then tile.
    placed = [1] * len(shape)
    for i, d in enumerate(dims):
        placed[d] = x.shape[i]
    y = reshape(ctx.b, x, placed)
    reps = [s // p if p else 1 for s, p in zip(shape, placed)]
    if all(r == 1 for r in reps):
        return y
    return ctx.b.op("tile", ctx.out_type(node), x=y, reps=np.asarray(reps, np.int32))


@lowering("rev")
def _rev(ctx, node, x):
    return ctx.b.op("reverse", ctx.out_type(node), x=x,
                    axes=np.asarray(node.params["axes"], np.int32))


@lowering("concatenate")
def _concatenate(ctx, node, *xs):
    return ctx.b.op("concat", ctx.out_type(node), values=list(xs),
                    axis=np.int32(node.params["axis"]), interleave=False)


@lowering("slice")
def _slice(ctx, node, x):
    p = node.params
    return ctx.b.op("slice_by_index", ctx.out_type(node), x=x,
                    begin=np.asarray(p["start"], np.int32), end=np.asarray(p["limit"], np.int32),
                    stride=np.asarray(p["strides"], np.int32))
