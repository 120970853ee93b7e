"""Shape/param normalisation and validation shared by the references and the wrappers."""
from __future__ import annotations

import numpy as np


def norm_axis(axis, ndim: int, what: str = "axis", *, lo: int = 0) -> int:
    """Normalise ``axis`` for an array of rank ``ndim`` into ``lo..ndim-1``."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise ValueError(f"{what} must be an int, got {axis!r}")
    a = int(axis)
    if not -ndim <= a < ndim:
        raise ValueError(f"{what}={axis} is out of range for an input of rank {ndim}")
    a %= ndim
    if a < lo:
        raise ValueError(f"{what}={axis} must not be below axis {lo} (rank {ndim})")
    return a


def norm_eps(eps, what: str = "eps") -> float:
    try:
        e = float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a float, got {eps!r}") from None
    if not np.isfinite(e) or e < 0:
        raise ValueError(f"{what} must be a finite non-negative float, got {eps!r}")
    return e


def check_shape(name: str, arr, want: tuple, op: str):
    if arr is None:
        return
    got = tuple(np.shape(arr))
    if got != tuple(want):
        raise ValueError(f"{op}: {name} must have shape {tuple(want)}, got {got}")


def broadcasts_to(shape, target) -> bool:
    shape, target = tuple(shape), tuple(target)
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(shape[::-1], target[::-1]))


def channel_vec_shape(ndim: int, axis: int, c: int) -> tuple:
    """Shape that broadcasts a (C,) vector along ``axis`` of a rank-``ndim`` array."""
    return tuple(c if i == axis else 1 for i in range(ndim))


ADA_KINDS = ("layer", "rms")
