"""psum / pmax / pmin / pmean over the named axis of a ``jax.vmap`` (reductions over the
batch axis once vmapped), forward and gradient against JAX; equinox's ``BatchNorm``, which
emits them (issue 13)."""
from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import rlxjax
from helpers import assert_tree_close, examples, FP32_TOL

F32, I32 = np.float32, np.int32
FEW = settings(max_examples=examples(3), deadline=None)


def _collectives(x, y):
    return (x - jax.lax.pmean(x, "b") + jax.lax.pmax(x, "b") * 0.5 - jax.lax.pmin(x, "b"),
            jax.lax.psum((x * 2, y), "b"), jax.lax.pmax(y, "b"), jax.lax.pmin(y > 0, "b"))


def _same_with_reductions(x):
    """``_collectives(x, .)[0]`` vmapped, written with jnp reductions over the batch axis
    (JAX has no differentiation rule for pmax / pmin: its gradient is taken here)."""
    return (x - jnp.mean(x, 0, keepdims=True) + jnp.max(x, 0, keepdims=True) * 0.5
            - jnp.min(x, 0, keepdims=True))


@FEW
@given(data=st.data())
def test_collectives_over_a_vmap_axis(data):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    x = data.draw(hnp.arrays(F32, shape, elements=st.integers(-16, 16).map(lambda k: k / 4)))
    y = data.draw(hnp.arrays(I32, shape, elements=st.integers(-5, 5)))
    f = jax.vmap(_collectives, axis_name="b")
    assert_tree_close(rlxjax.coreml_jit(f, backend="reference")(x, y), jax.jit(f)(x, y),
                      **FP32_TOL)
    w = np.linspace(0.5, 1.5, x.size, dtype=F32).reshape(shape)

    def loss(x):
        a, (b, _), _, _ = f(x, y)
        return jnp.sum(a * w) + jnp.sum(b * w * w)

    def reference(x):
        return jnp.sum(_same_with_reductions(x) * w) + jnp.sum(jnp.sum(x * 2, 0) * w * w)
    np.testing.assert_allclose(loss(x), reference(x), rtol=1e-6)
    assert_tree_close(rlxjax.coreml_grad(loss, backend="reference")(x),
                      jax.grad(reference)(x), **FP32_TOL)
    psum_only = lambda x: jnp.sum(jax.vmap(lambda v: v * jax.lax.psum(v, "b"),  # noqa: E731
                                           axis_name="b")(x) * w)
    assert_tree_close(rlxjax.coreml_grad(psum_only, backend="reference")(x),
                      jax.grad(psum_only)(x), **FP32_TOL)


def test_nested_vmaps_and_a_sum_over_both_names():
    x = np.arange(24, dtype=F32).reshape(2, 3, 4) / 8
    f = jax.vmap(jax.vmap(lambda v: v * jax.lax.psum(v, ("a", "b")) - jax.lax.pmean(v, "a"),
                          axis_name="b"), axis_name="a")
    assert_tree_close(rlxjax.coreml_jit(f, backend="reference")(x), jax.jit(f)(x), **FP32_TOL)
    loss = lambda x: jnp.sum(f(x) ** 2)  # noqa: E731
    assert_tree_close(rlxjax.coreml_grad(loss, backend="reference")(x), jax.grad(loss)(x),
                      **FP32_TOL)


@pytest.mark.parametrize("mode", ["ema", "batch"])
def test_equinox_batch_norm(mode):
    eqx = pytest.importorskip("equinox")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = eqx.nn.BatchNorm(4, axis_name="batch", mode=mode)
    state = eqx.nn.State(model)
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(F32) * 3 + 1

    def run(x, state, weight, bias, inference=False):
        m = eqx.tree_at(lambda m: (m.weight, m.bias), model, (weight, bias))
        m = eqx.nn.inference_mode(m, inference)
        return jax.vmap(m, axis_name="batch", in_axes=(0, None), out_axes=(0, None))(x, state)

    wb = (np.linspace(0.5, 2, 4, dtype=F32), np.linspace(-1, 1, 4, dtype=F32))
    for inference in (False, True):
        fn = lambda x, s, w, b: run(x, s, w, b, inference)  # noqa: E731
        got, want = rlxjax.coreml_jit(fn, backend="reference")(x, state, *wb), \
            jax.jit(fn)(x, state, *wb)
        assert_tree_close(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want),
                          **FP32_TOL)
    # a second training step from the updated state
    _, state2 = jax.jit(lambda x, s: run(x, s, *wb))(x, state)
    t = np.linspace(-1, 1, 32, dtype=F32).reshape(8, 4)

    def loss(x, weight, bias):
        y, _ = run(x, state2, weight, bias)
        return jnp.sum((y - t) ** 2)
    assert_tree_close(rlxjax.coreml_grad(loss, argnums=(0, 1, 2), backend="reference")(x, *wb),
                      jax.grad(loss, (0, 1, 2))(x, *wb), rtol=1e-4, atol=1e-5)
