"""RNG state through gradients and training (issue 17, deliverable 5): an nnx model whose
``Rngs`` counters advance each step trains through ``coreml_train_step`` with
``random="inputs"``; the advanced state comes back from the host as aux.

The user pattern: ``graphdef, params, rng_state = nnx.split(model, nnx.Param,
nnx.RngState)``; ``loss(params, rng_state, x, y)`` merges, runs and returns
``(loss, nnx.state(model, nnx.RngState))`` (merging with ``copy=True``, as ``jax.grad``
needs too); each step feeds the returned state to the next.

Oracle: ``jax.jit`` of ``jax.value_and_grad(loss, has_aux=True)`` + optax on the same
starting state, threading the RNG state the same way (rtol 1e-4 over 20 steps); the
returned counters equal JAX's exactly.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from flax import nnx

import rlxjax
from helpers import FP32_TOL, TEST_BACKEND, assert_tree_close
from rlxjax.errors import ArgumentError

F32 = np.float32
RNG = np.random.default_rng(1705)


def _x(*shape):
    return RNG.normal(size=shape).astype(F32)


class NnxDropoutMLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(8, 16, rngs=rngs)
        self.drop = nnx.Dropout(0.3, rngs=rngs)
        self.l2 = nnx.Linear(16, 3, rngs=rngs)

    def __call__(self, x):
        return self.l2(self.drop(nnx.relu(self.l1(x))))


def nnx_split():
    """(graphdef, params, rng_state, loss) for a model in train mode, as a user writes it."""
    model = NnxDropoutMLP(nnx.Rngs(0, dropout=7))
    model.train()
    graphdef, params, rng_state = nnx.split(model, nnx.Param, nnx.RngState)

    def loss(params, rng_state, x, y):
        # copy=True: fresh Variables in this trace (jax.grad passes the un-differentiated
        # rng_state through as the caller's objects, which nnx refuses to mutate)
        m = nnx.merge(graphdef, params, rng_state, copy=True)
        return jnp.mean((m(x) - y) ** 2), nnx.state(m, nnx.RngState)

    return graphdef, params, rng_state, loss


def _counts(rng_state):
    return [int(np.asarray(leaf)) for leaf in jax.tree_util.tree_leaves(rng_state)
            if not jax.dtypes.issubdtype(getattr(leaf, "dtype", None), jax.dtypes.prng_key)]


def _same_rng_state(got, want):
    g, w = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(g) == len(w)
    for a, b in zip(g, w):
        if jax.dtypes.issubdtype(b.dtype, jax.dtypes.prng_key):
            np.testing.assert_array_equal(jax.random.key_data(a), jax.random.key_data(b))
        else:
            assert np.asarray(a).dtype == np.asarray(b).dtype == np.uint32
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_value_and_grad_returns_the_advanced_rng_state():
    _, params, rng_state, loss = nnx_split()
    x, y = _x(4, 8), _x(4, 3)
    ours = rlxjax.coreml_value_and_grad(loss, has_aux=True, backend=TEST_BACKEND,
                                        random="inputs")
    theirs = jax.jit(jax.value_and_grad(loss, has_aux=True))
    (l1, s1), g1 = ours(params, rng_state, x, y)
    (w1, t1), h1 = theirs(params, rng_state, x, y)
    assert_tree_close(l1, w1, **FP32_TOL)
    assert_tree_close(g1, h1, **FP32_TOL)
    _same_rng_state(s1, t1)
    assert _counts(s1) == [c + 1 for c in _counts(rng_state)]
    # the next call from the returned state draws the next mask, as JAX does
    (l2, s2), g2 = ours(params, s1, x, y)
    (w2, t2), h2 = theirs(params, t1, x, y)
    assert_tree_close((l2, g2), (w2, h2), **FP32_TOL)
    _same_rng_state(s2, t2)
    # grad with has_aux: (grads, aux), the aux from the host
    g3, s3 = rlxjax.coreml_grad(loss, has_aux=True, backend=TEST_BACKEND,
                                random="inputs")(params, rng_state, x, y)
    assert_tree_close(g3, h1, **FP32_TOL)
    _same_rng_state(s3, t1)


@pytest.mark.parametrize("mode", ["io", pytest.param("mlstate", marks=pytest.mark.slow)])
def test_nnx_rng_state_trains_20_steps_as_jax_and_optax(mode):
    optax = pytest.importorskip("optax")
    _, params, rng_state, loss = nnx_split()
    x, y = _x(8, 8), _x(8, 3)
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, state=mode, has_aux=True,
                                    backend=TEST_BACKEND, random="inputs")
    state = step.init(params)

    @jax.jit
    def jax_step(p, s, rng):
        (v, rng), g = jax.value_and_grad(loss, has_aux=True)(p, rng, x, y)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, rng, v

    p, s, rng_ours, rng_jax = params, opt.init(params), rng_state, rng_state
    got, want = [], []
    for _ in range(20):
        state, v, rng_ours = step(state, rng_ours, x, y)
        p, s, rng_jax, w = jax_step(p, s, rng_jax)
        got.append(float(v))
        want.append(float(w))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    _same_rng_state(rng_ours, rng_jax)
    assert _counts(rng_ours) == [c + 20 for c in _counts(rng_state)]
    assert_tree_close(jax.tree_util.tree_map(np.asarray, step.params(state)),
                      jax.tree_util.tree_map(np.asarray, p), rtol=1e-4, atol=1e-5)
    assert len(step._programs) == 1  # the counter's value is no part of the signature


def test_a_loss_computed_only_from_keys_is_refused():
    with pytest.raises(ArgumentError, match=r"loss is computed only from keys"):
        rlxjax.coreml_grad(lambda x, k: jax.random.normal(k, ()), random="inputs",
                           backend=TEST_BACKEND).lower(_x(3), jax.random.key(0))


def test_rng_state_in_the_parameters_is_refused_with_a_way_out():
    optax = pytest.importorskip("optax")
    _, params, rng_state, loss = nnx_split()
    step = rlxjax.coreml_train_step(lambda pr, x, y: loss(pr[0], pr[1], x, y)[0],
                                    optax.sgd(0.1), backend=TEST_BACKEND, random="inputs")
    with pytest.raises(ArgumentError, match=r"pass PRNG keys and RNG counters in the batch"):
        step(step.init((params, rng_state)), _x(4, 8), _x(4, 3))


def test_uint32_counters_and_indices_in_inputs_mode():
    """Counters stay uint32 on the host (any value: the host computes with them); a uint32
    the device reads is an int32 input, and a value that does not fit names the input."""
    from jax import lax

    def f(x, cache, count):
        return lax.dynamic_slice(x, (cache["cache_index"],), (2,)) * 2.0, count + 1

    x = _x(10)
    ours = rlxjax.coreml_jit(f, backend=TEST_BACKEND, random="inputs")
    big = np.uint32(2**32 - 2)  # a counter near the top of uint32: host arithmetic, exact
    for i in (0, 7, 9):  # (9: clamped, as JAX does)
        y, c = ours(x, {"cache_index": np.uint32(i)}, big)
        want_y, want_c = jax.jit(f)(x, {"cache_index": np.uint32(i)}, big)
        np.testing.assert_array_equal(y, np.asarray(want_y))
        assert c.dtype == np.uint32 and int(c) == int(want_c) == 2**32 - 1
    assert "int32" in [s.dtype for s in ours.lower(x, {"cache_index": np.uint32(0)},
                                                    big).compile().input_specs]
    with pytest.raises(ArgumentError, match=r"'cache\.cache_index'.*holds 2147483648"):
        ours(x, {"cache_index": np.uint32(2**31)}, big)


def test_nnx_rng_state_advances_through_a_device_mode_training_step():
    """random='device' draws the masks on the device; the RNG state still comes back from
    the host as aux, advanced as JAX advances it."""
    optax = pytest.importorskip("optax")
    _, params, rng_state, loss = nnx_split()
    x, y = _x(8, 8), _x(8, 3)
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), has_aux=True,
                                    backend=TEST_BACKEND, random="device")
    state, ours, theirs = step.init(params), rng_state, rng_state
    for _ in range(3):
        state, v, ours = step(state, ours, x, y)
        theirs = jax.jit(loss)(params, theirs, x, y)[1]
        assert np.isfinite(float(v))
    _same_rng_state(ours, theirs)
    ops = step.last_compiled.op_histogram()
    assert ops.get("random_bernoulli") == 1, ops
