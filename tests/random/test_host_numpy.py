"""numpy's stage 1 of the ``random="inputs"`` host part (frontend/random/host_numpy.py)
computes every rule with the bits ``jax.jit`` gives: threefry, keys made, split, folded
and moved around, random bits of every width, lax's shifts past the width."""
from __future__ import annotations

import jax
import jax.extend.random as jex_random
import jax.numpy as jnp
import numpy as np
from hypothesis import example, given, settings, strategies as st
from jax import lax

from rlxjax import _jax_compat as jc
from rlxjax.frontend.random import host_numpy

from helpers import examples

U32 = st.integers(0, 2**32 - 1)


def _numpy_eval(f, *args):
    """``f``'s jaxpr evaluated by host_numpy (keys as their data), results as JAX's."""
    closed = jax.make_jaxpr(f)(*args)
    jaxpr = closed.jaxpr
    assert host_numpy.supported(jaxpr.eqns), [e.primitive.name for e in jaxpr.eqns]
    env = {v: host_numpy.to_numpy(c) for v, c in zip(jaxpr.constvars, closed.consts)}
    env.update((v, host_numpy.to_numpy(x)) for v, x in zip(jaxpr.invars, args))
    host_numpy.run(env, jaxpr.eqns)
    return [np.asarray(v.val) if isinstance(v, jc.Literal) else env[v] for v in jaxpr.outvars]


def _assert_equal_to_jit(f, *args):
    want = jax.jit(f)(*args)
    want = want if isinstance(want, (list, tuple)) else [want]
    got = _numpy_eval(f, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, host_numpy.to_numpy(w))


@settings(max_examples=10, deadline=None)
@given(k1=U32, k2=U32, xs=st.lists(U32, min_size=1, max_size=9))
def test_threefry2x32_equals_jax(k1, k2, xs):
    count = np.array(xs, np.uint32)
    want = jex_random.threefry_2x32(np.array([k1, k2], np.uint32), count)
    n = len(xs) + len(xs) % 2
    padded = np.concatenate([count, np.zeros(n - len(xs), np.uint32)])
    a, b = host_numpy.threefry2x32(k1, k2, padded[: n // 2], padded[n // 2:])
    np.testing.assert_array_equal(np.concatenate([a, b])[: len(xs)], np.asarray(want))


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(-2**31, 2**31 - 1), data=st.integers(0, 2**32 - 1),
       shape=st.sampled_from([(), (1,), (3,), (2, 5), (4, 1, 3)]),
       dtype=st.sampled_from([jnp.uint8, jnp.uint16, jnp.uint32]))
def test_keys_and_bits_equal_jit(seed, data, shape, dtype):
    """Seeded, split (scalar and array shapes), folded (scalar and batched data) keys and
    the bits drawn from single keys and arrays of keys."""
    def f(seed, data):
        key = jax.random.key(seed)
        ks = jax.random.split(key, (2, 3))
        folded = jax.random.fold_in(key, data)
        many = jax.vmap(jax.random.fold_in, (None, 0))(folded, jnp.arange(4, dtype=jnp.uint32))
        return (jax.random.key_data(ks), jax.random.key_data(many),
                jax.random.bits(folded, shape, dtype), jax.vmap(
                    lambda k: jax.random.bits(k, shape, dtype))(ks.reshape(6)),
                jax.random.key_data(jax.random.wrap_key_data(jax.random.key_data(key) + 1)))

    _assert_equal_to_jit(f, np.int32(seed), np.uint32(data))


def test_legacy_uint32_keys_and_raw_threefry_equal_jit():
    def f(seed):
        key = jax.random.PRNGKey(seed)
        a, b = jax.random.split(key)
        return (a, jax.random.fold_in(b, 7), jax.random.bits(b, (3, 2)),
                *jex_random.threefry2x32_p.bind(a[0], a[1], b, b + 1))

    _assert_equal_to_jit(f, np.int32(-5))


def test_keys_moved_around_equal_jit():
    """Slicing, reshaping, transposing, concatenating, broadcasting, selecting and flipping
    arrays of keys moves their data as JAX does."""
    def f(seed, i, p):
        ks = jax.random.split(jax.random.key(seed), (3, 4))
        # a strided slice as lax.slice: JAX 0.8 makes ks[1:, ::2] a gather, which numpy's
        # host part has no rule for (that program takes the XLA path instead)
        moved = [ks.T, lax.slice(ks, (1, 0), (3, 4), (1, 2)), ks.reshape(12),
                 jnp.concatenate([ks, ks[:1]]),
                 jnp.broadcast_to(ks[0], (2, 4)), lax.dynamic_slice(ks, (i, 1), (2, 2)),
                 lax.select(p, ks[0], ks[1]), lax.rev(ks, (0,)), jnp.squeeze(ks[:1], 0)]
        bits = lambda k: jax.random.bits(k, (2,))  # noqa: E731
        return [jax.random.key_data(m) for m in moved] + [
            jnp.vectorize(bits, signature="()->(n)")(m) for m in moved]

    for i in (0, 2, 5):  # 5: clamped as lax.dynamic_slice clamps
        _assert_equal_to_jit(f, np.int32(3), np.int32(i), np.array([True, False, True, True]))


@settings(max_examples=examples(10), deadline=None)
@example(dtype=np.int32, xs=[0, 5, 2**31, 7], shifts=[0, 1, 33, 3])  # INT_MIN, / 0, >> 33
@given(dtype=st.sampled_from([np.int8, np.uint8, np.int32, np.uint32]),
       xs=st.lists(st.integers(-2**31, 2**32 - 1), min_size=4, max_size=4),
       shifts=st.lists(st.integers(0, 40), min_size=4, max_size=4).map(
           lambda s: [0] + s[1:]))  # (a zero divisor: XLA's x / 0, x % 0)
def test_integer_arithmetic_equals_jit(dtype, xs, shifts):
    """lax's shifts (an amount at or past the width gives 0, or the sign), wrapping
    arithmetic, division and remainder (by 0, INT_MIN by -1), comparisons, conversions,
    iota, clamp and select, as XLA computes them."""
    info = np.iinfo(dtype)
    x = np.array([v % (int(info.max) - int(info.min) + 1) + int(info.min) for v in xs],
                 dtype)
    s = np.array(shifts, dtype)

    def f(x, s):
        big = lax.iota(dtype, 4) * x + x - (-x)
        return (lax.shift_left(x, s), lax.shift_right_logical(x, s),
                lax.shift_right_arithmetic(x, s), big, x ^ s, x | s, x & ~s,
                lax.max(x, s), lax.min(x, s), x < s, x == s, lax.convert_element_type(
                    x, np.uint32), lax.convert_element_type(x, np.int8),
                lax.convert_element_type(x, bool), lax.clamp(dtype(1), x, dtype(9)),
                lax.select(x > s, x, s), abs(x) if info.min < 0 else x,
                lax.div(x, s), lax.rem(x, s), lax.div(x, dtype(-1) if info.min < 0 else s),
                lax.rem(x, dtype(-1) if info.min < 0 else s))

    _assert_equal_to_jit(f, x, s)
