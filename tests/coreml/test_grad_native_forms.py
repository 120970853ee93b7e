"""Gradient programs with the shorter MIL forms of two fused backward ops:

- a LayerNorm (flax ``nn.LayerNorm``, or a layer-kind ``rlxjax.nn.ada_layer_norm``) whose
  input is not differentiated needs only x̂ in its backward; in fp32 forward and backward
  then share one MIL ``layer_norm`` (rules/norm.py ``uses_native``) instead of the
  written-out statistics;
- the tanh-gelu backward is ``s + x·s·sigmoid(−v)·w`` with ``s = sigmoid(v)``
  (rules/activation.py), compared here with float64 over the whole range and for |x| up
  to 1e4 in fp32 and fp16 programs.

Every gradient is compared with ``jax.grad`` (and, for the gelu, with float64)."""
from __future__ import annotations

import math
import tempfile

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlxjax
import rlxjax.nn as rnn
from helpers import assert_tree_close, examples, TEST_BACKEND
from rlxjax.coreml.lower import lower_graph
from rlxjax.coreml.targets import get_target
from rlxjax.ir import DType, Graph, TensorType

SETTINGS = settings(max_examples=examples(4), deadline=None)
# as tests/transforms/test_grad_norms.py: another evaluation order than JAX's autodiff
NORM_TOL = dict(rtol=1e-4, atol=1e-5)
STATS = {"reduce_mean", "rsqrt", "sub"}  # the written-out statistics


def _grad(loss, args, argnums, precision="fp32"):
    c = rlxjax.coreml_grad(loss, argnums=argnums, backend=TEST_BACKEND,
                           precision=precision).lower(*args).compile()
    c.validate()
    return c


def _types(compiled):
    return [op.type for op in compiled.mil_ops()]


# -- LayerNorm on data: one native layer_norm shared by forward and backward ---------------
@SETTINGS
@given(shape=st.sampled_from([(3, 8), (2, 3, 16), (5, 1)]), seed=st.integers(0, 99),
       offset=st.sampled_from([0.0, 5.0]), eps=st.sampled_from([1e-6, 1e-3]))
def test_flax_layer_norm_param_grads_use_native_layer_norm(shape, seed, offset, eps):
    rng = np.random.default_rng(seed)
    x = (offset + rng.standard_normal(shape)).astype(np.float32)
    w = rng.standard_normal(shape).astype(np.float32)
    model = nn.LayerNorm(epsilon=eps)
    params = jax.tree_util.tree_map(
        lambda p: (p + rng.standard_normal(p.shape)).astype(np.float32),
        model.init(jax.random.key(0), x))

    def loss(params, x, w):
        return jnp.sum(model.apply(params, x) * w)

    c = _grad(loss, (params, x, w), 0)
    types = _types(c)
    assert types.count("layer_norm") == 1 and not STATS & set(types), types
    assert_tree_close(c(params, x, w), jax.grad(loss)(params, x, w), **NORM_TOL)


@SETTINGS
@given(dims=st.sampled_from([(2, 3, 8), (4, 16)]), seed=st.integers(0, 99),
       per_row=st.booleans())
def test_ada_layer_norm_param_grads_use_native_layer_norm(dims, seed, per_row):
    rng = np.random.default_rng(seed)
    x = (2 * rng.standard_normal(dims)).astype(np.float32)
    w = rng.standard_normal(dims).astype(np.float32)
    sshape = dims[:-2] + (1, dims[-1]) if per_row else (dims[-1],)
    scale = rng.standard_normal(sshape).astype(np.float32)
    shift = rng.standard_normal(sshape).astype(np.float32)

    def loss(scale, shift, x, w):
        return jnp.sum(rnn.ada_layer_norm(x, scale, shift, kind="layer") * w)

    c = _grad(loss, (scale, shift, x, w), (0, 1))
    assert "ada_layer_norm_grad" in c.graph.op_histogram()
    types = _types(c)
    assert types.count("layer_norm") == 1 and not STATS & set(types), types
    assert_tree_close(c(scale, shift, x, w), jax.grad(loss, (0, 1))(scale, shift, x, w),
                      **NORM_TOL)


def test_layer_norm_input_grad_keeps_the_shared_statistics():
    """Where dx is needed the forward stays written out (rstd is needed: CSE shares it)."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3, 8)).astype(np.float32), \
        rng.standard_normal((2, 3, 8)).astype(np.float32)
    g, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)

    def loss(x, g, b, w):
        return jnp.sum(rnn.layer_norm(x, g, b) * w)

    c = _grad(loss, (x, g, b, w), (0, 1))
    types = _types(c)
    assert "layer_norm" not in types and types.count("rsqrt") == 1, types
    assert_tree_close(c(x, g, b, w), jax.grad(loss, (0, 1))(x, g, b, w), **NORM_TOL)


def test_layer_norm_fp16_param_grads_keep_the_scaled_form():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((3, 8)).astype(np.float32), \
        rng.standard_normal((3, 8)).astype(np.float32)
    g, b = rng.standard_normal(8).astype(np.float32), rng.standard_normal(8).astype(np.float32)

    def loss(g, b, x, w):
        return jnp.sum(rnn.layer_norm(x, g, b) * w)

    c = _grad(loss, (g, b, x, w), (0, 1), precision="fp16")
    assert "layer_norm" not in _types(c)
    # fp16 tolerance of tests/transforms/test_grad_norms.py::test_norm_grads_in_fp16
    for got, want in zip(c(g, b, x, w), jax.grad(loss, (0, 1))(g, b, x, w)):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-2, atol=1e-2)


# -- tanh-gelu backward ------------------------------------------------------------------------
def _tanh_gelu_grad64(x):
    """d/dx ½x(1 + tanh u), u = c(x + a·x³), in float64 with nothing cancelling:
    ½(1 + tanh u) = sigmoid(2u), ½(1 − tanh² u) = sigmoid(2u)·sigmoid(−2u)."""
    x = np.asarray(x, np.float64)
    c, a = math.sqrt(2 / math.pi), 0.044715
    v = 2 * c * (x + a * x ** 3)
    e = np.exp(-np.abs(v))
    s = np.where(v >= 0, 1 / (1 + e), e / (1 + e))
    r = np.where(v >= 0, e / (1 + e), 1 / (1 + e))  # 1 − s
    return s + x * s * r * 2 * c * (1 + 3 * a * x * x)


def _gelu_loss(x):
    return jnp.sum(jax.nn.gelu(x, approximate=True))


def test_tanh_gelu_grad_against_float64_over_the_range():
    x = np.linspace(-12, 12, 2401).astype(np.float32)
    c = _grad(_gelu_loss, (x,), 0)
    got = np.asarray(c(x), np.float64)
    ref = _tanh_gelu_grad64(x)
    with jax.enable_x64(True):  # the reference is float64 JAX's, to its cancellation
        jref = np.asarray(jax.grad(_gelu_loss)(x.astype(np.float64)))  # (~1e-16 absolute)
    np.testing.assert_allclose(ref, jref, rtol=0, atol=1e-13)
    # measured 1.5e-7 (the ½(1 + t) form before: 1.2e-6; XLA's float32: 3.5e-6)
    assert np.max(np.abs(got - ref)) < 3e-7
    # the tail, gradient -1e-2 .. -3e-36: measured 1.0e-5 relative (before: 13; XLA: 1)
    tail = (x >= -10) & (x <= -3)
    assert np.max(np.abs(got[tail] / ref[tail] - 1)) < 3e-5


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_tanh_gelu_grad_saturates_without_nan(precision):
    x = np.array([-1e4, -600, -300, -256, -100, -16, -10, 10, 16, 100, 256, 300, 600, 1e4],
                 np.float32)
    c = _grad(_gelu_loss, (x,), 0, precision=precision)
    got = np.asarray(c(x))
    with jax.enable_x64(True):
        want = np.asarray(jax.grad(_gelu_loss)(x.astype(np.float64)))
    assert np.all(np.isfinite(got)), got
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-30)


@SETTINGS
@given(seed=st.integers(0, 99), scale=st.sampled_from([0.5, 2.0, 6.0]))
def test_tanh_gelu_grad_fp16_program(seed, scale):
    x = (scale * np.random.default_rng(seed).standard_normal((4, 16))).astype(np.float32)
    c = _grad(_gelu_loss, (x,), 0, precision="fp16")
    assert "gelu_grad" in c.graph.op_histogram()
    # fp16 compute of a chain of ~14 rounded ops on gradients of magnitude <= ~1.13:
    # measured (numpy fp16 emulation, 4001 points on [-12, 12]) 1.1e-3 at most
    np.testing.assert_allclose(c(x), np.asarray(jax.grad(_gelu_loss)(x)), rtol=0, atol=5e-3)


@pytest.mark.parametrize("precision, most", [("fp32", 14), ("fp16", 15)])
def test_tanh_gelu_grad_op_count(precision, most):
    """One gelu_grad node alone: 14 non-const MIL ops (15 before), fp16 one more (the clip;
    not counting the casts of the fp32 inputs and output)."""
    graph = Graph("one_node")
    t = TensorType((4, 8), DType.f32)
    ins = [graph.add_input(f"in{i}", t) for i in range(2)]
    graph.add_output("out", graph.add_node("gelu_grad", ins, {"approximate": True}).outputs[0])
    with tempfile.TemporaryDirectory() as d:
        model, _, _ = lower_graph(graph, get_target("iOS17"), precision, d)
    block = next(iter(model.mlProgram.functions["main"].block_specializations.values()))
    types = [o.type for o in block.operations if o.type not in ("const", "cast")]  # fp16 I/O
    assert "tanh" not in types and types.count("sigmoid") == 2, types
    assert len(types) == most, types
