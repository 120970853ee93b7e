"""coremltools.optimize's weight-compression maths, the private parts rlxjax uses, in one place.

Both formats store a compressed weight with the same payload (rlxjax/compression/
schemes.py), computed with coremltools.optimize's own maths: its symmetric linear
quantisation, its dequantisation, its k-means palettisation (through the kmeans1d copy
coremltools ships) and its look-up. None of it is documented as public; each use is a small
function here, importing coremltools when first called (quietly: rlxjax/coremltools_quiet.py),
and ``tests/compression/test_ct_optimize.py`` pins the behaviour rlxjax relies on, one test
per function, so a coremltools upgrade that changes one fails there first. (Core ML's own private uses - the weight file, MIL values,
the package layout - are rlxjax/coreml/ct_private.py's.)
"""
from __future__ import annotations

import numpy as np


def linear_quantize(arr: np.ndarray, nbits: int, block_sizes):
    """Symmetric signed linear quantisation of ``arr`` with coremltools.optimize's own
    maths (``linear_quantize_weights.blockwise_compress``, mode LINEAR_SYMMETRIC):
    ``block_sizes[i]`` > 0 splits axis i into blocks of that size with a scale each, 0
    shares one scale along the whole axis. Returns (data as int8 numpy, scale of the
    rank of ``arr``, fp32) or None when coremltools cannot (a block size that does not
    divide its axis)."""
    from .. import coremltools_quiet  # noqa: F401  (first: coremltools without its notices)
    from coremltools.optimize.coreml._quantization_passes import linear_quantize_weights

    with np.errstate(divide="ignore", invalid="ignore"):
        params = linear_quantize_weights.blockwise_compress(
            arr, nbits=nbits, mode="LINEAR_SYMMETRIC", signed=True,
            block_sizes=list(block_sizes))
    if params is None:
        return None
    return np.asarray(params.data, np.int8), np.asarray(params.scale, arr.dtype)


def dequantize(data: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``scale * data`` with each scale repeated over its block, as coremltools computes
    ``constexpr_blockwise_shift_scale`` / ``constexpr_affine_dequantize`` (optimize._utils
    ``dequantize_by_scale_and_zp``)."""
    from .. import coremltools_quiet  # noqa: F401  (first: coremltools without its notices)
    from coremltools.optimize import _utils

    return _utils.dequantize_by_scale_and_zp(data, scale, None)


def kmeans_palettize(arr: np.ndarray, nbits: int):
    """Per-tensor k-means palettisation with coremltools' own clustering
    (``_get_kmeans_lookup_table_and_weight``, through the kmeans1d copy coremltools ships in
    ``coremltools._deps``: optimal and deterministic in one dimension). Returns (lut of
    2**nbits entries in arr's dtype, uint8 indices of arr's shape)."""
    from .. import coremltools_quiet  # noqa: F401  (first: coremltools without its notices)
    from coremltools.models.neural_network.quantization_utils import (
        _get_kmeans_lookup_table_and_weight)

    lut, indices = _get_kmeans_lookup_table_and_weight(nbits, arr, force_kmeans1d=True)
    return (np.asarray(lut, arr.dtype).reshape(-1),
            np.asarray(indices, np.uint8).reshape(arr.shape))


def lut_to_dense(indices: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """The dense tensor of a per-tensor palettised weight (optimize._utils ``lut_to_dense``,
    with the iOS18 LUT layout: one palette for the whole tensor)."""
    from .. import coremltools_quiet  # noqa: F401  (first: coremltools without its notices)
    from coremltools.optimize import _utils

    return _utils.lut_to_dense(indices, lut.reshape((1,) * indices.ndim + (lut.size, 1)))
