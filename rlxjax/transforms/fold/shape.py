"""Fold: shape ops (exact: they only move elements)."""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl


@register_impl("fold", "reshape")
def _reshape(p, x):
    return x.reshape(tuple(p["shape"]))


@register_impl("fold", "transpose")
def _transpose(p, x):
    return np.array(np.transpose(x, tuple(p["perm"])), order="C")  # rank 0 stays rank 0


@register_impl("fold", "broadcast_in_dim")
def _broadcast_in_dim(p, x):
    shape, dims = tuple(p["shape"]), p["dims"]
    placed = [1] * len(shape)
    for i, d in enumerate(dims):
        placed[d] = x.shape[i]
    # A read-only view, not a copy: a broadcast too large to become a constant stays an op
    # and its value is only read by later folds (GPT-2's embedding-gradient zeros were a
    # 154 MB copy); one small enough is copied when it becomes a constant (fold/__init__).
    return np.broadcast_to(x.reshape(placed), shape)


@register_impl("fold", "rev")
def _rev(p, x):
    return np.flip(x, tuple(p["axes"])).copy()


@register_impl("fold", "concatenate")
def _concatenate(p, *xs):
    return np.concatenate(xs, axis=p["axis"])


@register_impl("fold", "slice")
def _slice(p, x):
    idx = tuple(slice(s, e, st) for s, e, st in zip(p["start"], p["limit"], p["strides"]))
    return x[idx].copy()


@register_impl("fold", "split")
def _split(p, x):
    cuts = np.cumsum(p["sizes"])[:-1]
    return tuple(piece.copy() for piece in np.split(x, cuts, axis=p["axis"]))


@register_impl("fold", "pad")
def _pad(p, x, value):
    """lax.pad: interior padding, then lo/hi edges (negative ones crop)."""
    for axis, (lo, hi, k) in enumerate(p["config"]):
        d = x.shape[axis]
        if k and d > 1:
            shape = list(x.shape)
            shape[axis] = d + (d - 1) * k
            spread = np.full(shape, value, x.dtype)
            idx = [slice(None)] * x.ndim
            idx[axis] = slice(None, None, k + 1)
            spread[tuple(idx)] = x
            x = spread
        widths = [(0, 0)] * x.ndim
        widths[axis] = (max(lo, 0), max(hi, 0))
        x = np.pad(x, widths, constant_values=value)
        idx = [slice(None)] * x.ndim
        idx[axis] = slice(max(-lo, 0), x.shape[axis] - max(-hi, 0))
        x = x[tuple(idx)]
    return np.array(x, order="C")  # (ascontiguousarray makes rank 0 rank 1)
