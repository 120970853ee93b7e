"""What rlxjax relies on from coremltools.optimize's private maths
(rlxjax/compression/ct_optimize.py), one test per function: if a coremltools upgrade breaks
one, fix ct_optimize.py (and only it) to match."""
from __future__ import annotations

import numpy as np

from rlxjax.compression import ct_optimize


def test_linear_quantize_is_symmetric_per_block_and_dequantize_inverts_it():
    w = np.random.default_rng(0).normal(size=(64, 6)).astype(np.float32)
    data, scale = ct_optimize.linear_quantize(w, 8, [0, 1])  # per channel (last axis)
    assert data.dtype == np.int8 and data.shape == w.shape and scale.shape == (1, 6)
    assert scale.dtype == np.float32 and np.abs(data).max() == 127  # symmetric, no -128
    np.testing.assert_allclose(scale[0], np.abs(w).max(axis=0) / 127, rtol=1e-6)
    back = ct_optimize.dequantize(data, scale)
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, (data.astype(np.float32) * scale))
    data4, scale4 = ct_optimize.linear_quantize(w, 4, [32, 1])  # int4 blocks of 32 rows
    assert scale4.shape == (2, 6) and np.abs(data4).max() <= 7
    np.testing.assert_array_equal(ct_optimize.dequantize(data4, scale4),
                                  data4.astype(np.float32) * np.repeat(scale4, 32, axis=0))
    assert ct_optimize.linear_quantize(w, 4, [5, 1]) is None  # 5 does not divide 64


def test_kmeans_palettize_and_lut_to_dense():
    w = np.random.default_rng(1).normal(size=(10, 7)).astype(np.float32)
    lut, idx = ct_optimize.kmeans_palettize(w, 4)
    assert lut.shape == (16,) and lut.dtype == np.float32
    assert idx.shape == w.shape and idx.dtype == np.uint8 and idx.max() < 16
    np.testing.assert_array_equal(ct_optimize.lut_to_dense(idx, lut), lut[idx])
    # optimal 1-D k-means: every value maps to its nearest centroid
    nearest = np.abs(w[..., None] - lut[:len(np.unique(lut))]).argmin(-1)
    np.testing.assert_array_equal(lut[idx], lut[nearest])
    two = np.array([[0.0, 0.0], [1.0, 1.0]], np.float32)  # fewer values than entries
    lut2, idx2 = ct_optimize.kmeans_palettize(two, 4)
    np.testing.assert_array_equal(lut2[idx2], two)
