"""Shape / tensor-operation / gather ops of the reference backend vs coremltools' value_inference
(exact: these ops move values, they never round them), plus numpy/JAX checks for the parts
coremltools cannot evaluate.  Coverage bookkeeping lives in test_reference_ops.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from _crosscheck import IOS15, IOS16, IOS17, checks, cross_check
from helpers import examples
from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS

SETTINGS = settings(max_examples=examples(25), deadline=None)
F32, F16, I32, BOOL = np.float32, np.float16, np.int32, np.bool_
DTYPES = [F32, F16, I32, BOOL]


def x_of(data, min_dims=0, max_dims=4, dtypes=DTYPES):
    dtype = data.draw(st.sampled_from(dtypes))
    shape = data.draw(hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, max_side=5))
    # Distinct values make any misplaced element visible.
    x = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) % 97
    return x.astype(dtype) if dtype != BOOL else (x % 2).astype(BOOL)


def axis_of(data, rank):
    return data.draw(st.integers(-rank, rank - 1)) if rank else 0


@pytest.mark.parametrize("op", checks("identity", "shape", "reverse", "transpose", "tile",
                                      "reshape", "squeeze", "expand_dims"))
@SETTINGS
@given(data=st.data())
def test_layout_ops(op, data):
    x = x_of(data)
    kw, opset = {"x": x}, data.draw(st.sampled_from([IOS15, IOS17]))
    if op == "reverse" and data.draw(st.booleans()):
        kw["axes"] = np.array(data.draw(st.lists(st.integers(0, x.ndim - 1), unique=True))
                              if x.ndim else [], dtype=I32)
    elif op == "transpose":
        kw["perm"] = np.array(data.draw(st.permutations(range(x.ndim))), dtype=I32)
    elif op == "tile":
        kw["reps"] = np.array([data.draw(st.integers(1, 3)) for _ in range(x.ndim)], dtype=I32)
        if x.ndim == 0:
            return  # tile needs rank >= 1 in coremltools
    elif op == "reshape":
        cands = [[x.size], [-1], list(x.shape[::-1]), [1, x.size, 1]]
        if x.ndim:
            cands.append([-1] + list(x.shape[1:]))
            cands.append([0] * x.ndim)  # 0 copies the input dim (same rank: iOS15 == iOS17)
        if x.ndim >= 2 and opset == IOS17:
            cands.append([0, -1])  # iOS17: 0 counts from the right
        kw["shape"] = np.array(data.draw(st.sampled_from(cands)), dtype=I32)
    elif op == "squeeze":
        x = x.reshape(tuple(d for d in x.shape) + (1,) * data.draw(st.integers(0, 2)))
        ones = [i for i, d in enumerate(x.shape) if d == 1]
        if ones and data.draw(st.booleans()):
            kw["axes"] = np.array(data.draw(st.lists(st.sampled_from(ones), min_size=1,
                                                      unique=True)), dtype=I32)
        squeezed = x.ndim - (len(kw["axes"]) if "axes" in kw else len(ones))
        if squeezed == 0 and x.ndim != 1:
            return  # coremltools' value_inference returns x[0] (wrong rank / crash) here
        kw["x"] = x
    elif op == "expand_dims":
        n = data.draw(st.integers(1, 2))
        out_rank = x.ndim + n
        axes = data.draw(st.lists(st.integers(0, out_rank - 1), min_size=n, max_size=n,
                                  unique=True))
        kw["axes"] = np.array([a - out_rank if data.draw(st.booleans()) else a for a in axes],
                              dtype=I32)
    cross_check(op, kw, opset=opset)


@pytest.mark.parametrize("op", checks("concat", "stack"))
@SETTINGS
@given(data=st.data())
def test_concat_stack(op, data):
    x = x_of(data, min_dims=1 if op == "concat" else 0)
    axis = axis_of(data, x.ndim + (op == "stack"))
    n = data.draw(st.integers(1, 3))
    values = []
    for i in range(n):
        shape = list(x.shape)
        if op == "concat":
            shape[axis] = data.draw(st.integers(1, 3))
        values.append((np.arange(int(np.prod(shape))).reshape(shape) + 100 * i).astype(x.dtype))
    cross_check(op, {"values": values, "axis": np.int32(axis)})


def test_concat_interleave():
    a = np.array([[1, 2], [3, 4], [5, 6]], dtype=I32)
    b = a + 6
    (got,) = MIL_OP_IMPLS["concat"]({"values": [a, b], "axis": np.int32(0),
                                     "interleave": np.bool_(True)})
    np.testing.assert_array_equal(got, [[1, 2], [7, 8], [3, 4], [9, 10], [5, 6], [11, 12]])
    (got,) = MIL_OP_IMPLS["concat"]({"values": [a, b, a], "axis": np.int32(-1),
                            "interleave": np.bool_(True)})
    want = np.stack([a, b, a], axis=-1).reshape(3, 6)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", checks("split"))
@SETTINGS
@given(data=st.data())
def test_split(op, data):
    x = x_of(data, min_dims=1)
    axis = axis_of(data, x.ndim)
    d = x.shape[axis]
    if data.draw(st.booleans()):
        kw = {"num_splits": np.int32(data.draw(st.sampled_from(
            [k for k in range(1, d + 1) if d % k == 0])))}
    else:
        cuts = sorted(data.draw(st.lists(st.integers(1, d - 1), unique=True))) if d > 1 else []
        sizes = np.diff([0] + cuts + [d])
        kw = {"split_sizes": sizes.astype(I32), "num_splits": np.int32(len(sizes))}
    cross_check(op, {"x": x, "axis": np.int32(axis), **kw})


@pytest.mark.parametrize("op", checks("slice_by_index", "slice_by_size"))
@SETTINGS
@given(data=st.data())
def test_slice(op, data):
    x = x_of(data, min_dims=1)
    b, e, s, masks = [], [], [], {k: [] for k in ("begin_mask", "end_mask", "squeeze_mask")}
    for d in x.shape:
        lo = data.draw(st.integers(0, d - 1))
        hi = data.draw(st.integers(lo + 1, d))
        # express each bound positively or from the end, as programs do
        b.append(lo - d if data.draw(st.booleans()) else lo)
        e.append(hi - d if hi < d and data.draw(st.booleans()) else hi)
        s.append(data.draw(st.integers(1, 2)))
        for k in masks:
            masks[k].append(data.draw(st.booleans()) if k != "squeeze_mask"
                            else data.draw(st.integers(0, 3)) == 0)
    if op == "slice_by_size":
        # size -1 = to the end; otherwise 1 .. (elements left after begin)
        size = [-1 if data.draw(st.booleans()) else data.draw(st.integers(1, d - (lo % d)))
                for lo, d in zip(b, x.shape)]
        # coremltools' type inference computes dim - begin for size -1 even when begin < 0
        b = [lo % d if sz == -1 else lo for lo, sz, d in zip(b, size, x.shape)]
        cross_check(op, {"x": x, "begin": np.array(b, I32), "size": np.array(size, I32)},
                    opset=data.draw(st.sampled_from([IOS15, IOS17])))
        return
    kw = {"x": x, "begin": np.array(b, I32), "end": np.array(e, I32)}
    if data.draw(st.booleans()):
        kw["stride"] = np.array(s, I32)
    for k, m in masks.items():
        if data.draw(st.booleans()):
            kw[k] = np.array(m, BOOL)
    if "squeeze_mask" in kw and all(kw["squeeze_mask"]) and x.dtype in (F16, BOOL):
        return  # coremltools' value_inference cannot squeeze fp16/bool down to a scalar
    cross_check(op, kw, opset=data.draw(st.sampled_from([IOS15, IOS17])))


def test_slice_by_index_negative_stride_vs_numpy():
    x = np.arange(24, dtype=F32).reshape(4, 6)
    (got,) = MIL_OP_IMPLS["slice_by_index"]({"x": x, "begin": np.array([3, 5], I32),
                                    "end": np.array([0, 0], I32),
                                    "stride": np.array([-1, -2], I32),
                                    "end_mask": np.array([True, False])})
    np.testing.assert_array_equal(got, x[3::-1, 5:0:-2])


@pytest.mark.parametrize("op", checks("fill", "range_1d", "band_part", "cumsum", "pad"))
@SETTINGS
@given(data=st.data())
def test_tensor_ops(op, data):
    opset = data.draw(st.sampled_from([IOS15, IOS17]))
    if op == "fill":
        shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, max_side=5))
        kw = {"shape": np.array(shape, I32)}
        if data.draw(st.booleans()):
            kw["value"] = data.draw(st.sampled_from(DTYPES))(data.draw(st.integers(0, 3)))
    elif op == "range_1d":
        dtype = data.draw(st.sampled_from([F32, I32]))
        step = data.draw(st.sampled_from([1, 2, 3] if dtype == I32 else [0.5, 1.0, 2.0]))
        start = data.draw(st.integers(-5, 5))
        sign = data.draw(st.sampled_from([1, -1]))
        end = start + sign * data.draw(st.integers(1, 10))
        kw = {"start": dtype(start), "end": dtype(end), "step": dtype(sign * step)}
    elif op == "band_part":
        kw = {"x": x_of(data, min_dims=2), "lower": np.int32(data.draw(st.integers(-1, 3))),
              "upper": np.int32(data.draw(st.integers(-1, 3)))}
    elif op == "cumsum":
        x = x_of(data, min_dims=1, dtypes=[F32, F16, I32])
        # coremltools' type inference only accepts axis in [-1, rank-1]
        kw = {"x": x, "axis": np.int32(data.draw(st.integers(-1, x.ndim - 1))),
              "reverse": data.draw(st.booleans())}
    else:  # pad
        x = x_of(data, min_dims=1, dtypes=[F32, F16])
        mode = data.draw(st.sampled_from(["constant", "reflect", "replicate"]))
        k = data.draw(st.integers(1, x.ndim))
        limit = [d - 1 if mode == "reflect" else 3 for d in x.shape[-k:]]
        pads = [data.draw(st.integers(0, min(lim, 3))) for lim in limit for _ in range(2)]
        kw = {"x": x, "pad": np.array(pads, I32), "mode": mode}
        if mode == "constant" and data.draw(st.booleans()):
            kw["constant_val"] = x.dtype.type(-1.5)
    cross_check(op, kw, opset=opset)


@SETTINGS
@given(data=st.data())
def test_cumsum_exclusive(data):
    # coremltools' value_inference crashes for exclusive=True: check against numpy directly.
    x = x_of(data, min_dims=1, dtypes=[F32, I32])
    axis = axis_of(data, x.ndim)
    rev = data.draw(st.booleans())
    (got,) = MIL_OP_IMPLS["cumsum"]({"x": x, "axis": np.int32(axis), "exclusive": np.bool_(True),
                            "reverse": np.bool_(rev)})
    xr = np.flip(x, axis) if rev else x
    want = np.cumsum(xr, axis=axis, dtype=x.dtype) - xr
    want = np.flip(want, axis) if rev else want
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", checks("gather", "gather_along_axis"))
@SETTINGS
@given(data=st.data())
def test_gather(op, data):
    x = x_of(data, min_dims=1, max_dims=3, dtypes=[F32, F16, I32])
    axis = axis_of(data, x.ndim)
    d = x.shape[axis]
    if op == "gather":
        opset = data.draw(st.sampled_from([IOS15, IOS16, IOS17]))
        batch_dims = 0 if opset == IOS15 else data.draw(st.integers(0, axis % x.ndim))
        ishape = x.shape[:batch_dims] + data.draw(
            hnp.array_shapes(min_dims=0, max_dims=2, max_side=4))
        kw = {"axis": np.int32(axis)}
        if batch_dims:
            kw["batch_dims"] = np.int32(batch_dims)
            # coremltools' value_inference computes `axis - batch_dims` without normalising a
            # negative axis first
            kw["axis"] = np.int32(axis % x.ndim)
    else:
        opset = data.draw(st.sampled_from([IOS15, IOS17]))
        ishape = tuple(data.draw(st.integers(1, 4)) if i == axis % x.ndim else s
                       for i, s in enumerate(x.shape))
        kw = {"axis": np.int32(axis)}
    idx = data.draw(hnp.arrays(I32, ishape, elements=st.integers(-d, d - 1)))
    cross_check(op, {"x": x, "indices": idx, **kw}, opset=opset)


@SETTINGS
@given(data=st.data())
def test_one_hot_vs_jax(data):
    jax = pytest.importorskip("jax")
    idx = data.draw(hnp.arrays(I32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
                               elements=st.integers(-2, 6)))
    depth = data.draw(st.integers(1, 5))
    axis = data.draw(st.integers(-idx.ndim - 1, idx.ndim))
    kw = {"indices": idx, "one_hot_vector_size": np.int32(depth), "axis": np.int32(axis)}
    dtype = I32
    if data.draw(st.booleans()):
        dtype = data.draw(st.sampled_from([F32, F16, I32]))
        kw.update(on_value=dtype(3), off_value=dtype(-1))
    (got,) = MIL_OP_IMPLS["one_hot"](kw)
    # jax.nn.one_hot: out-of-range (incl. negative) indices give an all-zero vector.
    hot = np.asarray(jax.nn.one_hot(idx, depth, axis=axis, dtype=np.float32))
    on, off = (3, -1) if "on_value" in kw else (1, 0)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, np.where(hot == 1, on, off).astype(dtype))
