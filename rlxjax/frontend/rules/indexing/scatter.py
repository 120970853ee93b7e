"""Frontend rule: scatter and its combiners (package docstring: how it maps onto
scatter_nd)."""
from __future__ import annotations

import numpy as np

from ....ir import DType, constant_value
from ...registry import rule
from .common import (Mode, clamp, const_in_range, dnums_str, i32, in_range,
                     window_offsets, with_batch_iotas)

_SCATTER_MODE = {"scatter": "update", "scatter-add": "add", "scatter_add": "add",
                 "scatter-mul": "mul", "scatter_mul": "mul", "scatter-min": "min",
                 "scatter_min": "min", "scatter-max": "max", "scatter_max": "max",
                 "scatter-sub": "sub", "scatter_sub": "sub"}


def _neutral(mode, dtype: DType):
    """Update value that leaves the operand unchanged (a dropped update), if any."""
    if mode == "add" and dtype != DType.bool:
        return 0
    if mode == "mul" and dtype != DType.bool:
        return 1
    return None


@rule(*_SCATTER_MODE)
def _scatter(ctx, eqn, x, idx, upd):
    p = eqn.params
    dn, jmode = p["dimension_numbers"], p["mode"]
    mode = _SCATTER_MODE[eqn.primitive.name]
    if mode == "sub":
        mode, upd = "add", ctx.add("neg", upd)
    uwd, iwd = tuple(dn.update_window_dims), set(dn.inserted_window_dims)
    sdod, ob = tuple(dn.scatter_dims_to_operand_dims), tuple(dn.operand_batching_dims)
    ib = tuple(dn.scatter_indices_batching_dims)
    if jmode not in (Mode.CLIP, Mode.FILL_OR_DROP, Mode.PROMISE_IN_BOUNDS):
        raise ctx.unsupported(f"scatter mode {jmode}")
    if p.get("update_jaxpr") is not None and mode == "update":
        raise ctx.unsupported("scatter with a custom combiner (lax.scatter_apply)")
    rank = x.type.rank
    wd = [d for d in range(rank) if d not in iwd and d not in ob]  # window dims of updates
    wsize = {d: upd.shape[uwd[j]] for j, d in enumerate(wd)}
    partial = tuple(d for d in range(rank) if d not in sdod and d not in ob
                    and wsize.get(d, 1) != x.shape[d])
    if partial and idx.type.rank >= 1:
        # A window narrower than a dim that is not scattered to starts at 0 there: scatter
        # to that dim too, with index 0 (the wide-window path below spreads the window).
        idx = i32(ctx, idx)
        zeros = ctx.constant(np.zeros(tuple(idx.shape[:-1]) + (len(partial),), np.int32))
        idx = ctx.add("concatenate", idx, zeros, axis=idx.type.rank - 1)
        sdod = sdod + partial
    rest = [d for d in range(rank) if d not in sdod and d not in ob]
    if any(wsize.get(d, 1) != x.shape[d] for d in rest):
        raise ctx.unsupported(
            f"scatter with update windows {wsize} ({dnums_str(dn)}) into {x.type}: only "
            "full windows on the dims that are not scattered to are supported")
    # Windows wider than 1 on scattered dims (the gradient of a windowed gather, vmap of
    # dynamic_update_slice) become extra index batch axes, one element per position; JAX
    # clamps (clip) or range-checks (drop) the window *start* into [0, dim - window].
    sizes_k = [wsize.get(d, 1) for d in sdod]
    wide = [d for d, w in zip(sdod, sizes_k) if w > 1]
    wshape = tuple(wsize[d] for d in wide)
    idx = i32(ctx, idx)
    bshape0 = tuple(idx.shape[:-1])
    # updates -> index batch dims + window axes (scatter order) + the other dims (operand order)
    upd_batch = [q for q in range(upd.type.rank) if q not in uwd]
    uwd_of = {d: uwd[j] for j, d in enumerate(wd)}
    ones = [uwd_of[d] for d in wd if d not in wide and d not in rest]  # size-1 windows
    u = ctx.transpose(upd, upd_batch + [uwd_of[d] for d in wide]
                   + [uwd_of[d] for d in rest] + ones)
    u = ctx.reshape(u, bshape0 + wshape + tuple(x.shape[d] for d in rest))
    perm = ob + sdod + tuple(rest)
    xt = ctx.transpose(x, perm)
    hi_start = [x.shape[d] - w for d, w in zip(sdod, sizes_k)]
    hi = [x.shape[d] - 1 for d in sdod]
    unique = bool(p.get("unique_indices", False))
    trash = False  # redirect some updates to a scratch slot just past the end
    valid = None
    if not const_in_range(idx, hi_start):
        if jmode == Mode.CLIP:
            idx = clamp(ctx, idx, hi_start)
        else:
            valid = in_range(ctx, idx, hi_start)
    idx, _ = window_offsets(ctx, idx, sizes_k)
    bshape = bshape0 + wshape
    if valid is not None:
        valid = ctx.broadcast(valid, bshape, range(len(bshape0)))
        neutral = _neutral(mode, x.dtype)
        if neutral is not None:  # a dropped add/mul contributes its neutral element
            keep = ctx.broadcast(valid, u.shape, range(len(bshape)))
            u = ctx.add("select", keep, ctx.constant(np.asarray(neutral, x.dtype.np)), u)
            idx, valid = clamp(ctx, idx, hi), None
        else:
            trash = True
    c = constant_value(idx)
    const_unique = c is not None and len({tuple(r) for r in c.reshape(-1, c.shape[-1])}) \
        == int(np.prod(bshape, dtype=np.int64))
    unique = unique or const_unique
    dedupe = mode == "update" and not unique and int(np.prod(bshape, dtype=np.int64)) > 1
    trash = trash or dedupe
    k0 = len(ob)
    if trash:
        for axis in range(k0, k0 + len(sdod)):  # concat, not pad: MIL's pad is float-only
            slab = list(xt.shape)
            slab[axis] = 1
            zeros = ctx.broadcast(ctx.constant(np.zeros((), x.dtype.np)), slab, ())
            xt = ctx.add("concatenate", xt, zeros, axis=axis)
        spot = ctx.constant(np.asarray([h + 1 for h in hi], np.int32))
        if valid is not None:
            vk = ctx.broadcast(valid, idx.shape, range(len(bshape)))
            idx = ctx.add("select", vk, spot, idx)
    full = with_batch_iotas(ctx, idx, ib)
    if dedupe:
        full = _last_writes_win(ctx, full, tuple(xt.shape[:full.shape[-1]]), bshape, ib, spot)
    y = ctx.add("scatter_nd", xt, full, u, mode=mode, unique=unique)
    if trash:
        y = ctx.add("slice", y, start=(0,) * rank, limit=tuple(x.shape[d] for d in perm),
                    strides=(1,) * rank)
    return ctx.transpose(y, tuple(int(i) for i in np.argsort(perm)))


def _last_writes_win(ctx, full, lead, bshape, ib, spot):
    """JAX (XLA on CPU) applies duplicate ``.set`` updates in order, so the last one wins.
    Make that deterministic: scatter each update's position number with 'max' into an
    index-space buffer, read it back, and send every update that is not the last one for
    its position to the scratch slot."""
    ids = ctx.constant(np.arange(int(np.prod(bshape, dtype=np.int64)),
                                 dtype=np.int32).reshape(bshape))
    init = ctx.broadcast(ctx.constant(np.int32(-1)), lead, ())
    winner = ctx.add("scatter_nd", init, full, ids, mode="max", unique=False)
    last = ctx.add("eq", ctx.add("gather_nd", winner, full), ids)
    loser_at = with_batch_iotas(ctx, ctx.broadcast(spot, full.shape[:-1] + spot.shape,
                                                 (len(bshape),)), ib)
    keep = ctx.broadcast(last, full.shape, range(len(bshape)))
    return ctx.add("select", keep, loser_at, full)
