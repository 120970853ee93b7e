"""Lowering: reshape, transpose, broadcast, reverse, concat, slice."""
from __future__ import annotations

import numpy as np

from ...ir import TensorType
from ..registry import lowering


def reshape(b, x, shape):
    shape = tuple(shape)
    if tuple(x.shape) == shape:
        return x
    known = b.known(x)
    if known is not None:  # a constant stays one (folding ran before lowering)
        return b.const(np.reshape(known, shape))
    return b.op("reshape", TensorType(shape, x.dtype), x=x, shape=np.asarray(shape, np.int32))


def transpose(b, x, perm):
    perm = tuple(perm)
    if perm == tuple(range(len(perm))):
        return x
    known = b.known(x)
    if known is not None:
        return b.const(np.ascontiguousarray(np.transpose(known, perm)))
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


def _slice_axis(b, x, axis, start, stop):
    begin = [0] * x.type.rank
    end = list(x.shape)
    begin[axis], end[axis] = start, stop
    shape = list(x.shape)
    shape[axis] = stop - start
    return b.op("slice_by_index", TensorType(tuple(shape), x.dtype), x=x,
                begin=np.asarray(begin, np.int32), end=np.asarray(end, np.int32),
                stride=np.ones(x.type.rank, np.int32))


def _const_pad(b, x, pads, value):
    """MIL pad (constant mode) with non-negative (lo, hi) per axis. MIL's pad takes
    float tensors only; other dtypes get constant blocks concatenated on each side."""
    if all(lo == 0 and hi == 0 for lo, hi in pads):
        return x
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pads))
    if not x.dtype.is_float:
        for axis, (lo, hi) in enumerate(pads):
            parts = []
            for n in (lo, hi):
                block = list(x.shape)
                block[axis] = n
                parts.append(np.full(block, value, x.dtype.np) if n else None)
            pieces = [p for p in (parts[0], x, parts[1]) if p is not None]
            if len(pieces) > 1:
                out = list(x.shape)
                out[axis] += lo + hi
                x = b.op("concat", TensorType(tuple(out), x.dtype),
                         values=[b.const(p) if isinstance(p, np.ndarray) else p for p in pieces],
                         axis=np.int32(axis), interleave=False)
        return x
    return b.op("pad", TensorType(shape, x.dtype), x=x,
                pad=np.asarray([v for lh in pads for v in lh], np.int32), mode="constant",
                constant_val=np.asarray(value, x.dtype.np))


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
    from .elementwise import select

    value = constant_value(node.inputs[1])
    if value is None:
        # MIL's pad takes a const fill: pad with 0, then select the runtime value at the
        # padded positions (a const mask), which is exact for every value.
        cfg = node.params["config"]
        padded = _pad_const(ctx.b, x, cfg, 0)
        mask = _lax_pad_mask(x.shape, cfg)
        return select(ctx.b, ctx.out_type(node), mask, value_var, padded)
    return _pad_const(ctx.b, x, node.params["config"], value)


def _pad_const(b, x, config, value):
    for axis, (_, _, k) in enumerate(config):
        if k == 0 or x.shape[axis] <= 1:
            continue
        # Interior padding: [.., d, ..] -> [.., d, 1, ..] -> pad to [.., d, k+1, ..]
        # -> [.., d*(k+1), ..] -> drop the k trailing fill values.
        d = x.shape[axis]
        split = x.shape[:axis + 1] + (1,) + x.shape[axis + 1:]
        y = reshape(b, x, split)
        pads = [(0, 0)] * len(split)
        pads[axis + 1] = (0, k)
        y = _const_pad(b, y, pads, value)
        y = reshape(b, y, x.shape[:axis] + (d * (k + 1),) + x.shape[axis + 1:])
        x = _slice_axis(b, y, axis, 0, d + (d - 1) * k)
    cfg = config
    x = _const_pad(b, x, [(max(lo, 0), max(hi, 0)) for lo, hi, _ in cfg], value)
    for axis, (lo, hi, _) in enumerate(cfg):
        if lo < 0 or hi < 0:
            x = _slice_axis(b, x, axis, max(-lo, 0), x.shape[axis] - max(-hi, 0))
    return x
