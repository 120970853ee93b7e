"""int8 / uint8 / bool / int32 programs against jax.jit: program inputs and outputs on every
target (int8 multi-arrays from iOS26), JAX's wrap-around arithmetic (int8 / uint8 carried
as int32 inside the program, coreml/smallint.py), comparisons, conversions with XLA's
semantics (float -> int saturates, NaN -> 0), integer division by zero, dot_general of
every dtype pair, integer convolution, and the other integer paths of issue 13.

Integer and bool results are exact; the 8-bit binary ops are checked on all 65536 operand
pairs.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

import rlxjax
from helpers import TEST_BACKEND, assert_tree_close, check_against_jax
from primitive_strategies import FEW, SOME, bshapes, shapes

I8, U8, I32, BOOL, F32, F16 = (np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.bool_,
                                                     np.float32, np.float16))
INTS = (I8, U8, I32)
TARGETS = ("iOS15", "iOS17", "iOS26")


def _elements(dtype, special=True):
    if dtype == BOOL:
        return st.booleans()
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return st.integers(int(info.min), int(info.max))
    big = min(3e9, float(np.finfo(dtype).max))
    finite = st.floats(-big, big, width=8 * dtype.itemsize, allow_subnormal=False)
    extremes = st.sampled_from([v for v in (np.nan, np.inf, -np.inf, 0.5, -0.5, 127.9, 128.0,
                                            -128.9, -129.0, 255.5, 256.0, 2.0 ** 31,
                                            -2.0 ** 31) if abs(v) <= big or not np.isfinite(v)])
    return st.one_of(finite, extremes) if special else finite


def _arrays(dtype, shape, special=True):
    return hnp.arrays(dtype, shape, elements=_elements(dtype, special))


# -- the program boundary ----------------------------------------------------------------------

@SOME
@given(data=st.data())
def test_identity_and_rank0_outputs_keep_their_dtype(data):
    dtype = data.draw(st.sampled_from([I8, U8, BOOL, I32]))
    target = data.draw(st.sampled_from(TARGETS))
    x = data.draw(_arrays(dtype, shapes(min_dims=0, max_dims=3)))
    check_against_jax(lambda x: (x, x.reshape(-1)[0]), x, target=target)


def test_int8_travels_as_int8_from_ios26_and_uint8_as_int32():
    f = lambda x, y: (x + 1, y * 2, x[0])  # noqa: E731
    args = np.int8([1, 2, 127]), np.uint8([200, 3, 4])
    for target, io8 in (("iOS17", "int32"), ("iOS26", "int8"), ("macOS26", "int8")):
        c = check_against_jax(f, *args, target=target)
        assert [s.io_dtype for s in c.input_specs] == [io8, "int32"]
        assert [s.io_dtype for s in c.output_specs] == [io8, "int32", io8]
    assert (c.spec.specificationVersion, c.spec.mlProgram.functions["main"].opset) == \
        (10, "CoreML9")
    from coremltools.proto import FeatureTypes_pb2

    assert c.spec.description.input[0].type.multiArrayType.dataType == \
        FeatureTypes_pb2.ArrayFeatureType.INT8


def test_ios26_package_saves_and_loads(tmp_path):
    f = lambda x: jnp.abs(x)  # noqa: E731
    x = np.int8([-128, -3, 5])
    c = rlxjax.coreml_jit(f, target="iOS26", backend="reference").lower(x).compile()
    path = c.save(str(tmp_path / "m.mlpackage"))
    loaded = rlxjax.load(path, backend="reference", flat=True)
    np.testing.assert_array_equal(loaded(x)["out"], np.asarray(jax.jit(f)(x)), strict=True)


# -- wrap-around arithmetic ------------------------------------------------------------------

BINARY = {"add": lax.add, "sub": lax.sub, "mul": lax.mul, "div": lax.div, "rem": lax.rem,
          "max": lax.max, "min": lax.min, "lt": lax.lt, "eq": lax.eq, "ge": lax.ge,
          "floor_divide": jnp.floor_divide, "mod": jnp.mod}


@pytest.mark.parametrize("dtype", [I8, U8], ids=str)
def test_8bit_binary_ops_on_every_operand_pair(dtype):
    v = np.arange(256).astype(dtype)
    x, y = (a.ravel() for a in np.meshgrid(v, v))  # includes y == 0 and -128 / -1
    f = lambda x, y: {k: op(x, y) for k, op in BINARY.items()}  # noqa: E731
    check_against_jax(f, x, y)


def test_int32_division_edge_cases():
    m = np.iinfo(np.int32)
    v = np.array([0, 1, -1, 2, -3, 7, m.max, m.min, 2 ** 30, -12345], np.int32)
    x, y = (a.ravel() for a in np.meshgrid(v, v))
    check_against_jax(lambda x, y: (lax.div(x, y), lax.rem(x, y), x * y, x + y), x, y)


@SOME
@given(data=st.data())
def test_binary_ops_broadcast_and_wrap(data):
    dtype = data.draw(st.sampled_from(INTS))
    name = data.draw(st.sampled_from(sorted(BINARY)))
    bs = data.draw(bshapes())
    x, y = (data.draw(_arrays(dtype, s)) for s in bs.input_shapes)
    check_against_jax(lambda x, y: BINARY[name](*jnp.broadcast_arrays(x, y)), x, y)


def _unary(x):
    out = {"neg": -x, "sign": jnp.sign(x), "sq": x * x, "p3": lax.integer_pow(x, 3),
           "p7": lax.integer_pow(x, 7), "sum": jnp.sum(x.reshape(16, -1), 0, dtype=x.dtype),
           "prod": jnp.prod(x.reshape(-1, 4)[:, :3], -1, dtype=x.dtype),
           "cumsum": jnp.cumsum(x, dtype=x.dtype), "cumprod": jnp.cumprod(x[:40], dtype=x.dtype),
           "max": jnp.max(x.reshape(16, -1), 1), "argmin": jnp.argmin(x.reshape(16, -1), 1),
           "f32": x.astype(jnp.float32), "bool": x.astype(bool), "sum_u32": jnp.sum(x) + 0}
    if x.dtype != jnp.uint8:
        out["abs"] = jnp.abs(x)
    else:
        out["sum_u32"] = out["sum_u32"].astype(jnp.int32)  # JAX sums uint8 in uint32
    return out


@pytest.mark.parametrize("dtype", [I8, U8], ids=str)
@pytest.mark.parametrize("target", ["iOS15", "iOS26"])
def test_8bit_unary_ops_and_reductions_on_every_value(dtype, target):
    check_against_jax(_unary, np.arange(256).astype(dtype), target=target)


# -- conversions -------------------------------------------------------------------------------

ALL = (F32, F16, I32, I8, U8, BOOL)


@pytest.mark.parametrize("src", ALL, ids=lambda d: d.name)
def test_convert_every_pair_on_special_values(src):
    if src.kind == "f":
        x = np.array([np.nan, np.inf, -np.inf, 300.7, -300.7, 127.9, 128.0, -128.9, -129.0,
                      255.5, 256.0, -0.9, 1e10, -1e10, 3.5e9, 2.2e9, 2147483520.0, 65504,
                      -2.0 ** 31, 0.5, -0.5, 7.0], np.float64)
        with np.errstate(over="ignore"):
            x = x.astype(src)
    else:
        x = np.array([300, -300, 255, 256, -1, 128, -129, 2 ** 31 - 1, -2 ** 31, 0, 5],
                     np.int64).astype(src)
    f = lambda x: [x.astype(d) for d in ALL]  # noqa: E731
    for target in ("iOS15", "iOS26"):
        check_against_jax(f, x, target=target)


@FEW
@given(data=st.data())
def test_convert_random_values(data):
    src, dst = data.draw(st.sampled_from(ALL)), data.draw(st.sampled_from(ALL))
    x = data.draw(_arrays(src, shapes()))
    check_against_jax(lambda x: x.astype(dst), x)


def test_convert_fold_follows_xla():
    """Constant folding (transforms/fold) of float -> int conversions saturates like XLA."""
    from rlxjax.ir import dtype_from_numpy
    from rlxjax.ir.ops import OPS

    fold = OPS["convert"].impl("fold")
    x = np.array([np.nan, np.inf, -np.inf, 300.7, -300.7, 127.9, -128.9, 1e10, -0.5],
                 np.float32)
    with np.errstate(over="ignore"):
        x16 = x.astype(np.float16)
    for src in (x, x16):
        for dst in (I8, U8, I32, BOOL):
            want = np.asarray(jax.jit(lambda v: v.astype(dst))(src))
            got = fold({"dtype": dtype_from_numpy(dst)}, src)
            np.testing.assert_array_equal(got, want, strict=True)


# -- dot_general, conv -------------------------------------------------------------------------

DOT_DTYPES = (I8, U8, I32, F16, F32, BOOL)
PREFERRED = (None, I32, F32, F16, I8, U8, BOOL)


def _dot_operand(dtype, shape, rng):
    """Values whose products and sums (40 terms) are exact in fp32: multiples of 1/8 below
    8 in magnitude, int32 below 2**10 (int8 / uint8 over their whole range), so float
    results do not depend on the summation order."""
    if dtype == BOOL:
        return rng.rand(*shape) > 0.5
    if dtype.kind == "f":
        return (rng.randint(-64, 64, shape) / 8).astype(dtype)
    if dtype == I32:
        return rng.randint(-2 ** 10, 2 ** 10, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.randint(info.min, info.max + 1, shape).astype(dtype)


@settings(max_examples=16, deadline=None)
@given(a=st.sampled_from(DOT_DTYPES), b=st.sampled_from(DOT_DTYPES),
       pet=st.sampled_from(PREFERRED), seed=st.integers(0, 2 ** 16))
def test_dot_general_dtype_pairs_as_xla(a, b, pet, seed):
    rng = np.random.RandomState(seed)
    x, y = _dot_operand(a, (2, 3, 40), rng), _dot_operand(b, (2, 40, 5), rng)
    f = lambda x, y: lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,))),  # noqa: E731
                                     preferred_element_type=pet)
    try:
        want = jax.jit(f)(x, y)
    except (TypeError, ValueError):
        return  # a combination JAX itself refuses
    tol = 1e-2 if want.dtype == F16 else 0  # fp32 sums are exact (see _dot_operand)
    c = rlxjax.coreml_jit(f, backend=TEST_BACKEND).lower(x, y).compile()
    assert_tree_close(c(x, y), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("a,b,pet", [(BOOL, BOOL, None), (I8, I8, I32), (F16, F16, F32),
                                     (F32, F32, F16), (F32, F32, I32), (I8, F32, None),
                                     (U8, U8, None)], ids=str)
def test_dot_general_named_cases(a, b, pet):
    rng = np.random.RandomState(0)
    x, y = _dot_operand(a, (4, 50), rng), _dot_operand(b, (50, 3), rng)
    f = lambda x, y: lax.dot_general(x, y, (((1,), (0,)), ((), ())),  # noqa: E731
                                     preferred_element_type=pet)
    check_against_jax(f, x, y, rtol=1e-2, atol=1e-2)


CONVS = [  # (lhs shape, rhs shape, conv_general_dilated keywords)
    ((2, 3, 9, 10), (4, 3, 3, 2), dict(window_strides=(1, 1), padding=((0, 0), (0, 0)))),
    ((2, 4, 7, 8), (6, 2, 3, 3), dict(window_strides=(2, 1), padding=((1, 2), (-1, 1)),
                                      lhs_dilation=(2, 1), rhs_dilation=(1, 2),
                                      feature_group_count=2)),
    ((4, 3, 6), (6, 3, 3), dict(window_strides=(1,), padding=((2, 2),), batch_group_count=2)),
]


def _conv_path(compiled) -> str:
    ops = {op.type for op in compiled.mil_ops()}
    return "fp32" if "conv" in ops else "int32 taps"


@pytest.mark.parametrize("case", range(len(CONVS)))
@pytest.mark.parametrize("dtype,pet,path", [(I8, None, "fp32"), (I8, I32, "fp32"),
                                            (U8, None, "fp32"), (I32, None, "int32 taps"),
                                            (I8, F32, "fp32"), (F16, F32, "fp32")], ids=str)
def test_integer_conv_exact(case, dtype, pet, path):
    xs, ws, kw = CONVS[case]
    rng = np.random.RandomState(case)
    big = dtype == I32  # values whose products and sums overflow fp32's 24 bits
    x, w = (_dot_operand(dtype, s, rng) * (1 if not big else 2 ** 20) for s in (xs, ws))
    f = lambda x, w: lax.conv_general_dilated(x, w, preferred_element_type=pet, **kw)  # noqa
    c = check_against_jax(f, x, w, rtol=1e-2, atol=1e-2)
    assert _conv_path(c) == path


def test_integer_conv_falls_back_to_int32_taps_beyond_the_fp32_bound():
    rng = np.random.RandomState(1)
    # 3x3 over 114 int8 channels: 1026 terms of up to 128 * 128 > 2**24 -> int32 taps;
    # over 113 channels (1017 terms) fp32 is exact.
    for channels, path in ((114, "int32 taps"), (113, "fp32")):
        x = np.full((1, channels, 4, 4), -128, np.int8)
        w = np.full((2, channels, 3, 3), -128, np.int8)
        w[1] = rng.randint(-128, 128, w[1].shape)
        f = lambda x, w: lax.conv_general_dilated(  # noqa: E731
            x, w, (1, 1), "SAME", preferred_element_type=jnp.int32)
        assert _conv_path(check_against_jax(f, x, w)) == path


# -- other integer paths -----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [I32, I8, U8, BOOL], ids=str)
def test_select_and_scatter_add_of_integers_and_bools(dtype):
    from jax._src.lax.windowed_reductions import _select_and_scatter_add

    rng = np.random.RandomState(0)
    operand = _dot_operand(dtype, (2, 4, 6), rng)
    source = _dot_operand(dtype, (1, 3, 5), rng)
    f = lambda s, o: _select_and_scatter_add(s, o, lax.ge_p, (2, 2, 2), (1, 1, 1),  # noqa
                                              ((0, 0),) * 3)
    check_against_jax(f, source, operand)


@pytest.mark.parametrize("index", [jnp.int8, jnp.uint8, jnp.int32])
def test_argmax_with_small_index_dtypes(index):
    x = np.random.RandomState(0).randn(3, 300).astype(np.float32)  # indices beyond 127/255
    check_against_jax(lambda x: (lax.argmax(x, 1, index), lax.argmin(x, 1, index)), x)


def test_bitcast_convert_type_same_dtype_and_int8_uint8():
    x8 = np.arange(-128, 128).astype(np.int8)
    check_against_jax(lambda x: (lax.bitcast_convert_type(x, jnp.uint8),
                                 lax.bitcast_convert_type(x.astype(jnp.uint8), jnp.int8)), x8)
    xf = np.float32([1.5, -2.0])
    check_against_jax(lambda x: lax.bitcast_convert_type(x, jnp.float32) * 2, xf)
    g = rlxjax.coreml_grad(lambda x: jnp.sum(lax.bitcast_convert_type(x, jnp.float32) * x),
                           backend="reference")(xf)
    np.testing.assert_array_equal(g, jax.grad(
        lambda x: jnp.sum(lax.bitcast_convert_type(x, jnp.float32) * x))(xf))


def test_bitcast_between_float_and_int_bits_is_a_clear_error():
    with pytest.raises(rlxjax.UnsupportedPrimitiveError,
                       match=r"'bitcast_convert_type'.*bitcast from float32 to int32: Core ML "
                             r"has no bit reinterpretation"):
        rlxjax.coreml_jit(lambda x: lax.bitcast_convert_type(x, jnp.int32))(np.float32([1]))


def test_lowering_errors_name_the_jax_primitive():
    from rlxjax.coreml.lower import LowerContext
    from rlxjax.ir import Graph, TensorType, DType

    g = Graph()
    x = g.add_input("x", TensorType((2,), DType.f32))
    node = g.add_node("convert", [x], {"dtype": DType.i32}, source="model.py:3 (f)")
    err = LowerContext(None, None, "fp32").unsupported(node, "why")
    assert "JAX primitive 'convert_element_type' at model.py:3 (f)" in str(err)
