"""jax.nn.dot_product_attention (implementation='xla') and so nnx.MultiHeadAttention: the
softmax that subtracts the max of the untransposed scores from a transposed copy is
recognised as one fused softmax (transforms/recognize_activations.py, ``_transposed_max``)
and the whole attention (unmasked or is_causal) as the fused op in dot_product_attention's layout
(transforms/attention_layouts.py); forward and gradient agree with JAX."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import example, given, settings
from hypothesis import strategies as st

import rlxjax
from helpers import assert_tree_close, examples, TEST_BACKEND

TOL = dict(rtol=2e-5, atol=2e-6)  # fp32 vs XLA's fp32: other association of the same sums


def _compile(fun, args, grad=False, argnums=0):
    f = (rlxjax.coreml_grad(fun, argnums=argnums, target="iOS18", backend=TEST_BACKEND)
         if grad else rlxjax.coreml_jit(fun, target="iOS18", backend=TEST_BACKEND))
    c = f.lower(*args).compile()
    c.validate()
    return c


def _check(fun, args, argnums, fused):
    c = _compile(fun, args)
    hist = c.graph.op_histogram()
    assert hist.get(fused) == 1 and "exp" not in hist, hist
    if fused == "attention":
        assert "softmax" not in hist, hist
        assert "scaled_dot_product_attention" in [op.type for op in c.mil_ops()]
    assert_tree_close(c(*args), jax.jit(fun)(*args), **TOL)

    def loss(*a):
        y = fun(*a)
        return jnp.sum(y * jnp.cos(jnp.arange(y.size).reshape(y.shape)))

    g = _compile(loss, args, grad=True, argnums=argnums)
    assert fused + "_grad" in g.graph.op_histogram()
    assert_tree_close(g(*args), jax.jit(jax.grad(loss, argnums=argnums))(*args), **TOL)


@pytest.mark.slow  # (~15 s; nnx MultiHeadAttention and the where masks run by default)
@settings(max_examples=3, deadline=None)
@given(dims=st.tuples(*[st.integers(1, 4)] * 5), causal=st.booleans(),
       seed=st.integers(0, 50))
def test_dot_product_attention_softmax_is_fused(dims, causal, seed):
    b, L, S, h, e = dims
    r = np.random.default_rng(seed)
    q = r.standard_normal((b, L, h, e)).astype(np.float32)
    k, v = (r.standard_normal((b, S, h, e)).astype(np.float32) for _ in range(2))
    f = lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731
    _check(f, (q, k, v), (0, 1, 2), "attention")


def test_nnx_multi_head_attention_is_fused():
    x = np.random.default_rng(1).standard_normal((2, 5, 16)).astype(np.float32)
    m = nnx.MultiHeadAttention(num_heads=4, in_features=16, decode=False, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(m)
    f = lambda s, x: nnx.merge(graphdef, s)(x)  # noqa: E731
    _check(f, (state, x), 0, "attention")


def test_grouped_heads_and_bias_are_fused():
    """Grouped-query attention (two free dims of q larger than 1: the op's query rows are
    both, flattened) and an additive ``bias`` are fused too (tests/transforms/
    test_attention_gqa.py covers the forms at large); forward and gradient agree."""
    r = np.random.default_rng(3)
    q = r.standard_normal((2, 3, 4, 8)).astype(np.float32)
    k, v = (r.standard_normal((2, 5, 2, 8)).astype(np.float32) for _ in range(2))
    bias = r.standard_normal((2, 4, 3, 5)).astype(np.float32)
    kv = r.standard_normal((2, 5, 4, 8)).astype(np.float32)
    _check(jax.nn.dot_product_attention, (q, k, v), (0, 1, 2), "attention")
    _check(lambda q, k, v, b: jax.nn.dot_product_attention(q, k, v, bias=b),
           (q, kv, kv, bias), (0, 1, 2, 3), "attention")


@settings(max_examples=examples(4), deadline=None)
@given(mask_seed=st.integers(0, 10**6), fill=st.sampled_from(["min", "0.7min", "-1e9"]),
       as_input=st.booleans(), kill_row=st.booleans(), seed=st.integers(0, 50))
@example(mask_seed=1, fill="min", as_input=False, kill_row=True, seed=0)
@example(mask_seed=1, fill="0.7min", as_input=False, kill_row=False, seed=0)
def test_where_masks(mask_seed, fill, as_input, kill_row, seed):
    """``where(mask, scores, fill)``: fused when the fill's neighbours are far enough apart
    that exp(fill − max) is 0 (not for -1e9 in fp32), as an additive 0/-inf mask when the
    mask is a constant with a True in every row, else as the op's bool mask (an input, or
    fully masked rows: uniform, as JAX gives); else decomposed. Either way the forward and
    gradient agree with JAX, fully masked rows included."""
    r = np.random.default_rng(seed)
    q, k, v = (r.standard_normal((2, 3, 4, 5)).astype(np.float32) for _ in range(3))
    mask = np.random.default_rng(mask_seed).random((3, 4, 4)) < 0.6
    mask[1, 2, :] &= not kill_row  # a fully masked row: JAX averages, -inf would give NaN
    c = {"min": float(np.finfo(np.float32).min), "0.7min": 0.7 * float(np.finfo(np.float32).min),
         "-1e9": -1e9}[fill]

    def attend(q, k, v, m):
        s = jnp.einsum("bhld,bhsd->bhls", q, k) / np.sqrt(5.0)
        s = jnp.where(m, s, np.float32(c))
        return jnp.einsum("bhls,bhsd->bhld", jax.nn.softmax(s), v)

    if as_input:
        f, args = attend, (q, k, v, mask)
    else:
        f, args = (lambda q, k, v: attend(q, k, v, mask)), (q, k, v)
    fused = fill != "-1e9"
    _check(f, args, (0, 1, 2), "attention" if fused else "softmax")
