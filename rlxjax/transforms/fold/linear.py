"""Fold: dot_general, as the lowering computes it: operands brought to
[batch, M, K] x [batch, K, N] and multiplied with numpy's matmul in their dtype."""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl


def _size(x, dims) -> int:
    return int(np.prod([x.shape[d] for d in dims], dtype=np.int64))


@register_impl("fold", "dot_general")
def _dot_general(p, a, b):
    out_dtype = p.get("out_dtype")
    if out_dtype is not None and np.dtype(out_dtype.np) != a.dtype:
        return None  # mixed precision: the accumulation dtype is the backend's choice
    (lc, rc), (lb, rb) = p["contract"], p["batch"]
    lf = [d for d in range(a.ndim) if d not in lc and d not in lb]
    rf = [d for d in range(b.ndim) if d not in rc and d not in rb]
    batch = [a.shape[d] for d in lb]
    x = np.transpose(a, list(lb) + lf + list(lc)).reshape(batch + [_size(a, lf), _size(a, lc)])
    y = np.transpose(b, list(rb) + list(rc) + rf).reshape(batch + [_size(b, rc), _size(b, rf)])
    out = np.matmul(x, y)
    return out.reshape(batch + [a.shape[d] for d in lf] + [b.shape[d] for d in rf])
