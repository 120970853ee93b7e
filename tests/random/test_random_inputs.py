"""``random="inputs"`` (issue 17, deliverable 2): every live draw is a program input that
the host computes with jax.random from the keys passed.

Oracles: the host-computed inputs equal ``jax.random``'s own draws bit for bit; results
equal JAX's op-by-op results bit for bit where the device part is exact IEEE arithmetic
(select, add, gather, argmax), and ``jax.jit``'s within fp32 rounding (XLA fuses the
whole function, contracting a multiply-add an ulp away; the reference backend does not); gradients equal ``jax.grad``'s and 20 training steps with flax's
Dropout equal JAX + optax's on the same keys (rtol 1e-4). flax linen, nnx and equinox
models with their randomness as written.
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import flax.linen as nn
from flax import nnx

import rlxjax
from helpers import FP32_TOL, TEST_BACKEND, assert_tree_close
from rlxjax.errors import ArgumentError, UnsupportedPrimitiveError

F32 = np.float32
RNG = np.random.default_rng(1717)
KEYS = {"key": jax.random.key, "PRNGKey": jax.random.PRNGKey}


def _x(*shape):
    return RNG.normal(size=shape).astype(F32)


def _jit(f, **kw):
    return rlxjax.coreml_jit(f, backend=TEST_BACKEND, random="inputs", **kw)


def _params(init, *args):
    return jax.tree_util.tree_map(lambda s: (0.5 * RNG.normal(size=s.shape)).astype(s.dtype),
                                  jax.eval_shape(init, *args))


def _host_inputs(compiled, *args):
    return compiled._traced.host.run(jax.tree_util.tree_leaves(args))[0]


# -- exactness -------------------------------------------------------------------------------
def _check_draws_bit_for_bit(key, shape, p):
    x = _x(*shape)

    def f(x, k):
        k1, k2, k3 = jax.random.split(k, 3)
        kept = jnp.where(jax.random.bernoulli(k1, p, x.shape), x, 0.0)
        return kept + jax.random.normal(k2, x.shape) + jax.random.uniform(k3, x.shape)

    compiled = _jit(f).lower(x, key).compile()
    compiled.validate()
    k1, k2, k3 = jax.random.split(key, 3)
    want = [jax.random.bernoulli(k1, p, shape), jax.random.normal(k2, shape),
            jax.random.uniform(k3, shape)]
    for got, w in zip(_host_inputs(compiled, x, key), want):
        np.testing.assert_array_equal(got, np.asarray(w))
    # JAX's numbers op by op (jax.jit of the whole function may fuse an ulp away)
    assert_tree_close(compiled(x, key), f(x, key), rtol=0, atol=0)
    return compiled, f, x


def test_draws_are_jaxs_bit_for_bit():
    compiled, f, x = _check_draws_bit_for_bit(jax.random.key(5), (2, 5), 0.3)
    # a new key: new draws, the same program
    other = jax.random.key(6)
    assert_tree_close(compiled(x, other), f(x, other), rtol=0, atol=0)


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(make_key=st.sampled_from(sorted(KEYS)), seed=st.integers(0, 2**31 - 1),
       shape=st.sampled_from([(3,), (2, 5), (4, 1, 3)]), p=st.sampled_from([0.1, 0.5, 0.9]))
def test_draws_are_jaxs_bit_for_bit_for_any_key(make_key, seed, shape, p):
    _check_draws_bit_for_bit(KEYS[make_key](seed), shape, p)


@pytest.mark.slow
def test_categorical_truncated_normal_permutation_and_a_key_made_inside():
    logits = _x(4, 6)

    def f(logits, k):
        k1, k2, k3 = jax.random.split(k, 3)
        idx = jax.random.categorical(k1, logits)                      # argmax on device
        t = jax.random.truncated_normal(k2, -1.0, 1.0, logits.shape)
        perm = jax.random.permutation(k3, 6)
        fixed = jax.random.uniform(jax.random.key(7), (6,))           # key from a constant
        return idx, logits + t, logits[:, perm], fixed

    compiled = _jit(f).lower(logits, jax.random.key(3)).compile()
    compiled.validate()
    assert_tree_close(compiled(logits, jax.random.key(3)), f(logits, jax.random.key(3)),
                      rtol=0, atol=0)
    rows = json.loads(compiled.spec.description.metadata.userDefined["rlxjax.random"])
    made_by = [r["made_by"] for r in rows]
    assert {"jax.random.categorical", "jax.random.truncated_normal",
            "jax.random.permutation"} <= set(made_by), made_by
    # (the constant-key draw is host-only: a result, no program input)
    assert all(r["source"] and "test_random_inputs.py" in r["source"] for r in rows)
    assert [r["feature"] for r in rows] == [s.mil_name for s in compiled.input_specs[1:]]


def test_host_results_come_back_as_jax_computes_them():
    """A new key and an advanced uint32 counter are results of the host part."""
    def f(x, k, count):
        k2 = jax.random.fold_in(k, count)
        return x * 2.0, jax.random.split(k2)[0], count + 1

    x, k, c = _x(3), jax.random.key(1), np.uint32(4)
    y, k_new, c_new = _jit(f)(x, k, c)
    y_want, k_want, c_want = jax.jit(f)(x, k, c)
    np.testing.assert_array_equal(y, np.asarray(y_want))
    np.testing.assert_array_equal(jax.random.key_data(k_new), jax.random.key_data(k_want))
    assert c_new.dtype == np.uint32 and int(c_new) == 5


def test_a_uint32_cache_index_is_read_and_advanced():
    from jax import lax

    pe = _x(1, 10, 4)

    def step(x, cache):
        i = cache["cache_index"]
        zero = np.uint32(0)
        y = x + lax.dynamic_slice(pe, (zero, i, zero), (1, 1, 4))
        return y, {"cache_index": i + 1}

    x, cache = _x(1, 1, 4), {"cache_index": np.uint32(3)}
    compiled = _jit(step).lower(x, cache).compile()
    # (dynamic_slice reads the index normalised, computed on the host from the argument)
    assert [s.name for s in compiled.input_specs] == ["x", "host.cache.cache_index"]
    y, new = compiled(x, cache)
    np.testing.assert_array_equal(y, np.asarray(step(x, cache)[0]))
    assert new["cache_index"].dtype == np.uint32 and int(new["cache_index"]) == 4


# -- flax, nnx, equinox models as written ---------------------------------------------------
class DropoutMLP(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.relu(nn.Dense(16)(x))
        x = nn.Dropout(0.3, deterministic=not train)(x)
        return nn.Dense(3)(x)


def _mlp():
    model = DropoutMLP()
    x = _x(8, 8)
    return model, _params(lambda k, x: model.init(k, x, False), jax.random.key(0), x), x


def test_linen_dropout_value_and_gradient():
    model, params, x = _mlp()
    y = _x(8, 3)

    def loss(params, x, y, rng):
        out = model.apply(params, x, True, rngs={"dropout": rng})
        return jnp.mean((out - y) ** 2)

    key = jax.random.key(5)
    got = rlxjax.coreml_value_and_grad(loss, backend=TEST_BACKEND, random="inputs")(
        params, x, y, key)
    assert_tree_close(got, jax.jit(jax.value_and_grad(loss))(params, x, y, key), **FP32_TOL)


class NnxDropout(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(8, 16, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.l2 = nnx.Linear(16, 3, rngs=rngs)

    def __call__(self, x):
        return self.l2(self.drop(nnx.relu(self.l1(x))))


def test_nnx_dropout_in_train_mode_advances_its_rng_state():
    model = NnxDropout(nnx.Rngs(0))
    model.train()
    graphdef, state = nnx.split(model)

    def f(state, x):
        m = nnx.merge(graphdef, state)
        return m(x), nnx.state(m)

    x = _x(4, 8)
    ours, theirs = _jit(f), jax.jit(f)
    got_y, got_state = ours(state, x)
    want_y, want_state = theirs(state, x)
    assert_tree_close(got_y, want_y, **FP32_TOL)
    count = lambda s: int(s["drop"]["rngs"]["count"].value)  # noqa: E731
    assert count(got_state) == count(want_state) == count(state) + 1
    # the second step, from the returned state, draws the second mask as JAX does
    assert_tree_close(ours(got_state, x)[0], theirs(want_state, x)[0], **FP32_TOL)
    assert len(ours._cache) == 1


def test_equinox_dropout_with_a_key():
    eqx = pytest.importorskip("equinox")
    drop = eqx.nn.Dropout(0.4)
    x = _x(6, 5)
    f = lambda x, k: drop(x, key=k) + 1.0  # noqa: E731
    assert_tree_close(_jit(f)(x, jax.random.key(2)), jax.jit(f)(x, jax.random.key(2)),
                      **FP32_TOL)


@pytest.mark.slow
def test_vae_reparameterisation():
    def encode_decode(params, x, k):
        mean, logvar = x @ params["wm"], x @ params["wv"]
        z = mean + jnp.exp(0.5 * logvar) * jax.random.normal(k, mean.shape)
        return jnp.tanh(z @ params["wd"])

    params = {"wm": _x(6, 3), "wv": 0.1 * _x(6, 3), "wd": _x(3, 6)}
    x = _x(5, 6)
    assert_tree_close(_jit(encode_decode)(params, x, jax.random.key(9)),
                      jax.jit(encode_decode)(params, x, jax.random.key(9)), **FP32_TOL)


# -- training --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["io", pytest.param("mlstate", marks=pytest.mark.slow)])
def test_train_step_with_dropout_equals_jax_and_optax_on_the_same_keys(mode):
    optax = pytest.importorskip("optax")
    model, params, x = _mlp()
    y = _x(8, 3)

    def loss(params, x, y, rng):
        out = model.apply(params, x, True, rngs={"dropout": rng})
        return jnp.mean((out - y) ** 2)

    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, state=mode, backend=TEST_BACKEND,
                                    random="inputs")
    state = step.init(params)

    @jax.jit
    def jax_step(p, s, key):
        v, g = jax.value_and_grad(loss)(p, x, y, key)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, v

    p, s = params, opt.init(params)
    keys = jax.random.split(jax.random.key(11), 20)
    got, want = [], []
    for key in keys:
        state, v = step(state, x, y, key)
        p, s, w = jax_step(p, s, key)
        got.append(float(v))
        want.append(float(w))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert_tree_close(jax.tree_util.tree_map(np.asarray, step.params(state)), p,
                      rtol=1e-4, atol=1e-5)
    meta = json.loads(step.last_compiled.spec.description.metadata.userDefined["rlxjax.train"])
    assert [r["role"] for r in meta["inputs"]][-1] == "random"


# -- what cannot be split ----------------------------------------------------------------------
def test_refusals_name_the_operation():
    x = _x(3)
    with pytest.raises(UnsupportedPrimitiveError, match=r"random='inputs'.*computed from "
                       r"device values"):
        _jit(lambda x: jax.random.normal(jax.random.key(x.sum().astype(jnp.int32)), (3,))
             ).lower(x)

    def branch(x, k):  # (a scan splits in two: tests/random/test_random_scan.py; a cond not)
        return jax.lax.cond(x.sum() > 0, lambda: x + jax.random.normal(k, x.shape),
                            lambda: x - 1.0)

    with pytest.raises(UnsupportedPrimitiveError, match=r"'cond' at .*test_random_inputs"):
        _jit(branch).lower(x, jax.random.key(0))
    with pytest.raises(ArgumentError, match="random="):
        rlxjax.coreml_jit(lambda x: x, random="host")
    # (a loss computed only from keys: tests/random/test_random_state.py; host aux results are fine)
