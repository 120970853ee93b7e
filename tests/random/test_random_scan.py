"""``random="inputs"`` with draws inside a ``scan`` that also computes on device values
(issue 17: dropout inside an ``nn.RNN`` cell): the scan splits into a host scan stacking
each step's draws and a device scan reading them (rlxjax/frontend/random/scan.py).

Oracles: ``jax.jit`` of the same function (fp32 rounding: XLA fuses the loop body), JAX's
gradients, 20 steps of JAX + optax on the same keys (rtol 1e-4); the metadata's
distribution against the user's parameters."""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import flax.linen as nn

import rlxjax
from helpers import FP32_TOL, TEST_BACKEND, assert_tree_close
from rlxjax.errors import UnsupportedPrimitiveError

F32 = np.float32
RNG = np.random.default_rng(1709)


def _x(*shape):
    return RNG.normal(size=shape).astype(F32)


def _jit(f, **kw):
    return rlxjax.coreml_jit(f, backend=TEST_BACKEND, random="inputs", **kw)


def _rows(compiled):
    return json.loads(compiled.spec.description.metadata.userDefined["rlxjax.random"])


@settings(max_examples=2, deadline=None)
@given(length=st.integers(1, 4), reverse=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_a_key_carried_and_split_each_step(length, reverse, seed):
    """The key is a carry the body splits (host), the draw is added to a device carry;
    the step's mask is a ys output of the host scan, the new key a result."""
    def loop(x, k):
        def body(c, _):
            x, k = c
            k, sub = jax.random.split(k)
            keep = jax.random.bernoulli(sub, 0.6, x.shape)
            return (jnp.where(keep, x * 1.5, x) + jax.random.normal(sub, x.shape), k), keep
        (x, k), masks = jax.lax.scan(body, (x, k), None, length=length, reverse=reverse)
        return x, masks, k

    x, key = _x(3), jax.random.key(seed)
    compiled = _jit(loop).lower(x, key).compile()
    got, want = compiled(x, key), jax.jit(loop)(x, key)
    assert_tree_close(got[0], want[0], **FP32_TOL)
    np.testing.assert_array_equal(got[1], np.asarray(want[1]))
    np.testing.assert_array_equal(jax.random.key_data(got[2]), jax.random.key_data(want[2]))
    rows = {r["made_by"]: r for r in _rows(compiled)}
    assert rows["jax.random.bernoulli"]["shape"] == [length, 3]
    assert rows["jax.random.bernoulli"]["p"] == float(F32(0.6))
    assert rows["jax.random.normal"]["distribution"] == "normal"
    assert all("test_random_scan.py" in r["source"] for r in rows.values())


class DropoutLSTMCell(nn.LSTMCell):
    rate: float = 0.3

    @nn.compact
    def __call__(self, carry, inputs):
        carry, y = super().__call__(carry, inputs)
        return carry, nn.Dropout(self.rate, deterministic=False)(y)


def _rnn():
    model = nn.Sequential([nn.RNN(DropoutLSTMCell(5),
                                  split_rngs={"params": False, "dropout": True}),
                           nn.Dense(2)])
    x, y = _x(2, 4, 3), _x(2, 4, 2)
    params = model.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, x)

    def loss(params, key, x, y):
        return jnp.mean((model.apply(params, x, rngs={"dropout": key}) - y) ** 2)

    return params, loss, x, y


# ~6.5 s; keys carried through scans stay in the default run (the hypothesis test above)
@pytest.mark.slow
def test_dropout_inside_an_nn_rnn_cell_value_and_gradient():
    params, loss, x, y = _rnn()
    key = jax.random.key(4)
    compiled = rlxjax.coreml_value_and_grad(loss, backend=TEST_BACKEND, random="inputs"
                                            ).lower(params, key, x, y).compile()
    assert_tree_close(compiled(params, key, x, y), jax.jit(jax.value_and_grad(loss))(
        params, key, x, y), rtol=1e-5, atol=1e-6)
    rows = _rows(compiled)
    assert [(r["distribution"], r["p"], r["shape"]) for r in rows] == \
        [("bernoulli", float(F32(0.7)), [4, 2, 5])]   # (keep probability; steps first)


@pytest.mark.slow
def test_dropout_inside_an_nn_rnn_cell_trains_as_jax_and_optax():
    optax = pytest.importorskip("optax")
    params, loss, x, y = _rnn()
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, backend=TEST_BACKEND, random="inputs")
    state = step.init(params)

    @jax.jit
    def jax_step(p, s, key):
        v, g = jax.value_and_grad(loss)(p, key, x, y)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, v

    p, s = params, opt.init(params)
    got, want = [], []
    for key in jax.random.split(jax.random.key(12), 20):
        state, v = step(state, key, x, y)
        p, s, w = jax_step(p, s, key)
        got.append(float(v))
        want.append(float(w))
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_what_still_mixes_is_named():
    x = _x(3)

    def from_device(x, k):  # the key depends on the device carry: no host scan can run
        def body(c, _):
            sub = jax.random.fold_in(k, (c.sum() > 0).astype(jnp.int32))
            return c + jax.random.normal(sub, c.shape), None
        return jax.lax.scan(body, x, None, length=2)[0]

    with pytest.raises(UnsupportedPrimitiveError, match=r"random='inputs'.*random_fold_in"
                       r".*test_random_scan\.py.*computed from device values"):
        _jit(from_device).lower(x, jax.random.key(0))
