"""scaled_dot_product_attention (coremltools iOS18 transformers.py).

``softmax(q·kᵀ / sqrt(E) + mask)·v`` over the last axis; a bool mask says which scores take
part (False -> -inf), a float mask is added. fp16 is evaluated in fp32 and rounded once, as
matmul is (linear.py).
"""
from __future__ import annotations

import numpy as np

from .common import acc_dtype, out
from .registry import register


@register("scaled_dot_product_attention")
def scaled_dot_product_attention(inputs):
    q, k, v = (np.asarray(inputs[n]) for n in ("query", "key", "value"))
    if q.dtype not in (np.float16, np.float32) or not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"scaled_dot_product_attention: dtypes {q.dtype}, {k.dtype}, {v.dtype}")
    if q.ndim < 3 or not (q.ndim == k.ndim == v.ndim):
        raise ValueError("scaled_dot_product_attention: q, k, v need one rank >= 3")
    acc = acc_dtype(q.dtype)
    q, k, v = (a.astype(acc, copy=False) for a in (q, k, v))
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) / np.sqrt(acc.type(q.shape[-1]))
    mask = inputs.get("attn_mask")
    if mask is not None:
        mask = np.asarray(mask)
        scores = scores + (np.where(mask, 0, -np.inf).astype(acc) if mask.dtype == bool
                           else mask.astype(acc))
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
        p = e / np.sum(e, axis=-1, keepdims=True)
    return (out(np.matmul(p, v), inputs["query"].dtype),)
