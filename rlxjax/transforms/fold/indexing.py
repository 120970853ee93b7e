"""Fold: gathers, scatters, cumulative sums and dynamic slices (exact but for the
accumulation order of scatter add/mul and cumsum, which is the index order)."""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl


def _coords(x, idx):
    k = idx.shape[-1]
    if np.any(idx < 0) or np.any(idx >= np.asarray(x.shape[:k])):
        return None, k  # the graph promises in-range indices; do not guess otherwise
    return tuple(idx[..., i].astype(np.int64) for i in range(k)), k


@register_impl("fold", "gather_nd")
def _gather_nd(p, x, idx):
    coords, _ = _coords(x, idx)
    # np.array, not ascontiguousarray: a rank-0 result (a full index into x) stays rank 0
    return None if coords is None else np.array(x[coords], dtype=x.dtype)


_AT = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


@register_impl("fold", "scatter_nd")
def _scatter_nd(p, x, idx, upd):
    coords, k = _coords(x, idx)
    if coords is None:
        return None
    out = x.copy()
    mode = p["mode"]
    if mode == "update":  # row-major order of the index batch, the last write wins
        flat = [c.reshape(-1) for c in coords]
        u = upd.reshape((-1,) + x.shape[k:])
        for j in range(u.shape[0]):
            out[tuple(c[j] for c in flat)] = u[j]
        return out
    _AT[mode].at(out, coords, upd)
    return out


@register_impl("fold", "cumsum")
def _cumsum(p, x):
    axis = p["axis"]
    if p["reverse"]:
        return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis).copy()
    return np.cumsum(x, axis=axis, dtype=x.dtype)


def _starts(x, starts, sizes):
    # JAX clamps start indices so that the block fits (the frontend already does)
    return [int(min(max(int(s), 0), d - n)) for s, d, n in zip(starts, x.shape, sizes)]


@register_impl("fold", "dynamic_slice")
def _dynamic_slice(p, x, *starts):
    sizes = tuple(p["sizes"])
    begin = _starts(x, starts, sizes)
    return x[tuple(slice(b, b + n) for b, n in zip(begin, sizes))].copy()


@register_impl("fold", "dynamic_update_slice")
def _dynamic_update_slice(p, x, upd, *starts):
    begin = _starts(x, starts, upd.shape)
    out = x.copy()
    out[tuple(slice(b, b + n) for b, n in zip(begin, upd.shape))] = upd
    return out


@register_impl("fold", "take_at")
def _take_at(p, x, i):
    ax = p["axis"]
    idx = np.broadcast_to(np.asarray(i), tuple(1 if k == ax else d for k, d in enumerate(x.shape)))
    return np.take_along_axis(x, idx.astype(np.int64), ax).copy()
