"""gather_nd / scatter_nd (coremltools iOS15 scatter_gather.py, iOS16/iOS17 overrides).

coremltools gives neither op a value_inference, so these follow the op docs; the tests in
tests/frontend/test_indexing.py check them against numpy/JAX indexing. Out-of-range indices raise
(iOS17 calls them undefined behaviour; rlxjax never emits them, so a hit is a bug).
"""
from __future__ import annotations

import numpy as np

from .registry import register
from .common import get, to_bool, to_int


def _coords(x, idx):
    idx = np.asarray(idx)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"indices must be integers, got {idx.dtype}")
    k = idx.shape[-1]
    if not 1 <= k <= x.ndim:
        raise ValueError(f"index depth {k} out of range for rank {x.ndim}")
    bad = (idx < 0) | (idx >= np.asarray(x.shape[:k]))
    if np.any(bad):
        raise IndexError(f"indices out of range for dims {x.shape[:k]}: "
                         f"{idx[np.any(bad, axis=-1)].tolist()[:5]}")
    return tuple(idx[..., i].astype(np.int64) for i in range(k)), k


@register("gather_nd")
def gather_nd(inputs):
    x = np.asarray(inputs["x"])
    if to_int(get(inputs, "batch_dims", 0)) != 0:
        raise NotImplementedError("gather_nd with batch_dims > 0 is not implemented here")
    coords, _ = _coords(x, inputs["indices"])
    return (np.array(x[coords], dtype=x.dtype),)


_ACCUMULATE = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
               "max": np.maximum, "min": np.minimum}


@register("scatter_nd")
def scatter_nd(inputs):
    data = np.asarray(inputs["data"])
    upd = np.asarray(inputs["updates"])
    mode = get(inputs, "mode", "add")
    to_bool(get(inputs, "validate_indices", False))  # iOS17; indices are checked anyway
    coords, k = _coords(data, inputs["indices"])
    want = coords[0].shape + data.shape[k:]
    if upd.shape != want or upd.dtype != data.dtype:
        raise ValueError(f"updates {upd.dtype}{list(upd.shape)} should be "
                         f"{data.dtype}{list(want)}")
    res = data.copy()
    if mode == "update":
        # Sequential writes in row-major order of the index batch (the last write wins).
        flat = [c.reshape(-1) for c in coords]
        u = upd.reshape((-1,) + data.shape[k:])
        for j in range(u.shape[0]):
            res[tuple(c[j] for c in flat)] = u[j]
        return (res,)
    if mode not in _ACCUMULATE:
        raise ValueError(f"unknown scatter_nd mode {mode!r}")
    with np.errstate(all="ignore"):
        _ACCUMULATE[mode].at(res, coords, upd)
    return (res.astype(data.dtype, copy=False),)
