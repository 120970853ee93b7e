"""The ``compress=`` schemes, format-neutral: what each stores, and the values the program then
computes with. Both formats store these payloads (Core ML with its ``constexpr_*`` ops,
rlxjax/coreml/rules/constexpr.py, from the targets rlxjax/coreml/compress.py names; Core AI
with one decompressing op each, rlxjax/coreai/weights.py).

``compress=`` (``coreml_train_step`` for its frozen parameters, ``export_inference`` for all
of them) stores each *compressible* weight - a floating-point array of rank >= 2 (kernels,
embeddings, conv filters); vectors and scalars (biases, norm scales) stay fp32 - in one of
(target, op: Core ML's oldest target and MIL op; Core AI runs every scheme on its targets):

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

The maths is coremltools.optimize's own (linear quantisation: ``blockwise_compress``'s
numpy operations, done here without its copies and bit for bit equal to it; k-means
through the kmeans1d copy coremltools ships; ct_optimize.py). The program computes with
the *dequantised* values, exactly as Core ML's constexpr ops decompress them;
``compress_leaf`` returns them, and the graph's ``weight`` node (rlxjax/ir/weight.py)
carries both. A JAX reference of a compressed program runs on those values
(``step.params(step.init(params))`` for a training step; ``compress_leaf(w).value``).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..errors import ArgumentError
from . import CHUNK, Compressed, compressible, ct_optimize

#: the schemes, in the order a message lists them (ir/weight.py's ``weight`` node adds "none")
SCHEMES = ("fp16", "int8", "int4", "palettize4", "palettize8")
INT4_BLOCK = 32


def check_name(compress: Optional[str]) -> None:
    """Refuse an unknown scheme (ArgumentError); None stores weights in fp32."""
    if compress is not None and compress not in SCHEMES:
        raise ArgumentError(f"compress={compress!r}: choose one of {', '.join(SCHEMES)} "
                            "(or None to store weights in fp32)")


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
    lut, indices = ct_optimize.kmeans_palettize(arr, nbits)
    return Compressed(scheme, indices, lut=lut, dequantise=_lut_rows)


def _quantise_by_channels(arr: np.ndarray, nbits: int, blocks):
    """(int8 data, fp32 scale of ``arr``'s rank): coremltools.optimize's symmetric signed
    linear quantisation (``linear_quantize_weights.blockwise_compress``, LINEAR_SYMMETRIC:
    ``optimize._utils.compute_qparams_by_dtype`` / ``quantize_weight_by_dtype``) computed
    with the same numpy operations on the same dtypes - so bit for bit its result
    (tests/coreml/test_quantise.py compares them) - without its copies: the scales from two
    reductions over the whole leaf (exact in any order), then the integers a run of blocks
    along axis 0 at a time, each run's quotient rounded and clipped in place. An all-zero
    block (scale 0, NaN quotients) stores scale 1 and zeros. O(size), temporaries of at
    most ~``CHUNK`` elements."""
    new_shape, scale_shape, kept = [], [], []
    for dim, b in zip(arr.shape, blocks):
        if b > 0:  # (the callers' blocks divide their axes)
            kept.append(len(new_shape))
            new_shape += [dim // b, b]
            scale_shape.append(dim // b)
        else:
            new_shape.append(dim)
            scale_shape.append(1)
    axes = tuple(a for a in range(len(new_shape)) if a not in kept)
    w = np.ascontiguousarray(arr).reshape(new_shape)
    q_max = 2 ** (nbits - 1) - 1  # symmetric: [-q_max, q_max]
    max_abs = np.maximum(np.abs(np.amin(w, axis=axes, keepdims=True)),
                         np.abs(np.amax(w, axis=axes, keepdims=True)))
    scale = (max_abs - -max_abs) / (q_max - -q_max)  # (coremltools: (max - min) / range)
    zero = ~(scale > 0)
    data = np.empty(new_shape, np.int8)
    per = max(1, w[0].size)
    step = max(1, CHUNK // per)
    s_rows = scale.shape[0] > 1  # the scale varies along axis 0 (int8: a block per row)
    with np.errstate(divide="ignore", invalid="ignore"):
        for a in range(0, new_shape[0], step):
            b = min(new_shape[0], a + step)
            sc, zr = (scale[a:b], zero[a:b]) if s_rows else (scale, zero)
            q = np.divide(w[a:b], sc)
            np.round(q, out=q)
            np.clip(q, -q_max, q_max, out=q)
            piece = q.astype(np.int8)
            if zr.any():
                piece[np.broadcast_to(zr, piece.shape)] = 0
            data[a:b] = piece
    scale = np.where(zero, np.float32(1), scale).astype(arr.dtype).reshape(scale_shape)
    return data.reshape(arr.shape), scale


def _cast_rows(c: Compressed, start: int, stop: int) -> np.ndarray:
    return c.data[start:stop].astype(np.float32)


def _scaled_rows(c: Compressed, start: int, stop: int) -> np.ndarray:
    b, scale = c.row_block, c.scale
    if scale.shape[0] > 1:
        scale = scale[start // b:-(-stop // b)]
    return ct_optimize.dequantize(c.data[start:stop], scale).astype(np.float32)


def _lut_rows(c: Compressed, start: int, stop: int) -> np.ndarray:
    return ct_optimize.lut_to_dense(c.data[start:stop], c.lut).astype(np.float32)
