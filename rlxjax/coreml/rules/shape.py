"""Lowering: reshape, transpose, broadcast, reverse, concat, slice, pad (the shared
reshape / transpose / padding helpers are in rules/common.py)."""
from __future__ import annotations

import numpy as np

from ...ir import DType
from ..registry import lowering
from .common import lax_pad, reshape, transpose


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


@lowering("split")
def _split(ctx, node, x):
    """One MIL split for all the pieces (not one slice_by_index per piece); MIL's split
    takes fp16/fp32/int32/bool, so other dtypes (int8, uint8) take one slice per piece."""
    sizes, axis = node.params["sizes"], node.params["axis"]
    types = [ctx.out_type(node, i) for i in range(len(sizes))]
    if types[0].dtype not in (DType.f32, DType.f16, DType.i32, DType.bool):
        outs, at = [], 0
        for t, n in zip(types, sizes):
            lo, hi = [0] * t.rank, list(x.shape)
            lo[axis], hi[axis] = at, at + n
            outs.append(ctx.b.op("slice_by_index", t, x=x, begin=np.asarray(lo, np.int32),
                                 end=np.asarray(hi, np.int32),
                                 stride=np.ones(t.rank, np.int32)))
            at += n
        return tuple(outs)
    return ctx.b.op("split", types, x=x,
                    axis=np.int32(axis), split_sizes=np.asarray(sizes, np.int32))


def _lax_pad_mask(shape, cfg):
    """Bool array of lax.pad(x, v, cfg)'s output shape: True where the result is v."""
    m = np.zeros(shape, bool)
    for axis, (lo, hi, k) in enumerate(cfg):
        n = m.shape[axis]
        if k and n > 1:
            full = list(m.shape)
            full[axis] = n + (n - 1) * k
            spread = np.ones(full, bool)
            idx = [slice(None)] * m.ndim
            idx[axis] = slice(None, None, k + 1)
            spread[tuple(idx)] = m
            m = spread
        widths = [(0, 0)] * m.ndim
        widths[axis] = (max(lo, 0), max(hi, 0))
        m = np.pad(m, widths, constant_values=True)
        idx = [slice(None)] * m.ndim
        idx[axis] = slice(max(-lo, 0), m.shape[axis] - max(-hi, 0))
        m = m[tuple(idx)]
    return m


@lowering("pad")
def _pad(ctx, node, x, value_var):
    from ...ir import constant_value
    from .common import select

    value = constant_value(node.inputs[1])
    if value is None:
        # MIL's pad takes a const fill: pad with 0, then select the runtime value at the
        # padded positions (a const mask), which is exact for every value.
        cfg = node.params["config"]
        padded = lax_pad(ctx.b, x, cfg, 0)
        mask = _lax_pad_mask(x.shape, cfg)
        return select(ctx.b, ctx.out_type(node), mask, value_var, padded)
    return lax_pad(ctx.b, x, node.params["config"], value)
