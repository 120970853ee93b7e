"""Fold: fused attention and its backward (rlxjax/ir/attention.py), in float64, rounded
once to the operands' dtype."""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl


def _probabilities(q, k, mask, scale):
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if mask is not None and mask.dtype == np.bool_:  # left out; a row with no True: uniform
        s = np.where(mask, s, np.where(mask.any(axis=-1, keepdims=True), -np.inf, 0.0))
    elif mask is not None:
        s = s + mask
    e = np.exp(s - np.max(s, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


def _operands(p, args):
    f = [np.asarray(a, None if np.asarray(a).dtype == np.bool_ else np.float64) for a in args]
    mask = f[3] if p["has_mask"] else None
    return f[0], f[1], f[2], mask, f[3 + int(p["has_mask"]):]


@register_impl("fold", "attention")
def _attention(p, *args):
    q, k, v, mask, _ = _operands(p, args)
    return np.asarray(np.matmul(_probabilities(q, k, mask, p["scale"]), v), args[0].dtype)


def _sum_to(x, shape):
    lead = x.ndim - len(shape)
    x = x.sum(axis=tuple(range(lead))) if lead else x
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and x.shape[i] != 1)
    return x.sum(axis=axes, keepdims=True) if axes else x


@register_impl("fold", "attention_grad")
def _attention_grad(p, *args):
    q, k, v, mask, (dout,) = _operands(p, args)
    pr = _probabilities(q, k, mask, p["scale"])
    dp = np.matmul(dout, np.swapaxes(v, -1, -2))
    ds = pr * (dp - np.sum(dp * pr, axis=-1, keepdims=True))
    if mask is not None and mask.dtype == np.bool_:  # a score left out gets no gradient
        ds = np.where(mask, ds, 0.0)
    got = {"dv": np.matmul(np.swapaxes(pr, -1, -2), dout),
           "dq": np.matmul(ds, k) * p["scale"],
           "dk": np.matmul(np.swapaxes(ds, -1, -2), q) * p["scale"]}
    if mask is not None:
        got["dmask"] = _sum_to(ds, mask.shape)
    return tuple(np.asarray(got[g], args[0].dtype) for g in p["outputs"])
