"""The int8 / int4 quantiser of rlxjax/compression/schemes.py is coremltools.optimize's, bit
for bit: its data and scales equal ``linear_quantize_weights.blockwise_compress`` (LINEAR_SYMMETRIC,
signed) of the whole array, all-zero blocks stored as scale 1 and zeros (what a constexpr
op cannot take as scale 0), and the report's error is the float64 one."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rlxjax.compression import ErrorMeter
from rlxjax.compression.schemes import INT4_BLOCK, compress_leaf


def _coremltools(arr, nbits, blocks):
    from coremltools.optimize.coreml._quantization_passes import linear_quantize_weights

    with np.errstate(divide="ignore", invalid="ignore"):
        q = linear_quantize_weights.blockwise_compress(
            arr, nbits=nbits, mode="LINEAR_SYMMETRIC", signed=True, block_sizes=list(blocks))
    data = np.asarray(q.data, np.int8)
    scale = np.asarray(q.scale, np.float32).reshape(
        [n // b if b else 1 for n, b in zip(arr.shape, blocks)])
    zero = ~(scale > 0)
    full = zero
    for axis, (n, b) in enumerate(zip(arr.shape, zero.shape)):
        full = np.repeat(full, n // b, axis=axis)
    return np.where(full, np.int8(0), data), np.where(zero, np.float32(1), scale)


@st.composite
def _weights(draw):
    rank = draw(st.integers(2, 3))
    shape = [draw(st.sampled_from([1, 3, 32, 64, 96]))] + \
        [draw(st.integers(1, 40)) for _ in range(rank - 1)]
    if draw(st.booleans()):
        shape[-2] = draw(st.sampled_from([32, 64, 160]))  # int4 blocks of 32 rows
    seed = draw(st.integers(0, 2 ** 31 - 1))
    rng = np.random.default_rng(seed)
    arr = (rng.standard_normal(shape) * draw(st.sampled_from([1e-3, 1.0, 300.0])))
    arr = arr.astype(np.float32)
    if draw(st.booleans()):  # an all-zero output channel
        arr[..., 0] = 0
    return arr


@settings(max_examples=30, deadline=None)
@given(_weights(), st.sampled_from(["int8", "int4"]))
def test_quantiser_is_coremltools_bit_for_bit(arr, scheme):
    c = compress_leaf(arr, scheme)
    nbits = 8 if scheme == "int8" else 4
    blocks = [0] * arr.ndim
    blocks[-1] = 1
    if scheme == "int4" and arr.shape[-2] % INT4_BLOCK == 0:
        blocks[-2] = INT4_BLOCK
    data, scale = _coremltools(arr, nbits, blocks)
    np.testing.assert_array_equal(c.data, data, strict=True)
    np.testing.assert_array_equal(c.scale, scale, strict=True)


@pytest.mark.parametrize("chunk", [1, 7])
def test_a_leaf_bigger_than_a_piece_is_quantised_as_a_whole(monkeypatch, chunk):
    """Runs of rows of a few elements each (CHUNK made tiny): the same as one piece."""
    from rlxjax.compression import schemes

    arr = np.random.default_rng(1).standard_normal((96, 5)).astype(np.float32)
    for scheme, nbits, blocks in (("int8", 8, [0, 1]), ("int4", 4, [32, 1])):
        monkeypatch.setattr(schemes, "CHUNK", chunk)
        c = compress_leaf(arr, scheme)
        data, scale = _coremltools(arr, nbits, blocks)
        np.testing.assert_array_equal(c.data, data, strict=True)
        np.testing.assert_array_equal(c.scale, scale, strict=True)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2 ** 31 - 1), st.sampled_from([None, np.nan, np.inf, -0.0]))
def test_error_meter_is_the_float64_max_abs_difference(seed, special):
    rng = np.random.default_rng(seed)
    o = rng.standard_normal((7, 5)).astype(np.float32)
    v = (o + rng.standard_normal((7, 5)).astype(np.float32) * 1e-3).astype(np.float32)
    if special is not None:
        v[3, 2] = special
    meter = ErrorMeter(o)
    meter.add(0, 4, v[:4])
    meter.add(4, 7, v[4:])
    want = [float(np.max(np.abs(v[a:b].astype(np.float64) - o[a:b]))) for a, b in ((0, 4), (4, 7))]
    assert repr(meter.err) == repr(max(max(0.0, want[0]), want[1]))
    assert meter.peak == float(np.max(np.abs(o)))
