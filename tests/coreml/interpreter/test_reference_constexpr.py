"""The reference interpreter's constexpr ops (weights decompressed at load) against
coremltools' own decompression (``materialized_val_inference`` of its op definitions): iOS16
``constexpr_cast`` / ``constexpr_affine_dequantize`` / ``constexpr_lut_to_dense`` and iOS18
``constexpr_cast`` / ``constexpr_blockwise_shift_scale`` / ``constexpr_lut_to_dense``, over
shapes, bit widths, block sizes and values. Sub-byte payloads (int4 data, uint4 indices) only
exist in the weight file: tests/coreml/test_compress.py runs them through whole programs, compared
with coremltools' dequantisation of the same payload."""
from __future__ import annotations

import coremltools as ct
import numpy as np
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import Function
from hypothesis import given, settings, strategies as st

from _crosscheck import IOS16, checks
from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS

IOS18 = ct.target.iOS18
checks("constexpr_cast", "constexpr_affine_dequantize", "constexpr_blockwise_shift_scale",
       "constexpr_lut_to_dense")


def _theirs(op, opset, kwargs):
    with Function({}, opset_version=opset):
        var = getattr(mb, op)(**kwargs)
        return np.asarray(var.op.materialized_val_inference()), var.dtype


def _check(op, opset, kwargs):
    want, _ = _theirs(op, opset, kwargs)
    (got,) = MIL_OP_IMPLS[op]({k: (v if isinstance(v, str) else np.asarray(v))
                      for k, v in kwargs.items()})
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype)
    np.testing.assert_array_equal(got, want, strict=True)


_shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


@settings(max_examples=12, deadline=None)
@given(shape=_shapes, seed=st.integers(0, 2**16), opset=st.sampled_from([IOS16, IOS18]))
def test_constexpr_cast(shape, seed, opset):
    x = (np.random.default_rng(seed).normal(size=shape) * 100).astype(np.float16)
    _check("constexpr_cast", opset, {"source_val": x, "output_dtype": "fp32"})


@settings(max_examples=15, deadline=None)
@given(shape=_shapes, seed=st.integers(0, 2**16), data=st.data())
def test_constexpr_affine_dequantize(shape, seed, data):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(0, len(shape) - 1))
    dt = data.draw(st.sampled_from([np.int8, np.uint8]))
    sdt = data.draw(st.sampled_from([np.float32, np.float16]))
    info = np.iinfo(dt)
    q = rng.integers(info.min, info.max + 1, size=shape).astype(dt)
    vector = data.draw(st.booleans())
    n = shape[axis] if vector else None
    scale = (rng.uniform(0.01, 2, size=n) if vector else np.float64(rng.uniform(0.01, 2)))
    zp = rng.integers(info.min, info.max + 1, size=n)
    _check("constexpr_affine_dequantize", IOS16, {
        "quantized_data": q, "zero_point": np.asarray(zp).astype(dt),
        "scale": np.asarray(scale).astype(sdt), "axis": np.int32(axis)})


@settings(max_examples=15, deadline=None)
@given(shape=_shapes, seed=st.integers(0, 2**16), data=st.data())
def test_constexpr_blockwise_shift_scale(shape, seed, data):
    rng = np.random.default_rng(seed)
    blocks = tuple(data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
                   for n in shape)
    sshape = tuple(n // b for n, b in zip(shape, blocks))
    dt = data.draw(st.sampled_from([np.int8, np.uint8]))
    sdt = data.draw(st.sampled_from([np.float32, np.float16]))
    info = np.iinfo(dt)
    kw = {"data": rng.integers(info.min, info.max + 1, size=shape).astype(dt),
          "scale": rng.uniform(0.01, 2, size=sshape).astype(sdt)}
    if data.draw(st.booleans()):
        kw["offset"] = rng.integers(info.min, info.max + 1, size=sshape).astype(dt)
    _check("constexpr_blockwise_shift_scale", IOS18, kw)


@settings(max_examples=15, deadline=None)
@given(shape=_shapes, seed=st.integers(0, 2**16), nbits=st.sampled_from([1, 2, 4, 8]))
def test_constexpr_lut_to_dense_ios16(shape, seed, nbits):
    from coremltools.optimize import _utils

    rng = np.random.default_rng(seed)
    idx = rng.integers(0, 2**nbits, size=shape).astype(np.uint8)
    lut = rng.normal(size=2**nbits).astype(np.float32)
    _check("constexpr_lut_to_dense", IOS16, {
        "indices": _utils.pack_elements_into_bits(idx.reshape(-1), nbits).astype(np.uint8),
        "lut": lut, "shape": np.asarray(shape, np.uint32)})


@settings(max_examples=15, deadline=None)
@given(shape=_shapes, seed=st.integers(0, 2**16), data=st.data())
def test_constexpr_lut_to_dense_ios18(shape, seed, data):
    rng = np.random.default_rng(seed)
    groups = tuple(data.draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
                   for n in shape)
    idx = rng.integers(0, 256, size=shape).astype(np.uint8)
    lut = rng.normal(size=groups + (256, 1)).astype(
        data.draw(st.sampled_from([np.float32, np.float16])))
    _check("constexpr_lut_to_dense", IOS18, {"indices": idx, "lut": lut})
