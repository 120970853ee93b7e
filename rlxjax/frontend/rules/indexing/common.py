"""Helpers shared by the indexing rules: int32 index arithmetic, range checks, iota
index components and window offsets (see the package docstring)."""
from __future__ import annotations

import numpy as np
from jax import lax

from ....ir import DType, Dyn, constant_value

Mode = lax.GatherScatterMode


def i32(ctx, v):
    return v if v.dtype == DType.i32 else ctx.add("convert", v, dtype=DType.i32)


def iota(shape, axis):
    """int32 array of ``shape`` counting along ``axis``."""
    ramp = np.arange(shape[axis], dtype=np.int32).reshape(
        [-1 if i == axis else 1 for i in range(len(shape))])
    return np.broadcast_to(ramp, shape).copy()


def all_last(ctx, m):
    """bool[..., K] -> bool[...]: every component true."""
    k = m.shape[-1]
    n = ctx.add("reduce_sum", ctx.add("convert", m, dtype=DType.i32), axes=(m.type.rank - 1,))
    return ctx.add("eq", n, ctx.constant(np.int32(k)))


def in_range(ctx, idx, hi):
    """idx i32[..., K] -> bool[...]: 0 <= idx[..., k] <= hi[k] for every k."""
    ok = ctx.add("and", ctx.add("ge", idx, ctx.constant(np.zeros(len(hi), np.int32))),
                 ctx.add("le", idx, ctx.constant(np.asarray(hi, np.int32))))
    return all_last(ctx, ok)


def clamp(ctx, idx, hi):
    return ctx.add("clamp", ctx.constant(np.zeros(len(hi), np.int32)), idx,
                   ctx.constant(np.asarray(hi, np.int32)))


def const_in_range(idx, hi) -> bool:
    c = constant_value(idx)
    return c is not None and bool(np.all((c >= 0) & (c <= np.asarray(hi))))


def with_batch_iotas(ctx, idx, ib):
    """Prepend one index component per indices batching dim (its iota)."""
    if not ib:
        return idx
    bshape = tuple(idx.shape[:-1])
    if any(isinstance(d, Dyn) for d in bshape):  # a flexible batch (docs/flexible.md)
        parts = [_flexible_iota(ctx, bshape + (1,), d) for d in ib]
    else:
        parts = [ctx.constant(iota(bshape, d)[..., None]) for d in ib]
    return ctx.add("concatenate", *parts, idx, axis=len(bshape))


def _flexible_iota(ctx, shape, axis):
    """int32 of a shape with flexible dims counting along ``axis``: a constant ramp
    broadcast to it (static axis), or a running count of ones minus one (a flexible axis:
    no constant has its length)."""
    if not isinstance(shape[axis], Dyn):
        return ctx.broadcast(ctx.constant(np.arange(shape[axis], dtype=np.int32)), shape,
                             (axis,))
    ones = ctx.broadcast(ctx.constant(np.int32(1)), shape, ())
    count = ctx.add("cumsum", ones, axis=axis, reverse=False)
    return ctx.add("sub", count, ctx.constant(np.int32(1)))


def dnums_str(dn) -> str:
    return str(dn).replace("\n", " ")


def window_offsets(ctx, idx, sizes_k):
    """Starts i32[B..., K] -> element indices i32[B..., W..., K]: one axis per component
    whose window is wider than 1 (in component order), counting along it."""
    wide = [k for k, w in enumerate(sizes_k) if w > 1]
    if not wide:
        return idx, ()
    wshape = tuple(sizes_k[k] for k in wide)
    n, kdim = idx.type.rank - 1, idx.shape[-1]
    off = np.zeros(wshape + (kdim,), np.int32)
    for j, k in enumerate(wide):
        off[..., k] = iota(wshape, j)
    full = tuple(idx.shape[:-1]) + wshape + (kdim,)
    b = ctx.broadcast(idx, full, tuple(range(n)) + (len(full) - 1,))
    return ctx.add("add", b, ctx.constant(off)), wshape

