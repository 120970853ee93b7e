"""Reference-backend ops vs coremltools' own value_inference (and numpy / JAX where coremltools
has none).

Tolerance policy: the reference ops use coremltools' value_inference formulas expression for
expression, so results are compared EXACTLY (dtype, shape and every bit, NaN == NaN).  The only
deliberate difference is accumulation of fp16 reductions / matmul / linear / cumsum in fp32
(coremltools sums in fp16 in whatever order numpy picks), compared with fp16 tolerances.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

from _crosscheck import CHECKED, IOS15, IOS17, checks, cross_check, mine_inputs
from helpers import examples
from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS

SETTINGS = settings(max_examples=examples(25), deadline=None)
F32, F16, I32, BOOL = np.float32, np.float16, np.int32, np.bool_

#: ops in the registry with no (usable) coremltools value_inference: reason + what checks them.
OPS_WITHOUT_VALUE_INFERENCE = {
    "gather_nd": "coremltools' gather_nd has only type_inference; tests/frontend/test_indexing.py "
                 "checks it against numpy indexing and, through programs, against JAX",
    "scatter_nd": "coremltools' scatter_nd has only type_inference; "
                  "tests/frontend/test_indexing.py checks it against numpy ufunc.at and, "
                  "through programs, against JAX",
    "silu": "coremltools defines silu with no value_inference; "
            "test_silu_vs_jax checks it against jax.nn.silu",
    "one_hot": "coremltools' one_hot has only type_inference; "
               "test_one_hot_vs_jax checks it against jax.nn.one_hot",
    "conv": "coremltools' conv has only type_inference; tests/frontend/test_conv.py::"
            "test_reference_conv_vs_jax checks it against lax.conv_general_dilated",
    "batch_norm": "coremltools' batch_norm has only type_inference; test_batch_norm_vs_float64 "
                  "checks it against float64 numpy, tests/coreml/test_native_linear.py against JAX",
    "random_bernoulli": "random: no value to infer (Core ML's generator is its own); "
                        "tests/random/test_random.py checks its distribution, dtypes and seeds",
    "random_uniform": "random: no value to infer; tests/random/test_random_device.py checks its "
                      "distribution (KS test against scipy.stats.uniform) and seeds",
    "random_normal": "random: no value to infer; tests/random/test_random_device.py checks its "
                     "distribution (KS test against scipy.stats.norm) and seeds",
}
#: Core ML state ops (iOS18): they read / write a state buffer, so there is no value to infer
#: from constants; tests/training/test_train_mlstate.py runs a stateful program coremltools
#: emits and mlstate training (exact against io mode, within 1e-4 of optax) on the reference
#: backend.
STATE_OPS = {"read_state", "write_state"}
# Partially covered ops (cross-checked, plus dedicated tests for the part coremltools gets wrong):
# concat interleave=True (value_inference ignores interleave) -> test_concat_interleave;
# cumsum exclusive=True (value_inference crashes) -> test_cumsum_exclusive;
# matmul with mixed dtypes (value_inference refuses two const operands) -> test_matmul_mixed.


def shapes(min_dims=0, max_dims=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=5)


def arrays(dtype, shape, lo=-10.0, hi=10.0):
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        elems = st.booleans()
    elif dtype.kind in "iu":
        elems = st.integers(int(lo), int(hi))
    else:
        width = 16 if dtype == F16 else 32
        # Round the bounds inward to the dtype so hypothesis accepts them.
        lo_, hi_ = np.array([lo, hi], dtype=dtype).astype(float)
        lo_ = lo_ if lo_ >= lo else float(np.nextafter(dtype.type(lo_), dtype.type(np.inf)))
        hi_ = hi_ if hi_ <= hi else float(np.nextafter(dtype.type(hi_), dtype.type(-np.inf)))
        elems = st.floats(lo_, hi_, width=width, allow_subnormal=False)
    return hnp.arrays(dtype, shape, elements=elems)


def bshapes(n=2):
    return hnp.mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=4, max_side=5)


# --- elementwise binary ------------------------------------------------------------------------

ARITH = checks("add", "sub", "mul", "real_div", "floor_div", "mod", "pow", "maximum", "minimum")
COMPARE = checks("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
LOGICAL = checks("logical_and", "logical_or", "logical_xor")


@pytest.mark.parametrize("op", ARITH + COMPARE)
@SETTINGS
@given(data=st.data())
def test_binary(op, data):
    dtype = data.draw(st.sampled_from([F32, F16, I32]))
    sx, sy = data.draw(bshapes()).input_shapes
    x = data.draw(arrays(dtype, sx))
    lo, hi = -10, 10
    if dtype == I32 and op in ("real_div", "floor_div", "mod"):
        lo = 1  # int division by zero is undefined
    if op == "pow":  # integer powers with negative exponents are errors; keep floats finite
        x = np.abs(x) if dtype != I32 else x
        lo, hi = (0, 4) if dtype == I32 else (-3, 3)
    y = data.draw(arrays(dtype, sy, lo, hi))
    # numpy's float power is not correctly rounded and its last bit depends on the code path:
    # 8.494141 ** 2 in float32 is 72.15043 on a 1-d array and 72.15042 (x * x, the correctly
    # rounded one) on a 0-d array with numpy 2.4.6, 72.15043 on both with 2.0.2. The two
    # sides here are numpy evaluations of the same MIL op, so pow is checked to one ulp.
    tol = dict(rtol=float(np.finfo(dtype).eps)) if op == "pow" and dtype != I32 else {}
    cross_check(op, {"x": x, "y": y}, **tol)


@pytest.mark.parametrize("op", LOGICAL)
@SETTINGS
@given(data=st.data())
def test_logical(op, data):
    sx, sy = data.draw(bshapes()).input_shapes
    cross_check(op, {"x": data.draw(arrays(BOOL, sx)), "y": data.draw(arrays(BOOL, sy))})


# --- elementwise unary -------------------------------------------------------------------------

# op -> (lo, hi, int32 allowed)
UNARY = {
    "abs": (-10, 10, True), "acos": (-1, 1, False), "asin": (-1, 1, False),
    "atan": (-10, 10, False), "atanh": (-0.99, 0.99, False), "ceil": (-10, 10, False),
    "cos": (-10, 10, False), "cosh": (-5, 5, False), "erf": (-4, 4, False),
    "exp": (-10, 10, False), "exp2": (-10, 10, True), "floor": (-10, 10, False),
    "round": (-10, 10, False), "sign": (-10, 10, True), "sin": (-10, 10, False),
    "sinh": (-5, 5, False), "sqrt": (0, 100, False), "square": (-10, 10, True),
    "tan": (-1.5, 1.5, False), "tanh": (-10, 10, False), "relu": (-10, 10, False),
    "sigmoid": (-10, 10, False), "softplus": (-10, 10, False),
    "inverse": (0.01, 10, False), "log": (0.001, 100, False), "rsqrt": (0.001, 100, False),
}
checks(*UNARY)


@pytest.mark.parametrize("op", sorted(UNARY))
@SETTINGS
@given(data=st.data())
def test_unary(op, data):
    lo, hi, with_int = UNARY[op]
    dtype = data.draw(st.sampled_from([F32, F16, I32] if with_int else [F32, F16]))
    x = data.draw(arrays(dtype, data.draw(shapes()), lo, hi))
    if op == "round":  # exercise ties
        x = (np.round(x * 2) / 2).astype(dtype)
    cross_check(op, {"x": x})


@pytest.mark.parametrize("op", ["inverse", "log", "rsqrt"])
@SETTINGS
@given(data=st.data())
def test_unary_epsilon(op, data):
    dtype = data.draw(st.sampled_from([F32, F16]))
    x = data.draw(arrays(dtype, data.draw(shapes()), 0.001, 10))
    # iOS15: epsilon of x's dtype; iOS17: epsilon may be another float dtype (numpy promotes).
    opset = data.draw(st.sampled_from([IOS15, IOS17]))
    eps_dtype = data.draw(st.sampled_from([F32, F16])) if opset == IOS17 else dtype
    eps = eps_dtype(data.draw(st.sampled_from([1e-3, 0.5, 2.0])))
    cross_check(op, {"x": x, "epsilon": eps}, opset=opset)


@pytest.mark.parametrize("op", checks("logical_not"))
@SETTINGS
@given(data=st.data())
def test_logical_not(op, data):
    cross_check(op, {"x": data.draw(arrays(BOOL, data.draw(shapes())))})


@pytest.mark.parametrize("op", checks("clip", "threshold"))
@SETTINGS
@given(data=st.data())
def test_clip_threshold(op, data):
    dtype = data.draw(st.sampled_from([F32, F16] + ([I32] if op == "threshold" else [])))
    x = data.draw(arrays(dtype, data.draw(shapes())))
    a = dtype(data.draw(st.integers(-5, 0)))
    kwargs = {"x": x, "alpha": a}
    if op == "clip":
        kwargs["beta"] = dtype(data.draw(st.integers(1, 5)))
    cross_check(op, kwargs, opset=data.draw(st.sampled_from([IOS15, IOS17])))


CAST_RANGES = {"fp16": (-100, 100), "fp32": (-100, 100), "int32": (-100, 100),
               "bool": (-2, 2), "int8": (-100, 100), "uint8": (0, 200),
               "int16": (-1000, 1000), "uint16": (0, 1000)}


checks("cast")


@pytest.mark.parametrize("target", sorted(CAST_RANGES))
@SETTINGS
@given(data=st.data())
def test_cast(target, data):
    opset = IOS15 if target in ("fp16", "fp32", "int32", "bool") else IOS17
    src = data.draw(st.sampled_from([F32, F16, I32, BOOL]))
    lo, hi = CAST_RANGES[target]
    x = data.draw(arrays(src, data.draw(shapes()), lo, hi))
    cross_check("cast", {"x": x, "dtype": target}, opset=opset)


@pytest.mark.parametrize("op", checks("select"))
@SETTINGS
@given(data=st.data())
def test_select(op, data):
    bs = data.draw(bshapes())
    # cond must broadcast INTO broadcast(a, b): coremltools' type inference ignores cond.
    res = bs.result_shape
    res = res[data.draw(st.integers(0, len(res))):]
    cond_shape = tuple(d if data.draw(st.booleans()) else 1 for d in res)
    dtype = data.draw(st.sampled_from([F32, F16, I32, BOOL]))
    sa, sb = bs.input_shapes
    cross_check(op, {"cond": data.draw(arrays(BOOL, cond_shape)),
                     "a": data.draw(arrays(dtype, sa)), "b": data.draw(arrays(dtype, sb))})


@pytest.mark.parametrize("op", checks("softmax", "gelu"))
@SETTINGS
@given(data=st.data())
def test_parametric_activation(op, data):
    dtype = data.draw(st.sampled_from([F32, F16]))
    shape = data.draw(shapes(min_dims=1))
    kwargs = {"x": data.draw(arrays(dtype, shape, -8, 8))}
    if op == "softmax":
        kwargs["axis"] = np.int32(data.draw(st.integers(-len(shape), len(shape) - 1)))
    else:
        kwargs["mode"] = data.draw(
            st.sampled_from(["EXACT", "TANH_APPROXIMATION", "SIGMOID_APPROXIMATION"]))
    cross_check(op, kwargs)


@pytest.mark.parametrize("op", checks("scaled_tanh"))
@SETTINGS
@given(data=st.data())
def test_scaled_tanh(op, data):
    """alpha·tanh(beta·x) (coremltools/converters/mil/mil/ops/defs/iOS15/activation.py);
    iOS17 lets alpha and beta be fp32 with fp16 x."""
    dtype = data.draw(st.sampled_from([F32, F16]))
    opset = data.draw(st.sampled_from([IOS15, IOS17])) if dtype == F16 else IOS15
    pdt = F32 if opset == IOS17 else dtype
    a, b = (pdt(data.draw(st.floats(-60, 60, width=16))) for _ in range(2))
    x = data.draw(arrays(dtype, data.draw(shapes(min_dims=1)), -200, 200))
    cross_check(op, {"x": x, "alpha": a, "beta": b}, opset=opset)


@SETTINGS
@given(data=st.data())
def test_silu_vs_jax(data):
    jax = pytest.importorskip("jax")
    dtype = data.draw(st.sampled_from([F32, F16]))
    x = data.draw(arrays(dtype, data.draw(shapes()), -20, 20))
    with np.errstate(over="ignore"):  # fp16 exp(20) = inf -> sigmoid 0: intended
        (got,) = MIL_OP_IMPLS["silu"]({"x": x})
    assert got.dtype == dtype and got.shape == x.shape
    want = np.asarray(jax.nn.silu(x.astype(np.float32)))
    # fp32: within a few ulp of JAX (different exp implementations); fp16: fp16 rounding of
    # the two intermediate results.
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == F32 else dict(rtol=4e-3, atol=4e-3)
    np.testing.assert_allclose(got.astype(np.float32), want, **tol)


# --- reductions --------------------------------------------------------------------------------

REDUCE = checks("reduce_sum", "reduce_mean", "reduce_prod", "reduce_max", "reduce_min",
                "reduce_sum_square", "reduce_l2_norm", "reduce_log_sum_exp", "reduce_l1_norm",
                "reduce_log_sum")


@pytest.mark.parametrize("op", REDUCE)
@SETTINGS
@given(data=st.data())
def test_reduce(op, data):
    dtype = data.draw(st.sampled_from([F32, F16, I32]))
    shape = data.draw(shapes())
    lo, hi = (0.5, 2) if op in ("reduce_prod", "reduce_log_sum") else (-4, 4)
    if dtype == I32:
        lo, hi = (1, 3) if op in ("reduce_prod", "reduce_log_sum") else (-10, 10)
    x = data.draw(arrays(dtype, shape, lo, hi))
    kwargs = {"x": x, "keep_dims": data.draw(st.booleans())}
    if shape and data.draw(st.booleans()):
        axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
        kwargs["axes"] = np.array([a - len(shape) if data.draw(st.booleans()) else a
                                   for a in axes], dtype=I32)
    if dtype == F16 and op not in ("reduce_max", "reduce_min"):
        # fp32 accumulation vs coremltools' fp16 summation: agree to fp16 rounding of the
        # partial sums, i.e. relative to the magnitude of what was summed.
        scale = float(np.sum(np.abs(x.astype(np.float64)) ** (2 if "square" in op else 1)))
        cross_check(op, kwargs, rtol=4e-3, atol=4e-3 * max(scale, 1.0))
    else:
        cross_check(op, kwargs)


@pytest.mark.parametrize("op", checks("reduce_argmax", "reduce_argmin"))
@SETTINGS
@given(data=st.data())
def test_reduce_arg(op, data):
    dtype = data.draw(st.sampled_from([F32, F16, I32]))
    shape = data.draw(shapes(min_dims=1))
    x = data.draw(arrays(dtype, shape, -2, 2)).round().astype(dtype)  # many ties
    kwargs = {"x": x, "axis": np.int32(data.draw(st.integers(-len(shape), len(shape) - 1))),
              "keep_dims": data.draw(st.booleans())}
    opset = data.draw(st.sampled_from([IOS15, IOS17]))
    if opset == IOS17:
        kwargs["output_dtype"] = data.draw(st.sampled_from(["int32", "uint16"]))
    cross_check(op, kwargs, opset=opset)


# --- linear ------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", checks("matmul"))
@SETTINGS
@given(data=st.data())
def test_matmul(op, data):
    dtype = data.draw(st.sampled_from([F32, F16, I32]))
    batch = data.draw(bshapes()).input_shapes
    m, k, n = (data.draw(st.integers(1, 5)) for _ in range(3))
    sx, sy = batch[0] + (m, k), batch[1] + (k, n)
    # Rank-1 operands: coremltools' type inference drops the wrong dim when x is rank 1 and y
    # has batch dims, and fails for a rank-1 y; those cases are checked against numpy.matmul in
    # test_matmul_rank1_vs_numpy instead.
    if data.draw(st.booleans()):
        sx, sy = (k,), (k, n)
    tx = len(sx) > 1 and data.draw(st.booleans())
    ty = len(sy) > 1 and data.draw(st.booleans())
    x = data.draw(arrays(dtype, sx, -4, 4))
    y = data.draw(arrays(dtype, sy, -4, 4))
    if tx:
        x = np.ascontiguousarray(np.swapaxes(x, -1, -2))
    if ty:
        y = np.ascontiguousarray(np.swapaxes(y, -1, -2))
    kwargs = {"x": x, "y": y, "transpose_x": tx, "transpose_y": ty}
    tol = dict(rtol=2e-3, atol=2e-3 * 16 * k) if dtype == F16 else {}
    cross_check(op, kwargs, opset=data.draw(st.sampled_from([IOS15, IOS17])), **tol)


@pytest.mark.parametrize("sx,sy", [((3,), (3,)), ((3,), (2, 3, 4)), ((4, 1, 3), (3,)),
                                    ((3,), (5, 1, 3, 2)), ((2, 3), (3,))])
def test_matmul_rank1_vs_numpy(sx, sy):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(sx).astype(F32), rng.standard_normal(sy).astype(F32)
    (got,) = MIL_OP_IMPLS["matmul"]({"x": x, "y": y})
    want = np.matmul(x, y)
    assert got.dtype == F32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_matmul_mixed():
    """iOS17 mixed fp16/fp32 operands (one const): the declared output dtype decides."""
    from rlxjax.coreml.interpreter.ops import OUTPUT_DTYPES_KEY

    x = np.arange(6, dtype=F16).reshape(2, 3)
    y = np.linspace(-1, 1, 12, dtype=F32).reshape(3, 4)
    (got,) = MIL_OP_IMPLS["matmul"]({"x": x, "y": y, OUTPUT_DTYPES_KEY: (np.dtype(F16),)})
    assert got.dtype == F16
    np.testing.assert_array_equal(got, (x.astype(F32) @ y).astype(F16))
    with pytest.raises(TypeError, match="declared output dtype"):
        MIL_OP_IMPLS["matmul"]({"x": x, "y": y})


@pytest.mark.parametrize("op", checks("linear"))
@SETTINGS
@given(data=st.data())
def test_linear(op, data):
    dtype = data.draw(st.sampled_from([F32, F16, I32]))
    k, n = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    x = data.draw(arrays(dtype, data.draw(shapes(0, 2)) + (k,), -4, 4))
    kwargs = {"x": x, "weight": data.draw(arrays(dtype, (n, k), -4, 4))}
    if data.draw(st.booleans()):
        kwargs["bias"] = data.draw(arrays(dtype, (n,), -4, 4))
    tol = dict(rtol=2e-3, atol=2e-3 * 16 * (k + 1)) if dtype == F16 else {}
    cross_check(op, kwargs, opset=data.draw(st.sampled_from([IOS15, IOS17])), **tol)


# --- bookkeeping ------------------------------------------------------------------------------

@pytest.mark.parametrize("op", checks("const"))
def test_const(op):
    for val in (np.float32(1.5), np.arange(6, dtype=I32).reshape(2, 3), np.array([True])):
        cross_check(op, {"val": val})


def test_every_registered_op_is_checked():
    import test_reference_shape_ops  # noqa: F401  (registers its cross-checked ops)

    registered = set(MIL_OP_IMPLS)
    without = set(OPS_WITHOUT_VALUE_INFERENCE)
    assert not CHECKED & without, f"listed as unchecked but cross-checked: {CHECKED & without}"
    unchecked = registered - CHECKED - without - STATE_OPS
    assert not unchecked, f"ops with no test: {sorted(unchecked)}"
    stale = (CHECKED | without) - registered
    assert not stale, f"tests for ops not in the registry: {sorted(stale)}"


@pytest.mark.parametrize("op", sorted(OPS_WITHOUT_VALUE_INFERENCE))
def test_listed_ops_really_lack_value_inference(op):
    """If coremltools gains a value_inference for one of these, move it to a cross-check."""
    kwargs = {"silu": {"x": np.ones((2,), F32)},
              "gather_nd": {"x": np.ones((2, 2), F32), "indices": np.array([[1]], I32)},
              "scatter_nd": {"data": np.ones((2, 2), F32), "indices": np.array([[1]], I32),
                             "updates": np.ones((1, 2), F32)},
              "one_hot": {"indices": np.array([0, 1], I32), "one_hot_vector_size": 3},
              "conv": {"x": np.ones((1, 2, 5), F32), "weight": np.ones((3, 2, 2), F32)},
              "batch_norm": {"x": np.ones((1, 2, 3), F32), "mean": np.zeros(2, F32),
                             "variance": np.ones(2, F32)},
              "random_bernoulli": {"shape": np.array([2, 3], I32), "seed": 1},
              "random_uniform": {"shape": np.array([2, 3], I32), "seed": 1},
              "random_normal": {"shape": np.array([2, 3], I32), "seed": 1}}[op]
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import Function

    with Function({}):
        assert getattr(mb, op)(**kwargs).val is None


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_batch_norm_vs_float64(data):
    dtype = data.draw(st.sampled_from([F32, F16]))
    shape = data.draw(shapes(min_dims=3, max_dims=5))
    c = shape[1]
    kw = {"x": data.draw(arrays(dtype, shape, -5, 5)),
          "mean": data.draw(arrays(dtype, (c,), -2, 2)),
          "variance": data.draw(arrays(dtype, (c,), 0, 4)),
          "epsilon": dtype(data.draw(st.sampled_from([1e-5, 1e-3, 0.1])))}
    p = (c,) + (1,) * (len(shape) - 2)
    v = {k: np.asarray(a, np.float64) for k, a in kw.items()}
    want = (v["x"] - v["mean"].reshape(p)) / np.sqrt(v["variance"].reshape(p) + v["epsilon"])
    for name in ("gamma", "beta"):
        if data.draw(st.booleans()):
            kw[name] = data.draw(arrays(dtype, (c,), -2, 2))
            want = want * kw[name].astype(np.float64).reshape(p) if name == "gamma" \
                else want + kw[name].astype(np.float64).reshape(p)
    (got,) = MIL_OP_IMPLS["batch_norm"](mine_inputs(kw))
    assert got.dtype == dtype and got.shape == shape
    # fp32: evaluated in fp32 (a few roundings, |x̂| <= ~10/sqrt(eps)); fp16: rounded once.
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == F32 else dict(rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(got.astype(np.float64), want, **tol)


# --- attention (iOS18) -----------------------------------------------------------------------

@pytest.mark.parametrize("op", checks("scaled_dot_product_attention"))
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_scaled_dot_product_attention(op, data):
    import coremltools as ct

    dtype = data.draw(st.sampled_from([F32, F16]))
    lead = tuple(data.draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
    L, S, E, EV = (data.draw(st.integers(1, 5)) for _ in range(4))
    kw = {"query": data.draw(arrays(dtype, lead + (L, E), -3, 3)),
          "key": data.draw(arrays(dtype, lead + (S, E), -3, 3)),
          "value": data.draw(arrays(dtype, lead + (S, EV), -3, 3))}
    mask = data.draw(st.sampled_from([None, "float", "bool"]))
    if mask == "float":
        kw["attn_mask"] = data.draw(arrays(dtype, (L, S), -3, 3))
    elif mask == "bool":  # at least one score per row takes part (else the row is NaN)
        m = data.draw(hnp.arrays(BOOL, (L, S)))
        m[:, 0] = True
        kw["attn_mask"] = m
    if dtype == F32:
        cross_check(op, kw, opset=ct.target.iOS18, rtol=1e-5, atol=1e-6)
        return
    # fp16: coremltools' value_inference multiplies q·kᵀ with numpy in fp16 (scores of size
    # up to ~20 rounded to fp16's 2^-8..2^-5 spacing: errors of several 1e-3 in the result),
    # so it cannot arbitrate; the reference computes in fp32 and rounds once. Check it against
    # the op's definition (coremltools' formula) evaluated in float64.
    from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS

    q, k, v = (kw[n].astype(np.float64) for n in ("query", "key", "value"))
    s = q @ k.swapaxes(-1, -2) / np.sqrt(q.shape[-1])
    m = kw.get("attn_mask")
    if m is not None:
        s = s + (np.where(m, 0.0, -np.inf) if m.dtype == BOOL else m.astype(np.float64))
    e = np.exp(s - s.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)) @ v
    got, = MIL_OP_IMPLS[op]({n: np.asarray(a) for n, a in kw.items()})
    assert got.dtype == F16
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("op", checks("layer_norm"))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_layer_norm(op, data):
    dtype = data.draw(st.sampled_from([F32, F16]))
    shape = data.draw(shapes(min_dims=1, max_dims=4))
    rank = len(shape)
    first = data.draw(st.integers(0, rank - 1))
    axes = list(range(first, rank))
    kw = {"x": data.draw(arrays(dtype, shape, -5, 5)), "axes": np.asarray(axes, np.int32),
          "epsilon": dtype(data.draw(st.sampled_from([1e-5, 1e-3, 0.1])))}
    pshape = tuple(shape[first:])
    if data.draw(st.booleans()):
        kw["gamma"] = data.draw(arrays(dtype, pshape, -2, 2))
        if data.draw(st.booleans()):
            kw["beta"] = data.draw(arrays(dtype, pshape, -2, 2))
    # coremltools evaluates in float64; the reference in fp32 (fp16 too), rounded once. A
    # nearly constant group makes both sensitive to rounding: tolerance on the output scale.
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == F32 else dict(rtol=1e-2, atol=2e-2)
    cross_check(op, kw, **tol)
