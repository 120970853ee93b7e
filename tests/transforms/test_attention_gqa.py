"""Fused attention where the peer converter (stablehlo-coreml) fuses it: grouped-query
attention as Gemma / Llama / Mistral write it (K/V heads shared by groups of query heads),
multi-query attention, a decode step (query length 1), a boolean or an additive mask that
is an input, a stack of two layers, fully masked rows (finite, as JAX gives). Each form is
one fused ``attention`` (SDPA on iOS18, written out before), its gradient the hand-written
``attention_grad``; forward and gradient are compared with JAX's (transforms/
attention_layouts.py, attention_masks.py)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import rlxjax
from helpers import assert_tree_close, examples, TEST_BACKEND

# fp32 against XLA's fp32: another association of the same sums, values of order 1.
TOL = dict(rtol=1e-5, atol=2e-6)

K_MASK = -2.3819763e38  # flax's gemma example (examples/gemma/modules.py)


def _gemma_flax(q, k, v, mask):
    """flax examples/gemma/modules.py Attention: q [B,T,N,H], k/v [B,S,K,H], mask [B,T,S]."""
    b, t, n, h = q.shape
    kh = k.shape[2]
    q = q * h ** -0.5  # query_pre_attn_scalar
    q = q.reshape((b, t, kh, n // kh, h))
    logits = jnp.einsum("BTKGH,BSKH->BTKGS", q, k)
    logits = logits.reshape((b, t, n, k.shape[1]))
    if mask is not None:
        logits = jnp.where(jnp.expand_dims(mask, -2), logits, K_MASK)
    probs = jax.nn.softmax(logits, axis=-1).reshape((b, t, kh, n // kh, k.shape[1]))
    encoded = jnp.einsum("BTKGS,BSKH->BTKGH", probs, v)
    return encoded.reshape((b, t, n, h))


def _gemma_flax_mqa(q, k, v, mask):
    """flax's gemma example as it now reads: one einsum over N heads, a single K/V head
    (Gemma 2B) broadcast by jnp.einsum."""
    logits = jnp.einsum("BTNH,BSNH->BTNS", q * q.shape[-1] ** -0.5, k)
    if mask is not None:
        logits = jnp.where((jnp.expand_dims(mask, -2)), logits, K_MASK)
    probs = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("BTNS,BSNH->BTNH", probs, v)


def _gemma_keras(q, k, v, mask):
    """keras-hub GemmaAttention._compute_attention's einsum path, with its additive form of
    a mask (Keras' Softmax layer masks with where(-1e9) and is not fused: see
    test_keras_softmax_mask_stays_correct)."""
    b, t, n, h = q.shape
    kh = k.shape[2]
    q = q * (1 / np.sqrt(h)).astype(q.dtype)
    q = q.reshape((b, t, kh, n // kh, h))
    logits = jnp.einsum("btkgh,bskh->bkgts", q, k)
    if mask is not None:
        logits = logits + mask[:, None, None, :, :]
    p = jax.nn.softmax(logits, axis=-1)
    return jnp.einsum("bkgts,bskh->btkgh", p, v).reshape((b, t, n, h))


def _jax_nn(q, k, v, mask):
    """jax.nn.dot_product_attention (what keras' ops.dot_product_attention runs on CPU for
    keras-hub Llama / Mistral): K < N heads is its grouped form."""
    if mask is None:
        return jax.nn.dot_product_attention(q, k, v)
    if mask.dtype == jnp.bool_:
        return jax.nn.dot_product_attention(q, k, v, mask=mask[:, None])
    return jax.nn.dot_product_attention(q, k, v, bias=mask[:, None])


def _llama_keras(q, k, v, mask):
    """keras-hub LlamaAttention / MistralAttention on JAX: K/V repeated to the query heads
    (``ops.repeat(key, num_key_value_groups, axis=2)``), then keras' ops.dot_product_attention
    (jax.nn.dot_product_attention) with the bool mask and scale 1/sqrt(head_dim)."""
    groups = q.shape[2] // k.shape[2]
    k, v = jnp.repeat(k, groups, axis=2), jnp.repeat(v, groups, axis=2)
    m = None if mask is None else mask[:, None]
    if mask is not None and mask.dtype != jnp.bool_:
        return jax.nn.dot_product_attention(q, k, v, bias=m, scale=1 / np.sqrt(q.shape[-1]))
    return jax.nn.dot_product_attention(q, k, v, mask=m, scale=1 / np.sqrt(q.shape[-1]))


def _mqa(q, k, v, mask):
    """multi-query attention: one K/V head, written without a head dim."""
    s = jnp.einsum("btnh,bsh->bnts", q, k[:, :, 0]) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = (jnp.where(mask[:, None], s, jnp.finfo(s.dtype).min) if mask.dtype == jnp.bool_
             else s + mask[:, None])
    return jnp.einsum("bnts,bsh->btnh", jax.nn.softmax(s), v[:, :, 0])


FORMS = {"gemma_flax": _gemma_flax, "gemma_flax_mqa": _gemma_flax_mqa,
         "gemma_keras": _gemma_keras, "jax_nn": _jax_nn, "llama_keras": _llama_keras,
         "mqa": _mqa}
#: which mask kinds each form takes as an input (gemma_flax: bool; gemma_keras: additive)
MASKS = {"gemma_flax": ("none", "bool"), "gemma_flax_mqa": ("none", "bool"),
         "gemma_keras": ("none", "add"), "jax_nn": ("none", "bool", "add"),
         "llama_keras": ("none", "bool"), "mqa": ("none", "bool", "add")}
ONE_KV_HEAD = ("mqa", "gemma_flax_mqa")


def _compile(fun, args, target, grad=False, argnums=0):
    f = (rlxjax.coreml_grad(fun, argnums=argnums, target=target, backend=TEST_BACKEND) if grad
         else rlxjax.coreml_jit(fun, target=target, backend=TEST_BACKEND))
    c = f.lower(*args).compile()
    c.validate()
    return c


def _check(fun, args, target, argnums, layers=1):
    c = _compile(fun, args, target)
    hist = c.graph.op_histogram()
    assert hist.get("attention") == layers and "softmax" not in hist, hist
    mil = [op.type for op in c.mil_ops()]
    assert (mil.count("scaled_dot_product_attention") == layers) == (target == "iOS18"), mil
    want = jax.jit(fun)(*args)
    assert np.isfinite(np.asarray(want)).all()
    assert_tree_close(c(*args), want, **TOL)

    def loss(*a):
        y = fun(*a)
        return jnp.sum(y * jnp.cos(jnp.arange(y.size).reshape(y.shape)))

    g = _compile(loss, args, target, grad=True, argnums=argnums)
    gh = g.graph.op_histogram()
    assert gh.get("attention_grad") == layers and "softmax" not in gh, gh
    assert_tree_close(g(*args), jax.jit(jax.grad(loss, argnums=argnums))(*args), **TOL)


def _inputs(seed, b, t, s, kh, g, h, mask_kind, kill_row):
    r = np.random.default_rng(seed)
    q = r.standard_normal((b, t, kh * g, h)).astype(np.float32)
    k, v = (r.standard_normal((b, s, kh, h)).astype(np.float32) for _ in range(2))
    keep = r.random((b, t, s)) < 0.7
    keep[..., 0] |= not kill_row  # a True in every row unless a row is killed below
    if kill_row:
        keep[0, -1, :] = False  # a fully masked row: JAX's where gives the mean of v
    if mask_kind == "bool":
        return q, k, v, keep
    if mask_kind == "add":
        return q, k, v, (r.standard_normal((b, t, s)) * 2).astype(np.float32)
    return q, k, v, None


_SHAPES = dict(form=st.sampled_from(sorted(FORMS)), b=st.integers(1, 2), t=st.integers(1, 4),
               s=st.integers(1, 5), kh=st.integers(1, 3), g=st.integers(1, 3),
               h=st.sampled_from([2, 4, 8]), mask_i=st.integers(0, 2), kill_row=st.booleans(),
               target=st.sampled_from(["iOS17", "iOS18"]), seed=st.integers(0, 50))


def _grouped_case(form, b, t, s, kh, g, h, mask_i, kill_row, target, seed):
    kinds = MASKS[form]
    mask_kind = kinds[mask_i % len(kinds)]
    if form in ONE_KV_HEAD:
        kh = 1
    q, k, v, mask = _inputs(seed, b, t, s, kh, g, h, mask_kind, kill_row)
    f = FORMS[form]
    if mask is None:
        _check(lambda q, k, v: f(q, k, v, None), (q, k, v), target, (0, 1, 2))
    elif mask.dtype == np.bool_ and seed % 2:  # a constant mask
        _check(lambda q, k, v: f(q, k, v, mask), (q, k, v), target, (0, 1, 2))
    elif mask.dtype == np.bool_:  # an input
        _check(f, (q, k, v, mask), target, (0, 1, 2))
    else:
        _check(f, (q, k, v, mask), target, (0, 1, 2, 3))


@settings(max_examples=examples(3), deadline=None)
@given(**_SHAPES)
@example(form="gemma_flax", b=2, t=3, s=4, kh=2, g=3, h=4, mask_i=1, kill_row=True,
         target="iOS18", seed=0)  # GQA, input bool mask, a fully masked row
@example(form="jax_nn", b=1, t=1, s=5, kh=2, g=2, h=8, mask_i=1, kill_row=False,
         target="iOS18", seed=2)  # a decode step (query length 1), GQA, input bool mask
@example(form="mqa", b=2, t=3, s=4, kh=1, g=4, h=4, mask_i=2, kill_row=False,
         target="iOS17", seed=2)  # MQA, additive input mask, written out (before iOS18)
def test_grouped_attention_is_fused(form, b, t, s, kh, g, h, mask_i, kill_row, target, seed):
    _grouped_case(form, b, t, s, kh, g, h, mask_i, kill_row, target, seed)


@pytest.mark.slow  # (the same over more examples: ~2 s each)
@settings(max_examples=30, deadline=None)
@given(**_SHAPES)
def test_grouped_attention_is_fused_at_large(form, b, t, s, kh, g, h, mask_i, kill_row,
                                             target, seed):
    _grouped_case(form, b, t, s, kh, g, h, mask_i, kill_row, target, seed)


def test_two_layers_with_an_input_mask():
    """A stack of two GQA layers (the second's queries are the first's output) with one
    bool mask input, a fully masked row included: two fused ops, gradients equal."""
    q, k, v, mask = _inputs(3, 2, 3, 3, 2, 2, 4, "bool", True)
    k2, v2 = q[:, :, :2] * 0.5, q[:, :, 2:] - 1.0

    def two(q, k, v, m):
        y = _gemma_flax(q, k, v, m)
        return _jax_nn(jnp.tanh(y), k2 + 0 * k, v2, m)

    _check(two, (q, k, v, mask), "iOS18", (0, 1, 2), layers=2)


def test_fully_masked_rows_as_jax_gives_them():
    """What JAX gives for a fully masked row: a finite fill (jax.nn's -0.7·max, flax's
    finfo.min / K_MASK) makes the row uniform, so the output is the mean of v over S,
    and where(-inf) gives NaN; the fused op gives the same, the NaN included."""
    q, k, v, mask = _inputs(4, 1, 3, 4, 2, 2, 4, "bool", True)
    mean = np.mean(v, axis=1)  # [B, K, H]
    got = _compile(lambda q, k, v: _jax_nn(q, k, v, mask), (q, k, v), "iOS18")(q, k, v)
    want = np.asarray(_jax_nn(q, k, v, mask))
    # the premise (JAX's row is the mean of v), to float32 rounding of a softmax-weighted
    # sum of terms of either sign: bounded by the terms' size, not the result's (an entry
    # of -0.0017 from terms of ~0.5 differed by 1.5e-8 between XLA builds)
    np.testing.assert_allclose(want[0, -1], np.repeat(mean[0], 2, axis=0), rtol=1e-6,
                               atol=8 * np.finfo(np.float32).eps * np.abs(v).max())
    assert_tree_close(got, want, **TOL)
    qh, kh_, vh = (np.swapaxes(x, 1, 2) for x in (q, np.repeat(k, 2, 2), np.repeat(v, 2, 2)))

    def inf_fill(q, k, v, m):
        s = jnp.where(m[:, None], jnp.einsum("bhld,bhsd->bhls", q, k) / 2.0, -jnp.inf)
        return jnp.einsum("bhls,bhsd->bhld", jax.nn.softmax(s), v)

    c = _compile(inf_fill, (qh, kh_, vh, mask), "iOS18")
    assert c.graph.op_histogram().get("attention") == 1
    got, want = np.asarray(c(qh, kh_, vh, mask)), np.asarray(inf_fill(qh, kh_, vh, mask))
    assert np.isnan(want[0, :, -1]).all() and np.isnan(got[0, :, -1]).all()
    np.testing.assert_allclose(got[:, :, :-1], want[:, :, :-1], **TOL)


def test_keras_softmax_mask_stays_correct():
    """Keras' Softmax layer masks with where(mask, x, -1e9) then zeroes the masked
    probabilities: -1e9's fp32 neighbours are 64 apart, so exp(fill − score) need not be
    0 and the where is not the op's mask; it stays written out and agrees with JAX."""
    q, k, v, keep = _inputs(5, 1, 3, 4, 2, 2, 4, "bool", False)

    def keras_softmax(q, k, v):
        b, t, n, h = q.shape
        qq = (q / np.float32(np.sqrt(h))).reshape((b, t, 2, n // 2, h))
        logits = jnp.einsum("btkgh,bskh->bkgts", qq, k)
        m = keep[:, None, None, :, :]
        p = jnp.where(m, jax.nn.softmax(jnp.where(m, logits, -1e9), axis=-1), 0.0)
        return jnp.einsum("bkgts,bskh->btkgh", p, v).reshape((b, t, n, h))

    c = _compile(keras_softmax, (q, k, v), "iOS18")
    assert "attention" not in c.graph.op_histogram()
    assert_tree_close(c(q, k, v), jax.jit(keras_softmax)(q, k, v), **TOL)


@pytest.mark.parametrize("target", ["iOS17", "iOS18"])
def test_bool_mask_fold_matches_jax(target):
    """The bool mask's own semantics, folded at compile time (transforms/fold/attention.py)
    when every operand is a constant, agree with JAX, a fully masked row included."""
    q, k, v, mask = _inputs(6, 1, 3, 4, 1, 2, 4, "bool", True)
    f = lambda: _jax_nn(jnp.asarray(q), jnp.asarray(k), jnp.asarray(v), mask)  # noqa: E731
    c = rlxjax.coreml_jit(f, target=target, backend=TEST_BACKEND).lower().compile()
    assert_tree_close(c(), f(), **TOL)


def test_decode_step_over_a_cache():
    """One decode step as a KV-cached loop writes it: the new K/V written into the cache
    at an index that is an input (flax's gemma example's dynamic_update_slice), the mask
    ``arange(S) <= index`` computed from it, one query over the cache (GQA)."""
    b, s, n, kh, h = 2, 8, 4, 2, 8
    r = np.random.default_rng(7)

    def f32(*shape):
        return r.standard_normal(shape).astype(np.float32)

    def decode(q, k_new, v_new, k_cache, v_cache, index):
        k = jax.lax.dynamic_update_slice(k_cache, k_new, (0, index, 0, 0))
        v = jax.lax.dynamic_update_slice(v_cache, v_new, (0, index, 0, 0))
        mask = (jnp.arange(s) <= index)[None, None, None, :]
        return jax.nn.dot_product_attention(q, k, v, mask=mask)

    args = (f32(b, 1, n, h), f32(b, 1, kh, h), f32(b, 1, kh, h), f32(b, s, kh, h),
            f32(b, s, kh, h), np.int32(3))
    _check(decode, args, "iOS18", (0, 1, 2, 3, 4))


def test_core_ai_takes_bool_and_additive_masks_fused():
    """Core AI lowers the op's bool mask (Format.attention_bool_masks; coreai/ops_nn.py):
    a bool input mask and an additive one both fuse (tests/coreai_format runs them)."""
    q, k, v, keep = _inputs(8, 1, 3, 4, 2, 2, 4, "bool", True)
    bias = np.where(keep, 0, -3).astype(np.float32)
    for mask in (keep, bias):
        low = rlxjax.coreml_jit(_jax_nn, format="aimodel").lower(q, k, v, mask)
        hist = low.graph.op_histogram()
        assert "attention" in hist and "softmax" not in hist, hist
