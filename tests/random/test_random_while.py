"""A while_loop that draws and computes on device values (random/loops.py): with
random='inputs' a host scan over its bound and a device while, equal to jax.jit bit for bit;
with random='device' the draws are Core ML's; a bound found only by assuming unknown
integers are >= 0 (an int32 or float mask summed) holds on the calls it is checked on and
refuses the others; loops without a bound, a returned key or seed state, and a condition
reading a host carry are refused with the reason."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlxjax


def sampler(key, logits, mask):
    """A sampling loop as keras-hub writes it: a counter from 0 bounded by a value computed
    from a padding mask (maximum_iterations), a key split each step, categorical draws."""
    n = jnp.sum(mask.astype(jnp.int32))

    def cond(c):
        i, k, toks, s = c
        return (i < logits.shape[0] - n) & (s < 1e6)

    def body(c):
        i, k, toks, s = c
        k, sub = jax.random.split(k)
        t = jax.random.categorical(sub, logits[i] + toks.sum() * 0.01)
        return i + 1, k, toks.at[i].set(t), s + jnp.sum(logits[i])

    i, _, toks, s = jax.lax.while_loop(cond, body, (0, key, jnp.zeros(logits.shape[0], jnp.int32),
                                                    0.0))
    return i, toks, s


ARGS = (jax.random.key(3), np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32),
        np.array([True, False, True]))


def test_sampling_while_draws_equal_jax():
    got = rlxjax.coreml_jit(sampler, random="inputs")(*ARGS)
    want = jax.jit(sampler)(*ARGS)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_fori_loop_with_traced_bounds_and_a_uint32_seed_state():
    def f(seed, x, lo):
        def body(i, c):
            s, x = c  # a keras-style seed state: [seed, counter], advanced each draw
            x = x + jax.random.bernoulli(s, 0.3, x.shape)  # (a raw uint32 key)
            return s + jnp.array([0, 1], jnp.uint32), x * 0.5
        _, x = jax.lax.fori_loop(lo, 4, body, (seed, x))
        return x

    # lo: an int8 argument, so the loop's bound is 4 - (-128) steps
    args = (np.array([5, 0], np.uint32), np.ones(3, np.float32), np.int8(1))
    np.testing.assert_array_equal(rlxjax.coreml_jit(f, random="inputs")(*args),
                                  jax.jit(f)(*args))


def test_device_mode_draws_on_the_device():
    fn = rlxjax.coreml_jit(sampler, random="device")
    i, toks, _ = fn(*ARGS)
    assert int(i) == 4 and toks.shape == (6,) and np.all((toks >= 0) & (toks < 5))
    assert np.all(toks[4:] == 0)


def test_loop_that_never_runs():
    def f(key, x):
        def body(c):
            i, k, x = c
            k, sub = jax.random.split(k)
            return i + 1, k, x + jax.random.uniform(sub, x.shape)
        return jax.lax.while_loop(lambda c: c[0] < 0, body, (0, key, x))[2]

    args = (jax.random.key(0), np.ones(2, np.float32))
    np.testing.assert_array_equal(rlxjax.coreml_jit(f, random="inputs")(*args), np.ones(2))


def test_unbounded_loop_is_refused():
    def f(key, x):
        def body(c):
            k, x = c
            k, sub = jax.random.split(k)
            return k, x + jax.random.uniform(sub, x.shape)
        return jax.lax.while_loop(lambda c: jnp.sum(c[1]) < 10.0, body, (key, x))[1]

    for mode in ("inputs", "device"):
        with pytest.raises(rlxjax.UnsupportedPrimitiveError,
                           match=f"random='{mode}'.*test_random_while.*cannot bound"):
            rlxjax.coreml_jit(f, random=mode)(jax.random.key(0), np.ones(2, np.float32))


def test_returned_key_is_refused():
    def f(key, x):
        def body(c):
            i, k, x = c
            k, sub = jax.random.split(k)
            return i + 1, k, x + jax.random.uniform(sub, x.shape)
        i, k, x = jax.lax.while_loop(lambda c: (c[0] < 3) & (c[2][0] < 2.5), body,
                                     (0, key, x))
        return x, k

    with pytest.raises(rlxjax.UnsupportedPrimitiveError, match="returns the PRNG key"):
        rlxjax.coreml_jit(f, random="inputs")(jax.random.key(0), np.ones(2, np.float32))


def temperature_sample(params, prompt, rng, eos=1, temperature=0.8, topk=3):
    """A decode loop as flax's examples/lm1b temperature_sampler writes it: state
    (i from -1, sequences, current token, ended flags, rng), stop at the length or when
    every row ended, the rng split each step, top-k categorical draws."""
    batch, length = prompt.shape

    def cond(state):
        i, _, _, ended, _ = state
        return (i < length - 1) & ~jnp.all(ended)

    def body(state):
        i, seqs, cur, ended, rng = state
        rng1, rng2 = jax.random.split(rng)
        logits = jnp.tanh(params[cur[:, 0]] @ params.T)  # a tiny "model"
        top, idx = jax.lax.top_k(logits, topk)
        pick = jax.random.categorical(rng1, top / temperature)[:, None]
        nxt = jnp.take_along_axis(idx, pick, axis=-1)[:, 0]
        given = jax.lax.dynamic_slice_in_dim(prompt, i + 1, 1, axis=1)[:, 0]
        nxt = jnp.where(given != 0, given, nxt) * ~ended[:, 0]
        seqs = jax.lax.dynamic_update_slice(seqs, nxt[:, None], (0, i + 1))
        ended = ended | (nxt == eos)[:, None]
        return i + 1, seqs, nxt[:, None], ended, rng2

    state = (jnp.array(-1), prompt, jnp.zeros((batch, 1), jnp.int32),
             jnp.zeros((batch, 1), bool), rng)
    return jax.lax.while_loop(cond, body, state)[1]


@pytest.mark.slow
def test_flax_style_decode_loop_equals_jax():
    params = np.random.default_rng(1).normal(size=(7, 4)).astype(np.float32)
    prompt = np.zeros((2, 9), np.int32)
    prompt[:, :2] = [[3, 4], [5, 6]]
    args = (params, prompt, jax.random.key(5))
    np.testing.assert_array_equal(rlxjax.coreml_jit(temperature_sample, random="inputs")(*args),
                                  jax.jit(temperature_sample)(*args))


# -- a bound found assuming unknown integers are >= 0, checked on each call (guards.py) --
INT_SAMPLER = rlxjax.coreml_jit(sampler, random="inputs")


@settings(max_examples=6, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=3, max_size=3), st.integers(0, 2 ** 31 - 1))
def test_int32_mask_bound_assumed_and_draws_equal_jax(mask, seed):
    """An int32 mask (as tokenizers give it) has no known range: the loop's bound is
    6 - 0 steps assuming its sum is >= 0, and that is checked on the call."""
    args = (jax.random.key(seed), ARGS[1], np.array(mask, np.int32))
    for g, w in zip(INT_SAMPLER(*args), jax.jit(sampler)(*args)):
        np.testing.assert_array_equal(g, w)


def test_int32_mask_outside_the_assumption_is_refused_on_the_call():
    # a negative mask sums to -1: the loop may run 6 - (-1) = 7 steps, one more than the
    # program draws for (jax.jit would run 7)
    args = (jax.random.key(0), ARGS[1], np.array([-1, 0, 0], np.int32))
    assert int(jax.jit(sampler)(*args)[0]) == 7
    for mode in ("inputs", "device"):
        with pytest.raises(rlxjax.ArgumentError, match="may run 7 steps.*at most 6"):
            rlxjax.coreml_jit(sampler, random=mode)(*args)


def test_float_mask_bound_assumed():
    args = (jax.random.key(1), ARGS[1], np.array([1.0, 1.0, 0.0], np.float32))
    for g, w in zip(rlxjax.coreml_jit(sampler, random="inputs")(*args), jax.jit(sampler)(*args)):
        np.testing.assert_array_equal(g, w)
