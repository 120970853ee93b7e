"""Core ML's ``constexpr_*`` ops: weights decompressed when the model loads.

The interpreter evaluates them once, while loading (their inputs are all constants), and
binds the results like const values. Semantics from coremltools' op definitions
(``ops/defs/iOS16/constexpr_ops.py``, ``ops/defs/iOS18/compression.py``), computed here
with plain numpy and cross-checked against their value_inference
(tests/coreml/interpreter/test_reference_constexpr.py):

* ``constexpr_cast``: fp16 -> fp32;
* ``constexpr_affine_dequantize`` (iOS16): ``scale * (data - zero_point)`` with scale and
  zero point scalars or vectors along ``axis``, in the scale's dtype;
* ``constexpr_blockwise_shift_scale`` (iOS18): ``scale * (data - offset)``, each scale
  (offset) entry covering a block ``data.shape[i] / scale.shape[i]`` long on every axis;
* ``constexpr_lut_to_dense``: iOS16 form (``indices`` bit-packed LSB first into bytes,
  ``lut`` a vector, ``shape``) and iOS18 form (``indices`` of the output's shape, ``lut`` of
  shape ``[blocks per axis..., palettes, vector size]``; scalar palettes only).
"""
from __future__ import annotations

import numpy as np

from .registry import register

#: MIL op types the interpreter evaluates at load time
CONSTEXPR_PREFIX = "constexpr_"


@register("constexpr_cast")
def constexpr_cast(inputs):
    src = np.asarray(inputs["source_val"])
    if src.dtype != np.float16 or inputs["output_dtype"] != "fp32":
        raise TypeError(f"constexpr_cast casts fp16 to fp32, got {src.dtype} to "
                        f"{inputs['output_dtype']!r}")
    return (src.astype(np.float32),)


def _along(v, axis, rank):
    v = np.asarray(v)
    if v.ndim == 0:
        return v
    shape = [1] * rank
    shape[axis] = v.size
    return v.reshape(shape)


@register("constexpr_affine_dequantize")
def constexpr_affine_dequantize(inputs):
    q, zp, scale = (np.asarray(inputs[k]) for k in ("quantized_data", "zero_point", "scale"))
    rank = q.ndim
    axis = int(inputs["axis"]) % rank
    diff = q.astype(np.float32) - _along(zp, axis, rank).astype(np.float32)
    return ((diff * _along(scale, axis, rank)).astype(scale.dtype),)


def _blocks(v, shape):
    """``v`` with each entry repeated over its block of ``shape``."""
    for axis, (n, b) in enumerate(zip(shape, v.shape)):
        if n % b:
            raise ValueError(f"a blockwise parameter of shape {v.shape} does not tile {shape}")
        v = np.repeat(v, n // b, axis=axis)
    return v


@register("constexpr_blockwise_shift_scale")
def constexpr_blockwise_shift_scale(inputs):
    data, scale = np.asarray(inputs["data"]), np.asarray(inputs["scale"])
    if scale.ndim != data.ndim:
        raise ValueError("constexpr_blockwise_shift_scale: scale must have data's rank")
    offset = np.asarray(inputs["offset"]) if "offset" in inputs else None
    if offset is None or offset.shape == scale.shape:
        # one dense array: the data split into blocks, the scale (and offset) broadcast
        # over them in place - the same products as repeating them to the data's shape
        # (below), without the two or three dense temporaries (a 1B model's dequantised
        # embedding is 1 GiB: rlxjax.load of its package held them at once)
        split = []
        for n, b in zip(data.shape, scale.shape):
            if n % b:
                raise ValueError(f"a blockwise parameter of shape {scale.shape} does not "
                                 f"tile {data.shape}")
            split += [b, n // b]
        x = data.reshape(split).astype(scale.dtype)
        spread = [d for b in scale.shape for d in (b, 1)]
        if offset is not None:
            x -= offset.reshape(spread).astype(scale.dtype)
        x *= scale.reshape(spread)
        return (x.reshape(data.shape),)
    x = data.astype(scale.dtype)
    x = x - _blocks(offset, data.shape).astype(scale.dtype)
    return ((_blocks(scale, data.shape) * x).astype(scale.dtype),)


@register("constexpr_lut_to_dense")
def constexpr_lut_to_dense(inputs):
    lut, indices = np.asarray(inputs["lut"]), np.asarray(inputs["indices"])
    if "shape" in inputs:  # iOS16: packed indices, one palette
        shape = tuple(int(d) for d in np.asarray(inputs["shape"]))
        nbits = int(np.log2(lut.size))
        n = int(np.prod(shape, dtype=np.int64))
        bits = np.unpackbits(indices.astype(np.uint8), bitorder="little")[:n * nbits]
        idx = (bits.reshape(n, nbits).astype(np.int64) << np.arange(nbits)).sum(axis=1)
        return (lut[idx].reshape(shape),)
    rank = indices.ndim
    if lut.ndim != rank + 2 or lut.shape[-1] != 1:
        raise NotImplementedError("constexpr_lut_to_dense (iOS18): only scalar palettes "
                                  "(vector size 1) with a lut of rank indices.rank + 2")
    table = _blocks(lut[..., 0], indices.shape + lut.shape[-2:-1])  # [..., palettes]
    out = np.take_along_axis(table, indices.astype(np.int64)[..., None], axis=-1)[..., 0]
    return (out.astype(lut.dtype),)
