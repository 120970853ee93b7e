"""Frontend rule: gather (package docstring: how it maps onto gather_nd)."""
from __future__ import annotations

import numpy as np

from ....ir import DType
from ...registry import rule
from .common import (Mode, clamp, const_in_range, i32, in_range, window_offsets,
                     with_batch_iotas)


def _default_fill(dtype: DType):
    """JAX's gather fill for fill_value=None: NaN, the most negative int, or True."""
    if dtype.is_float:
        return np.nan
    if dtype == DType.bool:
        return True
    return np.iinfo(dtype.np).min if dtype.np.kind == "i" else np.iinfo(dtype.np).max


@rule("gather")
def _gather(ctx, eqn, x, idx):
    """Windows on indexed dims (vmap of dynamic_slice, x[i:i+k] per row) become extra
    index batch axes counting along each window, so gather_nd reads one element per
    position; JAX clamps (clip) or range-checks (fill) the window *start* into
    [0, dim - window]."""
    p = eqn.params
    dn, sizes, mode = p["dimension_numbers"], tuple(p["slice_sizes"]), p["mode"]
    sim, ob = tuple(dn.start_index_map), tuple(dn.operand_batching_dims)
    ib, collapsed = tuple(dn.start_indices_batching_dims), set(dn.collapsed_slice_dims)
    offset_dims = tuple(dn.offset_dims)
    if mode not in (Mode.CLIP, Mode.FILL_OR_DROP, Mode.PROMISE_IN_BOUNDS):
        raise ctx.unsupported(f"gather mode {mode}")
    idx = i32(ctx, idx)
    bshape = tuple(idx.shape[:-1])
    rest = [d for d in range(x.type.rank) if d not in sim and d not in ob]
    # windows starting at 0 on the other dims (a flexible dim's window is the whole dim)
    if any(sizes[d] != x.shape[d] and sizes[d] < x.shape[d] for d in rest):
        limit = tuple(sizes[d] if d in rest else x.shape[d] for d in range(x.type.rank))
        x = ctx.add("slice", x, start=(0,) * x.type.rank, limit=limit,
                    strides=(1,) * x.type.rank)
    hi = [x.shape[d] - sizes[d] for d in sim]  # largest start whose window fits
    valid = None
    if not const_in_range(idx, hi):
        if mode == Mode.FILL_OR_DROP:
            valid = in_range(ctx, idx, hi)
        idx = clamp(ctx, idx, hi)
    idx, wshape = window_offsets(ctx, idx, [sizes[d] for d in sim])
    wide = [d for d in sim if sizes[d] > 1]
    full = with_batch_iotas(ctx, idx, ib)
    g = ctx.add("gather_nd", ctx.transpose(x, ob + sim + tuple(rest)), full)
    # g: bshape + window axes (sim order) + rest dims; bring them into operand order
    od = [d for d in range(x.type.rank) if d not in collapsed and d not in ob]
    n = len(bshape)
    axis_of = {d: n + j for j, d in enumerate(wide)}
    axis_of.update({d: n + len(wide) + j for j, d in enumerate(rest)})
    present = [d for d in od if d in axis_of]
    g = ctx.transpose(g, list(range(n)) + [axis_of[d] for d in present])
    g = ctx.reshape(g, bshape + tuple(sizes[d] for d in od))
    perm, bi = [], 0
    for pos in range(n + len(od)):
        if pos in offset_dims:
            perm.append(n + offset_dims.index(pos))
        else:
            perm.append(bi)
            bi += 1
    out = ctx.transpose(g, perm)
    if valid is not None:
        fill = p["fill_value"]
        fill = _default_fill(x.dtype) if fill is None else fill
        batch_pos = [q for q in range(out.type.rank) if q not in offset_dims]
        keep = ctx.broadcast(valid, out.shape, batch_pos)
        out = ctx.add("select", keep, ctx.constant(np.asarray(fill, x.dtype.np)), out)
    return out
