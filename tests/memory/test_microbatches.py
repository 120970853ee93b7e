"""``coreml_train_step(..., microbatches=k)``: one loop over k slices inside the program,
one optimizer update, equal to JAX's whole-batch step, with a lower peak of temporaries."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlxjax
from rlxjax.errors import ArgumentError
from test_memory_analysis import assert_agrees, feeds_of, measured

RNG = np.random.default_rng(0)
XT = RNG.normal(size=(256, 12)).astype(np.float32)  # activations > parameters
PARAMS = {"w1": (RNG.normal(size=(12, 64)) * 0.3).astype(np.float32),
          "b1": np.zeros(64, np.float32),
          "w2": (RNG.normal(size=(64, 12)) * 0.3).astype(np.float32)}


def loss(p, x):  # a mean over the examples, as the whole-batch equality needs
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return jnp.mean((h @ p["w2"] - x) ** 2)


def jax_step(opt, params, x):
    @jax.jit  # (one XLA compile, not one per optax op)
    def step(params, x):
        g = jax.grad(loss)(params, x)
        u, s = opt.update(g, opt.init(params), params)
        return optax.apply_updates(params, u), s

    return step(params, x)


@pytest.mark.parametrize("state", ["io", "mlstate"])
def test_four_microbatches_equal_the_whole_batch_step(state):
    opt = optax.adam(1e-3)
    whole = rlxjax.coreml_train_step(loss, opt, state=state)
    whole.init(PARAMS, XT)
    step = rlxjax.coreml_train_step(loss, opt, microbatches=4, state=state)
    st, value = step(step.init(PARAMS), XT)
    want_p, _ = jax_step(opt, PARAMS, XT)
    for a, b in zip(jax.tree.leaves(step.params(st)), jax.tree.leaves(want_p)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, loss(PARAMS, XT), rtol=1e-5)
    assert "while_loop" in step.last_compiled.op_histogram()  # one loop inside
    if state == "io":
        # (mlstate: the peak is the packing of the states into their buffers at the end,
        # the same with or without micro-batches)
        ours, theirs = step.memory_analysis(), whole.memory_analysis()
        assert ours.temp_size_in_bytes < 0.5 * theirs.temp_size_in_bytes
        c = step.last_compiled  # the loop's peak as the interpreter measures it
        assert_agrees(ours, measured(c, PARAMS, optax.adam(1e-3).init(PARAMS), XT))


@pytest.mark.parametrize("k", [0, -2, 2.0, True])
def test_bad_microbatches_are_refused(k):
    with pytest.raises(ArgumentError, match="microbatches"):
        rlxjax.coreml_train_step(loss, optax.sgd(0.1), microbatches=k)


def test_batch_not_divisible_and_unsupported_combinations_are_refused():
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), microbatches=3)
    with pytest.raises(ArgumentError, match="divisible by 3"):
        step(step.init(PARAMS), XT)
    with pytest.raises(ArgumentError, match="has_aux"):
        rlxjax.coreml_train_step(loss, optax.sgd(0.1), microbatches=2, has_aux=True)


@pytest.mark.slow
def test_transformer_block_microbatches():
    from models import TransformerBlock, rng_data

    xt, = rng_data(2, (8, 8, 32))
    tb = TransformerBlock()
    params = tb.init(jax.random.PRNGKey(1), xt)
    tloss = lambda p, x: jnp.mean(tb.apply(p, x) ** 2)  # noqa: E731
    opt = optax.adam(1e-3)
    whole = rlxjax.coreml_train_step(tloss, opt)
    whole.init(params, xt)
    step = rlxjax.coreml_train_step(tloss, opt, microbatches=4)
    st, _ = step(step.init(params), xt)
    g = jax.grad(tloss)(params, xt)
    u, _ = opt.update(g, opt.init(params), params)
    for a, b in zip(jax.tree.leaves(st.params), jax.tree.leaves(optax.apply_updates(params, u))):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert (step.memory_analysis().temp_size_in_bytes
            < 0.8 * whole.memory_analysis().temp_size_in_bytes)  # measured 0.71x
