"""layer_norm and batch_norm (coremltools iOS15 normalization.py). layer_norm:
``(x − mean)/sqrt(var + eps)·γ + β`` over ``axes`` with
the biased, centred variance; fp16 evaluated in fp32 and rounded once."""
from __future__ import annotations

import numpy as np

from .common import acc_dtype, get, out
from .registry import register


@register("layer_norm")
def layer_norm(inputs):
    x = np.asarray(inputs["x"])
    if x.dtype not in (np.float16, np.float32):
        raise TypeError(f"layer_norm: dtype {x.dtype}")
    rank = x.ndim
    axes = inputs.get("axes")
    axes = tuple(range(rank)) if axes is None else tuple(
        int(a) % rank for a in np.asarray(axes).reshape(-1))
    eps = float(np.asarray(get(inputs, "epsilon", 1e-5)))
    acc = acc_dtype(x.dtype)
    xa = x.astype(acc, copy=False)
    pshape = [x.shape[i] if i in axes else 1 for i in range(rank)]
    num = xa - np.mean(xa, axis=axes, keepdims=True)
    y = num / np.sqrt(np.mean(np.square(num), axis=axes, keepdims=True) + acc.type(eps))
    if inputs.get("gamma") is not None:
        y = y * np.asarray(inputs["gamma"]).astype(acc).reshape(pshape)
    if inputs.get("beta") is not None:
        y = y + np.asarray(inputs["beta"]).astype(acc).reshape(pshape)
    return (out(y, x.dtype),)


@register("batch_norm")
def batch_norm(inputs):
    """``(x − mean)/sqrt(variance + eps)·γ + β`` per channel (axis 1 of an ``[n, C, *D]``
    x of rank 3-5; coremltools iOS15 normalization.py); fp16 evaluated in fp32, rounded
    once."""
    x = np.asarray(inputs["x"])
    if x.dtype not in (np.float16, np.float32):
        raise TypeError(f"batch_norm: dtype {x.dtype}")
    if not 3 <= x.ndim <= 5:
        raise ValueError(f"batch_norm: x must have rank 3 to 5, got shape {x.shape}")
    acc = acc_dtype(x.dtype)
    pshape = (x.shape[1],) + (1,) * (x.ndim - 2)

    def vec(name):
        v = np.asarray(inputs[name])
        if v.shape != (x.shape[1],):
            raise ValueError(f"batch_norm: {name} {v.shape} must be [C] = [{x.shape[1]}]")
        return v.astype(acc).reshape(pshape)

    eps = acc.type(float(np.asarray(get(inputs, "epsilon", 1e-5))))
    y = (x.astype(acc, copy=False) - vec("mean")) / np.sqrt(vec("variance") + eps)
    if inputs.get("gamma") is not None:
        y = y * vec("gamma")
    if inputs.get("beta") is not None:
        y = y + vec("beta")
    return (out(y, x.dtype),)
