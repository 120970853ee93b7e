"""Compressed storage of frozen weights: what each ``compress=`` scheme stores, and the values
the program then computes with.

``compress=`` (``coreml_train_step`` for its frozen parameters, ``export_inference`` for all
of them) stores each *compressible* weight - a floating-point array of rank >= 2 (kernels,
embeddings, conv filters); vectors and scalars (biases, norm scales) stay fp32 - in one of:

=============  =================================================  ======  ==============
scheme         stored as                                          target  MIL op
=============  =================================================  ======  ==============
``fp16``       fp16 values                                        iOS16   constexpr_cast
``int8``       int8, one fp32 scale per output channel (the last  iOS16   constexpr_affine_
               axis), symmetric (no zero point)                           dequantize (iOS18+:
                                                                          constexpr_blockwise_
                                                                          shift_scale)
``int4``       int4, one fp32 scale per block of 32 input rows    iOS18   constexpr_blockwise_
               (axis -2; the whole axis if 32 does not divide it)         shift_scale
               per output channel
``palettize4`` 4-bit indices into a 16-entry fp32 look-up table   iOS16   constexpr_lut_to_
``palettize8`` 8-bit indices, 256-entry table (per tensor,                dense
               k-means)
=============  =================================================  ======  ==============

The maths is coremltools.optimize's own (``coreml/ct_private.py``: linear quantisation
``blockwise_compress``, k-means through the kmeans1d copy coremltools ships). The program
computes with the *dequantised* values, exactly as Core ML's constexpr ops decompress them;
``compress_leaf`` returns them, and the graph's ``weight`` node (rlxjax/ir/weight.py)
carries both. A JAX reference of a compressed program runs on those values
(``step.params(step.init(params))`` for a training step; ``compress_leaf(w).value``).
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ..compression import CHUNK, Compressed, compressible
from ..errors import ArgumentError
from . import ct_private
from .targets import Target, get_target, require

#: scheme -> the oldest target whose MIL has the op that stores it
SCHEMES: Dict[str, str] = {"fp16": "iOS16", "int8": "iOS16", "int4": "iOS18",
                           "palettize4": "iOS16", "palettize8": "iOS16"}
INT4_BLOCK = 32


def check_scheme(compress: Optional[str], target) -> None:
    """Refuse an unknown scheme (ArgumentError) or a target too old for it (TargetError)."""
    if compress is None:
        return
    if compress not in SCHEMES:
        raise ArgumentError(f"compress={compress!r}: choose one of {', '.join(SCHEMES)} "
                            "(or None to store weights in fp32)")
    t = target if isinstance(target, Target) else get_target(target)
    require(t, SCHEMES[compress], f"compress={compress!r}")


def compress_leaf(arr: np.ndarray, scheme: str) -> Optional[Compressed]:
    """``arr`` stored with ``scheme``, or None if the scheme leaves it alone (not
    compressible, or float64 - compress the fp32 values JAX computes with). The result holds
    the payload; its ``value`` (the dequantised values) is computed when asked for.

    int8 / int4 quantise a run of output channels (the last axis) at a time: each channel's
    scales and integers depend on that channel alone, so the pieces are exactly the whole's,
    and coremltools' temporaries stay the size of a piece rather than of the weight."""
    arr = np.asarray(arr)
    if not compressible(arr) or arr.dtype != np.float32:
        return None
    if scheme == "fp16":
        return Compressed(scheme, arr.astype(np.float16), dequantise=_cast_rows)
    if scheme in ("int8", "int4"):
        nbits = 8 if scheme == "int8" else 4
        blocks = [0] * arr.ndim
        blocks[-1] = 1
        if scheme == "int4" and arr.shape[-2] % INT4_BLOCK == 0:
            blocks[-2] = INT4_BLOCK
        data, scale = _quantise_by_channels(arr, nbits, blocks)
        # rows of a piece of the value: whole blocks of the scale's first axis (int4 on a
        # matrix: blocks of 32 rows; one scale shared along the axis: any rows)
        row_block = 1 if scale.shape[0] == 1 else arr.shape[0] // scale.shape[0]
        return Compressed(scheme, data, scale=scale, dequantise=_scaled_rows,
                          row_block=row_block)
    nbits = {"palettize4": 4, "palettize8": 8}[scheme]
    lut, indices = ct_private.kmeans_palettize(arr, nbits)
    return Compressed(scheme, indices, lut=lut, dequantise=_lut_rows)


def _quantise_by_channels(arr: np.ndarray, nbits: int, blocks):
    columns = arr.shape[-1]
    per_column = arr.size // columns
    step = max(1, CHUNK // per_column)
    data = np.empty(arr.shape, np.int8)
    scale = None
    for j in range(0, columns, step):
        piece = np.ascontiguousarray(arr[..., j:j + step])
        d, s = ct_private.linear_quantize(piece, nbits, blocks)
        zero = ~(s > 0)  # an all-zero block: scale 0 (data NaN-derived): store 0 * 1
        if zero.any():
            s = np.where(zero, np.float32(1), s).astype(np.float32)
            d = np.where(_repeat(zero, piece.shape), np.int8(0), d).astype(np.int8)
        if scale is None:
            scale = np.empty(s.shape[:-1] + (columns,), s.dtype)
        data[..., j:j + step] = d
        scale[..., j:j + step] = s
    return data, scale


def _cast_rows(c: Compressed, start: int, stop: int) -> np.ndarray:
    return c.data[start:stop].astype(np.float32)


def _scaled_rows(c: Compressed, start: int, stop: int) -> np.ndarray:
    b, scale = c.row_block, c.scale
    if scale.shape[0] > 1:
        scale = scale[start // b:-(-stop // b)]
    return ct_private.dequantize(c.data[start:stop], scale).astype(np.float32)


def _lut_rows(c: Compressed, start: int, stop: int) -> np.ndarray:
    return ct_private.lut_to_dense(c.data[start:stop], c.lut).astype(np.float32)


def _repeat(blockwise: np.ndarray, shape) -> np.ndarray:
    for axis, (n, b) in enumerate(zip(shape, blockwise.shape)):
        blockwise = np.repeat(blockwise, n // b, axis=axis)
    return blockwise
