"""Fused attention (rlxjax/ir/attention.py): ``softmax(q·kᵀ·scale + mask)·v`` written by hand
or by flax is recognised (transforms/recognize_attention.py), lowered to MIL
scaled_dot_product_attention on iOS18 (decomposed before), and its forward and gradient
agree with JAX."""
from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlxjax
from helpers import TEST_BACKEND, assert_tree_close

# fp32 against JAX's fp32: another association of the same sums (MIL's matmul and softmax
# vs XLA's), on values of order 1-10.
TOL = dict(rtol=2e-5, atol=2e-6)


def _compile(fun, args, target, grad=False, argnums=0):
    f = (rlxjax.coreml_grad(fun, argnums=argnums, target=target, backend=TEST_BACKEND) if grad
         else rlxjax.coreml_jit(fun, target=target, backend=TEST_BACKEND))
    c = f.lower(*args).compile()
    c.validate()
    return c


def _check(fun, args, target, argnums, expect_mask_grad=False):
    c = _compile(fun, args, target)
    hist = c.graph.op_histogram()
    assert hist.get("attention") == 1, hist
    mil = [op.type for op in c.mil_ops()]
    assert ("scaled_dot_product_attention" in mil) == (target == "iOS18"), mil
    assert_tree_close(c(*args), jax.jit(fun)(*args), **TOL)

    def loss(*a):
        return jnp.sum(fun(*a) * jnp.cos(jnp.arange(fun(*a).size).reshape(fun(*a).shape)))

    g = _compile(loss, args, target, grad=True, argnums=argnums)
    assert "attention_grad" in g.graph.op_histogram()
    assert_tree_close(g(*args), jax.jit(jax.grad(loss, argnums=argnums))(*args), **TOL)


def _attend(q, k, v, mask, scale, post_scale):
    """Hand-written attention over [batch, heads, L, E] layouts, scale on q or the scores."""
    if post_scale:
        s = jnp.einsum("bhld,bhsd->bhls", q, k) * scale
    else:
        s = jnp.einsum("bhld,bhsd->bhls", q * scale, k)
    if mask is not None:
        s = s + mask
    return jnp.einsum("bhls,bhsd->bhld", jax.nn.softmax(s, axis=-1), v)


@pytest.mark.slow  # (~12 s; flax attention, causal and iOS18 forms run by default)
@settings(max_examples=4, deadline=None)
@given(dims=st.tuples(*[st.integers(1, 4)] * 6), masked=st.booleans(),
       scale_kind=st.sampled_from(["inv_sqrt", "other"]), post=st.booleans(),
       target=st.sampled_from(["iOS17", "iOS18"]), seed=st.integers(0, 50))
def test_hand_written_attention_matches_jax(dims, masked, scale_kind, post, target, seed):
    b, h, L, S, E, EV = dims
    r = np.random.default_rng(seed)
    q, k = (r.standard_normal((b, h, n, E)).astype(np.float32) for n in (L, S))
    v = r.standard_normal((b, h, S, EV)).astype(np.float32)
    mask = r.standard_normal((L, S)).astype(np.float32) * 3
    scale = 1 / math.sqrt(E) if scale_kind == "inv_sqrt" else 0.37
    if masked:
        f = lambda q, k, v, m: _attend(q, k, v, m, scale, post)  # noqa: E731
        _check(f, (q, k, v, mask), target, (0, 1, 2, 3))
    else:
        f = lambda q, k, v: _attend(q, k, v, None, scale, post)  # noqa: E731
        _check(f, (q, k, v), target, (0, 1, 2))


@pytest.mark.parametrize("target", [pytest.param("iOS17", marks=pytest.mark.slow), "iOS18"])
def test_flax_multi_head_attention(target):
    x = np.random.default_rng(0).standard_normal((2, 5, 16)).astype(np.float32)
    m = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=16)
    p = m.init(jax.random.key(0), x)
    _check(lambda p, x: m.apply(p, x), (p, x), target, 0)


def test_flax_causal_mask_is_fused():
    """flax masks through ``where(mask, scores, finfo.min)``: a constant mask with no fully
    masked row is fused as the additive 0/-inf mask (transforms/attention_masks.py)."""
    x = np.random.default_rng(2).standard_normal((1, 4, 8)).astype(np.float32)
    m = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8)
    mask = nn.make_causal_mask(np.ones((1, 4)))
    p = m.init(jax.random.key(0), x, mask=mask)
    _check(lambda p, x: m.apply(p, x, mask=mask), (p, x), "iOS18", (0, 1))
