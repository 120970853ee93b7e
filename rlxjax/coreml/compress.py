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

from ..compression import Compressed, compressible
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
    compressible, or float64 - compress the fp32 values JAX computes with)."""
    arr = np.asarray(arr)
    if not compressible(arr) or arr.dtype != np.float32:
        return None
    if scheme == "fp16":
        data = arr.astype(np.float16)
        return Compressed(scheme, data.astype(np.float32), data)
    if scheme in ("int8", "int4"):
        nbits = 8 if scheme == "int8" else 4
        blocks = [0] * arr.ndim
        blocks[-1] = 1
        if scheme == "int4" and arr.shape[-2] % INT4_BLOCK == 0:
            blocks[-2] = INT4_BLOCK
        data, scale = ct_private.linear_quantize(arr, nbits, blocks)
        zero = ~(scale > 0)  # an all-zero block: scale 0 (data NaN-derived): store 0 * 1
        if zero.any():
            scale = np.where(zero, np.float32(1), scale).astype(np.float32)
            data = np.where(_repeat(zero, arr.shape), np.int8(0), data).astype(np.int8)
        return Compressed(scheme, ct_private.dequantize(data, scale).astype(np.float32),
                          data, scale=scale)
    nbits = {"palettize4": 4, "palettize8": 8}[scheme]
    lut, indices = ct_private.kmeans_palettize(arr, nbits)
    return Compressed(scheme, ct_private.lut_to_dense(indices, lut).astype(np.float32),
                      indices, lut=lut)


def _repeat(blockwise: np.ndarray, shape) -> np.ndarray:
    for axis, (n, b) in enumerate(zip(shape, blockwise.shape)):
        blockwise = np.repeat(blockwise, n // b, axis=axis)
    return blockwise
