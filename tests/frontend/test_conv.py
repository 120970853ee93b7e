"""lax.conv_general_dilated through rlxjax: forward, coreml_grad (w.r.t. input and
weight), coreml_jit(jax.grad) (JAX's own transposed convolutions, batch_group_count
included), flax models, and the reference interpreter's MIL ``conv`` against JAX.

Hypothesis draws 1-D/2-D convolutions over layouts (NC[spatial]/OI[spatial],
N[spatial]C/[spatial]IO and a mixed one), strides, SAME/VALID/explicit asymmetric
(including negative) padding, lhs and rhs dilation, and feature groups (grouped and
depthwise), for targets iOS15 and iOS17. Inputs are dyadic (k/4, |k| <= 8) and the loss
weights too, so every product and every partial sum is exact in fp32 and the results do
not depend on summation order: FP32_TOL (rtol 1e-5 / atol 1e-6) holds with room to spare.
The flax models use normal inputs; their tolerance is stated where they are.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings, strategies as st
from jax import lax

import rlxjax
from helpers import assert_tree_close, check_against_jax, examples, FP32_TOL
from rlxjax.errors import UnsupportedPrimitiveError
from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS

FWD = settings(max_examples=examples(12), deadline=None)
GRAD = settings(max_examples=examples(16), deadline=None)

LAYOUTS = {
    1: [("NCH", "OIH", "NCH"), ("NHC", "HIO", "NHC"), ("NCH", "HIO", "NHC")],
    2: [("NCHW", "OIHW", "NCHW"), ("NHWC", "HWIO", "NHWC"), ("NCHW", "HWIO", "NHWC")],
}


def dyadic(rng, shape):
    return (rng.integers(-8, 9, size=shape) / 4).astype(np.float32)


def weighted(f, seed=0):
    """Scalar loss sum(f(x, w) * r), r dyadic and fixed per output shape."""

    def loss(x, w):
        y = f(x, w)
        return jnp.sum(y * dyadic(np.random.default_rng(seed), np.shape(y)))

    return loss


def _place(spec, sizes):
    """Shape of an operand whose layout string is ``spec`` given sizes per letter."""
    return tuple(sizes[c] for c in spec)


@st.composite
def convs(draw, spatial=(1, 2)):
    """(fun, x, w): a conv_general_dilated with drawn parameters and dyadic operands."""
    ns = draw(st.sampled_from(spatial))
    lhs_spec, rhs_spec, out_spec = draw(st.sampled_from(LAYOUTS[ns]))
    groups_kind = draw(st.sampled_from(["none", "grouped", "depthwise"]))
    cin_g = 1 if groups_kind == "depthwise" else draw(st.integers(1, 3))
    groups = {"none": 1, "grouped": 2, "depthwise": draw(st.integers(2, 3))}[groups_kind]
    cout = groups * draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(ns)]
    strides = tuple(draw(st.integers(1, 3)) for _ in range(ns))
    rhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(ns))
    lhs_dil = tuple(draw(st.integers(1, 2)) for _ in range(ns))
    # JAX refuses string padding together with lhs dilation.
    padding = draw(st.sampled_from(["explicit"] if max(lhs_dil) > 1 else
                                   ["SAME", "VALID", "explicit"]))
    if padding == "explicit":
        padding = tuple((draw(st.integers(-1, 3)), draw(st.integers(-1, 3))) for _ in range(ns))
    # Large enough that the output is not empty even with padding (-1, -1).
    spatial_sizes = [max(draw(st.integers(1, 7)), -(-((k - 1) * rd + 2) // ld) + 1)
                     for k, rd, ld in zip(kernel, rhs_dil, lhs_dil)]
    letters = lhs_spec[2:] if lhs_spec[1] == "C" else lhs_spec[1:-1]
    sizes = {"N": draw(st.integers(1, 2)), "C": cin_g * groups}
    sizes.update(zip(letters, spatial_sizes))
    x_shape = _place(lhs_spec, sizes)
    k_sizes = {"O": cout, "I": cin_g, **dict(zip(letters, kernel))}
    w_shape = _place(rhs_spec, k_sizes)

    def fun(x, w):
        return lax.conv_general_dilated(
            x, w, strides, padding, lhs_dilation=lhs_dil, rhs_dilation=rhs_dil,
            dimension_numbers=(lhs_spec, rhs_spec, out_spec), feature_group_count=groups)

    try:
        out = jax.eval_shape(fun, jax.ShapeDtypeStruct(x_shape, np.float32),
                             jax.ShapeDtypeStruct(w_shape, np.float32))
    except (TypeError, ValueError):
        out = None
    assume(out is not None and 0 not in out.shape)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 31)))
    return fun, dyadic(rng, x_shape), dyadic(rng, w_shape)


TARGETS = st.sampled_from(["iOS15", "iOS17"])


@FWD
@given(case=convs(), target=TARGETS)
def test_forward(case, target):
    fun, x, w = case
    check_against_jax(fun, x, w, target=target, **FP32_TOL)


@GRAD
@given(case=convs(), target=TARGETS)
def test_coreml_grad_input_and_weight(case, target):
    fun, x, w = case
    loss = weighted(fun)
    cf = rlxjax.coreml_grad(loss, argnums=(0, 1), target=target, backend="reference")
    compiled = cf.lower(x, w).compile()
    compiled.validate()
    assert_tree_close(compiled(x, w), jax.grad(loss, argnums=(0, 1))(x, w), **FP32_TOL)


@GRAD
@given(case=convs(), target=TARGETS)
def test_jit_of_jax_grad(case, target):
    """JAX's own transpose rules: lhs-dilated convs, swapped dimension numbers and, for
    grouped convs, batch_group_count > 1 in the weight gradient."""
    fun, x, w = case
    check_against_jax(jax.grad(weighted(fun), argnums=(0, 1)), x, w, target=target,
                      **FP32_TOL)


def test_conv3d_forward_and_grads():
    rng = np.random.default_rng(3)
    x, w = dyadic(rng, (2, 4, 5, 4, 6)), dyadic(rng, (6, 2, 2, 3, 2))

    def fun(x, w):
        return lax.conv_general_dilated(x, w, (2, 1, 2), ((1, 0), (1, 2), (0, 1)),
                                        lhs_dilation=(1, 2, 1), rhs_dilation=(1, 1, 2),
                                        feature_group_count=2)

    check_against_jax(fun, x, w, **FP32_TOL)
    check_against_jax(jax.grad(weighted(fun), argnums=(0, 1)), x, w, **FP32_TOL)
    got = rlxjax.coreml_grad(weighted(fun), argnums=(0, 1), backend="reference")(x, w)
    assert_tree_close(got, jax.grad(weighted(fun), argnums=(0, 1))(x, w), **FP32_TOL)


@pytest.mark.parametrize("target", ["iOS15", "iOS17"])
def test_batch_group_count(target):
    """batch_group_count in user code (forward, its gradients, and JAX's gradient of it,
    which uses feature groups)."""
    rng = np.random.default_rng(4)
    x, w = dyadic(rng, (6, 5, 2)), dyadic(rng, (3, 2, 6))  # NWC, WIO; 3 batch groups

    def fun(x, w):
        return lax.conv_general_dilated(x, w, (2,), ((1, 1),), rhs_dilation=(2,),
                                        dimension_numbers=("NWC", "WIO", "NWC"),
                                        batch_group_count=3)

    check_against_jax(fun, x, w, target=target, **FP32_TOL)
    check_against_jax(jax.grad(weighted(fun), argnums=(0, 1)), x, w, target=target,
                      **FP32_TOL)
    got = rlxjax.coreml_grad(weighted(fun), argnums=(0, 1), target=target,
                             backend="reference")(x, w)
    assert_tree_close(got, jax.grad(weighted(fun), argnums=(0, 1))(x, w), **FP32_TOL)


def test_const_dilated_kernel_uses_mil_dilations():
    """A constant kernel keeps MIL's own ``dilations``; a runtime one is zero-dilated."""
    rng = np.random.default_rng(5)
    x, w = dyadic(rng, (1, 3, 9, 9)), dyadic(rng, (4, 3, 3, 2))

    def conv(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME", rhs_dilation=(2, 3))

    const = check_against_jax(lambda x: conv(x, w), x, **FP32_TOL)
    runtime = check_against_jax(conv, x, w, **FP32_TOL)
    assert const.op_histogram().get("pad", 0) == 0
    assert runtime.op_histogram().get("pad", 0) >= 1


def test_fp16_precision():
    # Dyadic inputs: every product and sum here is exact in fp16 too (|y| <= 2**6).
    rng = np.random.default_rng(6)
    x, w = dyadic(rng, (1, 6, 6, 2)), dyadic(rng, (3, 3, 2, 4))

    def fun(x, w):
        return lax.conv_general_dilated(x, w, (1, 2), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    check_against_jax(fun, x, w, precision="fp16", rtol=0, atol=0)
    dilated = lambda x: lax.conv_general_dilated(x, w, (1, 1), "SAME", rhs_dilation=(2, 1),
                                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    check_against_jax(dilated, x, precision="fp16", rtol=0, atol=0)  # const kernel


# --- flax models ---------------------------------------------------------------------------

def _flax_case(module, x_shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=x_shape).astype(np.float32)
    params = module.init(jax.random.PRNGKey(seed), x)
    params = jax.tree_util.tree_map(np.asarray, params)
    y_ref = dyadic(rng, module.apply(params, x).shape)

    def loss(params, x):
        return jnp.sum(jnp.tanh(module.apply(params, x)) * y_ref)

    return loss, params, x


def _flax_models():
    import flax.linen as nn

    class Strided(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Conv(8, (3, 3), strides=(2, 2), padding="SAME")(x)
            return nn.Conv(4, (2, 2), padding="SAME")(jax.nn.relu(x))

    class Depthwise(nn.Module):
        @nn.compact
        def __call__(self, x):
            c = x.shape[-1]
            x = nn.Conv(2 * c, (3, 3), feature_group_count=c, padding="SAME")(x)
            return nn.Conv(3, (1, 1))(x)

    class Transposed(nn.Module):  # lax.conv_transpose: an lhs-dilated conv
        @nn.compact
        def __call__(self, x):
            return nn.ConvTranspose(4, (3, 3), strides=(2, 2), padding="SAME")(x)

    return {"strided_same": (Strided(), (2, 9, 7, 3)), "depthwise": (Depthwise(), (2, 6, 6, 3)),
            "conv_transpose": (Transposed(), (2, 4, 5, 3))}


@pytest.mark.parametrize("target", ["iOS15", "iOS17"])
@pytest.mark.parametrize("name", ["strided_same", "depthwise", "conv_transpose"])
def test_flax_conv_models(name, target):
    module, shape = _flax_models()[name]
    loss, params, x = _flax_case(module, shape, seed=7)
    # Normal inputs, sums in another order than XLA's: measured max abs errors 1.9e-6,
    # 2.9e-6, 4.8e-6 (strided, depthwise, transposed) on values up to 17 (ulp(16) = 1.9e-6),
    # i.e. a few ulp of the largest terms; small elements need atol 1e-5, not 1e-6.
    tol = dict(rtol=1e-5, atol=1e-5)
    check_against_jax(lambda p, x: module.apply(p, x), params, x, target=target, **tol)
    got = rlxjax.coreml_grad(loss, argnums=(0, 1), target=target, backend="reference")(params, x)
    assert_tree_close(got, jax.grad(loss, argnums=(0, 1))(params, x), **tol)
    check_against_jax(jax.grad(loss, argnums=(0, 1)), params, x, target=target, **tol)


# --- errors ---------------------------------------------------------------------------------

def test_integer_conv_is_exact():  # (more in tests/coreml/test_int8.py)
    x, w = np.arange(8, dtype=np.int32).reshape(1, 2, 4), np.int32([[[3, -2], [5, 7]]])
    check_against_jax(lambda x, w: lax.conv(x, w, (1,), "VALID"), x, w)


def test_four_spatial_dims_are_unsupported():
    x, w = np.ones((1, 1, 2, 2, 2, 2), np.float32), np.ones((1, 1, 1, 1, 1, 1), np.float32)
    with pytest.raises(UnsupportedPrimitiveError, match="4 spatial dimensions"):
        rlxjax.coreml_jit(lambda x, w: lax.conv(x, w, (1,) * 4, "VALID")).lower(x, w)


# --- the reference interpreter's MIL conv vs JAX -----------------------------------------------

@settings(max_examples=examples(25), deadline=None)
@given(data=st.data())
def test_reference_conv_vs_jax(data):
    """coremltools has no value_inference for conv (see OPS_WITHOUT_VALUE_INFERENCE in
    tests/coreml/interpreter/test_reference_ops.py): MIL conv's semantics are checked against
    lax.conv_general_dilated (NC[spatial] / OI[spatial], same parameters), with bias and
    with fp16 (accumulated in fp32, rounded once: exact for dyadic values)."""
    ns = data.draw(st.integers(1, 3))
    groups = data.draw(st.integers(1, 3))
    cin_g, cout = data.draw(st.integers(1, 2)), groups * data.draw(st.integers(1, 2))
    kernel = [data.draw(st.integers(1, 3)) for _ in range(ns)]
    strides = [data.draw(st.integers(1, 3)) for _ in range(ns)]
    dil = [data.draw(st.integers(1, 2)) for _ in range(ns)]
    pads = [(data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in range(ns)]
    spatial = [max(data.draw(st.integers(1, 6)), (k - 1) * d + 1 - lo - hi)
               for k, d, (lo, hi) in zip(kernel, dil, pads)]
    dtype = data.draw(st.sampled_from([np.float32, np.float16]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    x = dyadic(rng, (data.draw(st.integers(1, 2)), cin_g * groups, *spatial))
    w = dyadic(rng, (cout, cin_g, *kernel))
    bias = dyadic(rng, (cout,)) if data.draw(st.booleans()) else None
    inputs = {"x": x.astype(dtype), "weight": w.astype(dtype),
              "strides": np.array(strides, np.int32), "pad_type": "custom",
              "pad": np.array([v for p in pads for v in p], np.int32),
              "dilations": np.array(dil, np.int32), "groups": np.int32(groups)}
    if bias is not None:
        inputs["bias"] = bias.astype(dtype)
    (got,) = MIL_OP_IMPLS["conv"](inputs)
    want = lax.conv_general_dilated(x, w, strides, pads, rhs_dilation=dil,
                                    feature_group_count=groups,
                                    precision=lax.Precision.HIGHEST)
    if bias is not None:
        want = want + bias.reshape((-1,) + (1,) * ns)
    want = np.asarray(want).astype(dtype)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_reference_conv_valid_default_and_same_refused():
    x, w = np.ones((1, 2, 5), np.float32), np.ones((3, 2, 2), np.float32)
    (got,) = MIL_OP_IMPLS["conv"]({"x": x, "weight": w})
    np.testing.assert_array_equal(got, np.full((1, 3, 4), 4, np.float32))
    with pytest.raises(NotImplementedError, match="pad_type 'same'"):
        MIL_OP_IMPLS["conv"]({"x": x, "weight": w, "pad_type": "same"})
