"""Lowering: gather_nd / scatter_nd / cumsum / dynamic slices.

Indices reaching these lowerings are in range (the frontend clamps, fills or redirects
them), so the iOS17 ``validate_indices`` flag is left at its default (False): no runtime
check is needed and none of these ops raises on device.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, TensorType
from ..registry import lowering
from .common import bool_as_int32, reshape, restore_bool


@lowering("gather_nd")
def _gather_nd(ctx, node, x, idx):
    b, t = ctx.b, ctx.out_type(node)
    xi = bool_as_int32(b, x)
    k = idx.shape[-1]
    if k == 1 and idx.type.rank >= 2:
        # Depth-1 index (embeddings, take): the plain gather along axis 0.
        flat = reshape(b, idx, idx.shape[:-1])
        y = b.op("gather", t.with_dtype(xi.dtype), x=xi, indices=flat, axis=np.int32(0))
    else:
        y = b.op("gather_nd", t.with_dtype(xi.dtype), x=xi, indices=idx)
    return restore_bool(b, y, t.dtype)


@lowering("scatter_nd")
def _scatter_nd(ctx, node, x, idx, upd):
    b, t = ctx.b, ctx.out_type(node)
    xi, ui = bool_as_int32(b, x), bool_as_int32(b, upd)
    y = b.op("scatter_nd", t.with_dtype(xi.dtype), data=xi, indices=idx, updates=ui,
             mode=node.params["mode"])
    return restore_bool(b, y, t.dtype)


@lowering("cumsum")
def _cumsum(ctx, node, x):
    p = node.params
    return ctx.b.op("cumsum", ctx.out_type(node), x=x, axis=np.int32(p["axis"]),
                    exclusive=False, reverse=bool(p["reverse"]))


def _begin(b, starts):
    known = [b.known(s) for s in starts]
    if all(k is not None for k in known):  # constant start indices: a constant vector
        return b.const(np.asarray([np.asarray(k).reshape(()) for k in known], np.int32))
    parts = [reshape(b, s, (1,)) for s in starts]
    if len(parts) == 1:
        return parts[0]
    return b.op("concat", TensorType((len(parts),), DType.i32), values=parts,
                axis=np.int32(0), interleave=False)


@lowering("dynamic_slice")
def _dynamic_slice(ctx, node, x, *starts):
    sizes = tuple(node.params["sizes"])
    return ctx.b.op("slice_by_size", ctx.out_type(node), x=x, begin=_begin(ctx.b, starts),
                    size=np.asarray(sizes, np.int32))


@lowering("dynamic_update_slice")
def _dynamic_update_slice(ctx, node, x, upd, *starts):
    # scatter_nd "update" at begin + every position of the block (unique indices, so the
    # result is deterministic); available on every target, unlike iOS18's slice_update.
    b, t = ctx.b, ctx.out_type(node)
    shape = tuple(upd.shape)
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return x
    rank = len(shape)
    grid = np.stack(np.meshgrid(*[np.arange(d, dtype=np.int32) for d in shape],
                                indexing="ij"), axis=-1).reshape(shape + (rank,))
    begin = _begin(b, starts)
    if b.known(begin) is not None:
        idx = b.const(grid + b.known(begin))
    else:
        idx = b.op("add", TensorType(shape + (rank,), DType.i32), x=grid, y=begin)
    xi, ui = bool_as_int32(b, x), bool_as_int32(b, upd)
    y = b.op("scatter_nd", t.with_dtype(xi.dtype), data=xi, indices=idx, updates=ui,
             mode="update")
    return restore_bool(b, y, t.dtype)


@lowering("take_at")
def _take_at(ctx, node, x, i):
    """A runtime index: ``slice_by_size`` from ``unit·i``; one per batch element: a
    ``gather_along_axis`` (the index tiled to the result's shape)."""
    b, t, ax = ctx.b, ctx.out_type(node), node.params["axis"]
    if i.type.rank == 0:
        unit = np.zeros(t.rank, np.int32)
        unit[ax] = 1
        begin = b.op("mul", TensorType((t.rank,), DType.i32), x=unit, y=i)
        return b.op("slice_by_size", t, x=x, begin=begin, size=np.asarray(t.shape, np.int32))
    reps = np.asarray([d // k for d, k in zip(t.shape, i.shape)], np.int32)
    if (reps != 1).any():
        i = b.op("tile", t.with_dtype(DType.i32), x=i, reps=reps)
    return b.op("gather_along_axis", t, x=x, indices=i, axis=np.int32(ax))
