"""Padding on Core AI without its ``pad`` op: a conv's input written into a zero constant by
one ``slice_update`` (coreai/ops_conv.py ``zero_pad``), ``lax.pad`` as one gather of the
flattened trailing dims and one ``where`` (coreai/ops_shape.py ``lax_pad``): convolutions
with edge, negative and interior padding (strided convolutions' backward), forward and
gradients, against JAX on both formats; both paddings bit for bit, non-finite values and
-0.0 included."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import rlxjax

pytest.importorskip("coreai")


def _ops(fn, *args):
    c = rlxjax.coreml_jit(fn, format="aimodel").lower(*args).compile()
    return [o.type for o in c.executable.operations()]


@st.composite
def conv_cases(draw):
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    rhs_dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    # non-negative here: XLA:CPU's conv does not crop a negative low edge as lax.pad does
    # (padding ((-1, 1), ...) leaves its last row non-zero); the gradients of strided convs
    # bring negative edges of their own, compared with jax.grad
    pad = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(2))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    size = (draw(st.integers(6, 9)), draw(st.integers(6, 9)))
    return stride, rhs_dil, pad, k, size


def _case(stride, rhs_dil, pad, k, size, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3) + size).astype(np.float32)
    w = rng.standard_normal((4, 3) + k).astype(np.float32)

    def conv(x, w):
        return lax.conv_general_dilated(x, w, stride, pad, rhs_dilation=rhs_dil)

    def loss(x, w):
        return jnp.sum(jnp.tanh(conv(x, w)) ** 2)

    return conv, loss, x, w


def _check(fmt, case):
    conv, loss, x, w = _case(*case)
    try:
        want = jax.jit(conv)(x, w)
    except (TypeError, ValueError):  # an empty output: nothing to compare
        return
    if 0 in want.shape:
        return
    kw = {"format": "aimodel"} if fmt == "aimodel" else {}
    got = rlxjax.coreml_jit(conv, **kw)(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    gx, gw = rlxjax.coreml_grad(loss, argnums=(0, 1), **kw)(x, w)
    jx, jw = jax.jit(jax.grad(loss, (0, 1)))(x, w)
    np.testing.assert_allclose(gx, jx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw, jw, rtol=1e-4, atol=1e-4)


@pytest.mark.slow  # ~20 s; the default run keeps the strided SAME case below on Core AI
@settings(max_examples=4, deadline=None)
@given(conv_cases())
def test_conv_and_its_gradients_match_jax_on_core_ai(case):
    _check("aimodel", case)


@settings(max_examples=4, deadline=None)
@given(conv_cases())
def test_conv_and_its_gradients_match_jax_on_core_ml(case):
    _check("mlpackage", case)


@pytest.mark.parametrize("fmt", ["aimodel", "mlpackage"])
@pytest.mark.parametrize("case", [
    ((2, 2), (1, 1), "SAME", (3, 3), (8, 8)),          # even size: SAME pads (0, 1)
    # the hypothesis tests above draw these shapes too: the default suite's time
    pytest.param(((2, 1), (1, 2), ((1, 0), (2, 1)), (3, 3), (7, 9)), marks=pytest.mark.slow),
    pytest.param(((2, 2), (2, 2), ((2, 2), (1, 0)), (2, 3), (9, 8)), marks=pytest.mark.slow),
])
def test_strided_and_dilated_convs_and_their_gradients_match_jax(fmt, case):
    _check(fmt, case)


def test_a_same_conv_and_its_strided_backward_run_no_pad_op():
    _, loss, x, w = _case((2, 2), (1, 1), "SAME", (3, 3), (8, 8))
    ops = _ops(jax.grad(loss, (0, 1)), x, w)
    # the strided conv's input gradient writes its phases by slice_update (ops_conv.py)
    assert "conv2d" in ops and "pad" not in ops and "concat" not in ops


def _dx_case(dims, stride, k, pad, groups=1, seed=0):
    """The input gradient of a strided conv: a conv of its input dilated by the stride."""
    rng = np.random.default_rng(seed)
    size = (7, 8)[:dims]
    x = rng.standard_normal((2, 2 * groups) + size).astype(np.float32)
    w = rng.standard_normal((3 * groups, 2) + k).astype(np.float32)

    def loss(x, w):
        y = lax.conv_general_dilated(x, w, stride, pad, feature_group_count=groups)
        return jnp.sum(jnp.sin(y) * y)

    return loss, x, w


@pytest.mark.parametrize("dims, stride, k, pad, groups", [
    (2, (2, 2), (3, 3), "SAME", 1),
    (2, (2, 3), (3, 3), ((1, 2), (0, 1)), 2),
    (1, (3,), (4,), ((2, 1),), 1),
])
def test_a_strided_convs_input_gradient_runs_as_phase_convs_and_matches_jax(dims, stride, k,
                                                                           pad, groups):
    loss, x, w = _dx_case(dims, stride, k, pad, groups)
    ops = _ops(jax.grad(loss), x, w)
    phases = int(np.prod(stride))
    assert ops.count("conv2d") == 1 + phases  # the forward, then one conv per phase
    assert "concat" not in ops and "gather_along_axis" not in ops
    got = rlxjax.coreml_grad(loss, argnums=(0, 1), format="aimodel")(x, w)
    want = jax.jit(jax.grad(loss, (0, 1)))(x, w)
    for g, j in zip(got, want):
        np.testing.assert_allclose(g, j, rtol=1e-4, atol=1e-4)


def test_phase_convs_keep_an_infinite_input_infinite_as_xla_does():
    # no zero sample of the dilated input meets a tap: inf * w stays inf (never inf * 0)
    rng = np.random.default_rng(1)
    dy = rng.uniform(0.5, 1.0, (1, 2, 4, 5)).astype(np.float32)
    dy[0, 1, 1, 2], dy[0, 0, 3, 0] = np.inf, -np.inf
    w = rng.uniform(0.5, 1.0, (3, 2, 3, 3)).astype(np.float32)

    def f(dy, w):
        return lax.conv_general_dilated(dy, w, (1, 1), ((1, 2), (2, 1)), lhs_dilation=(2, 2))

    want = np.asarray(jax.jit(f)(dy, w))
    got = rlxjax.coreml_jit(f, format="aimodel")(dy, w)
    assert np.isnan(want).any() == np.isnan(got).any()
    assert np.array_equal(np.isinf(got), np.isinf(want))
    assert np.array_equal(np.isnan(got), np.isnan(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", [
    [(0, 0, 0), (0, 0, 0), (1, 1, 0), (1, 1, 0)],
    [(0, 0, 0), (0, 0, 0), (2, -1, 1), (-1, 3, 2)],
    [(0, 0, 0), (1, 0, 0), (0, 0, 0), (0, 0, 0)],
    [(1, -1, 0), (0, 0, 0), (0, 0, 1), (0, 0, 0)],
    [(0, 0, 0), (0, 0, 0), (-2, -1, 0), (0, 0, 0)],
])
def test_lax_pad_is_bit_exact_with_non_finite_values_and_negative_zero(config):
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 4)).astype(np.float32)
    x[0, 0, 0, 0], x[1, 2, 4, 3], x[0, 1, 2, 2] = np.inf, np.nan, -0.0

    def f(x, v):
        return lax.pad(x, v, config)

    want = np.asarray(jax.jit(f)(x, np.float32(-7.5)))
    got = rlxjax.coreml_jit(f, format="aimodel")(x, np.float32(-7.5))
    assert got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_a_convs_kernel_gradient_reuses_its_padded_input_and_matches_jax():
    # the forward pads x (NCHW); the kernel gradient pads the same x as [C, N, H, W]: one
    # padding for both (ops_conv._padded), a transpose of the padded tensor for the second
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 7, 6, 4)).astype(np.float32)
    w = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)

    def loss(w, x):
        y = lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.sum(jnp.tanh(y) * y)

    ops = _ops(jax.grad(loss), w, x)
    assert ops.count("slice_update") == 1 and "gather_along_axis" not in ops
    got = rlxjax.coreml_grad(loss, format="aimodel")(w, x)
    np.testing.assert_allclose(got, jax.jit(jax.grad(loss))(w, x), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pad, lhs_dil", [
    (((1, 1), (1, 1)), (1, 1)),
    (((2, 0), (0, 3)), (2, 1)),
    (((1, -1), (0, -2)), (3, 2)),
])
def test_a_convs_zero_padding_copies_its_input_exactly(pad, lhs_dil):
    # a 1x1 unit kernel: the conv's output is its padded, dilated input itself; the samples
    # (inf, NaN, -0.0 among them) land where XLA puts them, +0.0 everywhere else
    x = np.random.default_rng(3).standard_normal((2, 1, 5, 4)).astype(np.float32)
    x[0, 0, 0, 0], x[1, 0, 4, 3], x[0, 0, 2, 2] = np.inf, np.nan, -np.inf
    w = np.ones((1, 1, 1, 1), np.float32)

    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), pad, lhs_dilation=lhs_dil)

    want = np.asarray(jax.jit(f)(x, w))
    ops = _ops(f, x, w)
    assert "slice_update" in ops and "pad" not in ops and "gather_along_axis" not in ops
    got = rlxjax.coreml_jit(f, format="aimodel")(x, w)
    assert got.shape == want.shape
    assert np.array_equal(got, want, equal_nan=True)


def test_an_infinite_weight_meets_the_zero_padding_as_in_xla():
    # XLA multiplies the padding's zeros by the taps: an inf tap makes NaN at the edges
    rng = np.random.default_rng(4)
    x = rng.uniform(0.5, 1.0, (1, 2, 5, 5)).astype(np.float32)
    w = rng.uniform(0.5, 1.0, (3, 2, 3, 3)).astype(np.float32)
    w[1, 0, 0, 0] = np.inf

    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), "SAME")

    want = np.asarray(jax.jit(f)(x, w))
    got = rlxjax.coreml_jit(f, format="aimodel")(x, w)
    assert np.isnan(want).any()
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-5, atol=1e-5)


@st.composite
def dilated_cases(draw):
    lhs = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    rhs = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    # a negative low edge only where the input is dilated: XLA:CPU's conv crops a
    # negative low edge of an undilated input unlike lax.pad (see conv_cases)
    pad = tuple((draw(st.integers(-1 if d > 1 else 0, 2)), draw(st.integers(-1, 2)))
                for d in lhs)
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    groups = draw(st.integers(1, 2))
    return lhs, rhs, pad, k, groups


@pytest.mark.slow  # ~5 s an example; the fixed cases above stay in the default run
@settings(max_examples=6, deadline=None)
@given(dilated_cases())
def test_convs_of_dilated_padded_grouped_inputs_match_jax_on_core_ai(case):
    # zero_pad (edges, negative edges, interior) and the phase convs, with feature groups
    lhs, rhs, pad, k, groups = case
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2 * groups, 5, 6)).astype(np.float32)
    w = rng.standard_normal((3 * groups, 2) + k).astype(np.float32)

    def f(x, w):
        return lax.conv_general_dilated(x, w, (1, 1), pad, lhs_dilation=lhs, rhs_dilation=rhs,
                                        feature_group_count=groups)

    try:
        want = np.asarray(jax.jit(f)(x, w))
    except (TypeError, ValueError):  # an empty output: nothing to compare
        return
    if 0 in want.shape:
        return
    got = rlxjax.coreml_jit(f, format="aimodel")(x, w)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
