"""equinox's checkpointed scan (``eqx.internal.scan(..., kind="checkpointed")``, its own
while loop with equinox primitives, frontend/rules/equinox.py) as written: forward values
and gradients equal JAX's (rtol 1e-5), in ``coreml_grad`` and ``coreml_train_step``."""
from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

import rlxjax

RTOL, ATOL = 1e-5, 1e-6


def _scan_loss(length, checkpoints, with_xs):
    def loss(w, x, xs):
        def body(c, xi):
            h = jnp.tanh(c @ w["a"] + (xi if with_xs else 0.0)) * w["b"]
            return h, jnp.sum(h, axis=-1)
        c, ys = eqx.internal.scan(body, x, xs if with_xs else None, length=length,
                                  kind="checkpointed", checkpoints=checkpoints)
        return jnp.sum(c ** 2) + jnp.mean(ys ** 2)
    return loss


def _data(length, seed=0):
    rng = np.random.default_rng(seed)
    w = {"a": (rng.standard_normal((4, 4)) * 0.4).astype(np.float32),
         "b": rng.uniform(0.5, 1.5, (4,)).astype(np.float32)}
    return w, rng.standard_normal((3, 4)).astype(np.float32), \
        rng.standard_normal((length, 3, 4)).astype(np.float32)


def _check_value_and_grad(length, checkpoints, with_xs):
    loss = _scan_loss(length, checkpoints, with_xs)
    w, x, xs = _data(length)
    want_v, want_g = jax.value_and_grad(loss)(w, x, xs)
    got_v, got_g = rlxjax.coreml_value_and_grad(loss, backend="reference")(w, x, xs)
    np.testing.assert_allclose(np.asarray(got_v), np.asarray(want_v), rtol=RTOL, atol=ATOL)
    for g, e in zip(jax.tree_util.tree_leaves(got_g), jax.tree_util.tree_leaves(want_g)):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=RTOL, atol=ATOL)


def test_checkpointed_scan_value_and_grad_equal_jax():
    _check_value_and_grad(5, 2, True)


@pytest.mark.slow
@settings(max_examples=6, deadline=None)
@given(st.integers(1, 9), st.sampled_from([None, 1, 2, 4]), st.booleans())
def test_checkpointed_scans_of_any_length_and_checkpoints(length, checkpoints, with_xs):
    _check_value_and_grad(length, checkpoints, with_xs)


@pytest.mark.slow
def test_train_step_of_an_equinox_model_scanned_with_checkpoints():
    key = jax.random.PRNGKey(0)
    model = eqx.nn.MLP(4, 4, 8, 1, key=key)
    params, static = eqx.partition(model, eqx.is_array)
    params = jax.tree_util.tree_map(np.asarray, params)
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((5, 3, 4)).astype(np.float32) for _ in range(2))

    def loss(p, x, y):
        m = eqx.combine(p, static)

        def body(c, xy):
            xi, yi = xy
            h = jax.vmap(m)(xi + c)
            return h * 0.5, jnp.mean((h - yi) ** 2)
        _, ls = eqx.internal.scan(body, jnp.zeros((3, 4), jnp.float32), (x, y), length=5,
                                  kind="checkpointed", checkpoints=2)
        return jnp.mean(ls)

    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, backend="reference")
    st_ = step.init(params, x, y)
    p, s = params, opt.init(params)
    for _ in range(3):
        st_, lv = step(st_, x, y)
        want, g = jax.value_and_grad(loss)(p, x, y)
        u, s = opt.update(g, s, p)
        p = optax.apply_updates(p, u)
        np.testing.assert_allclose(float(lv), float(want), rtol=RTOL)
    for a, b in zip(jax.tree_util.tree_leaves(st_.params), jax.tree_util.tree_leaves(p)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)


def test_a_foreign_primitive_of_the_same_name_is_refused():
    from jax.extend.core import Primitive
    from jax.interpreters import mlir

    p = Primitive("maybe_set")
    p.def_impl(lambda x: x)
    p.def_abstract_eval(lambda x: x)
    mlir.register_lowering(p, mlir.lower_fun(lambda x: x, multiple_results=False))
    with pytest.raises(rlxjax.errors.UnsupportedPrimitiveError, match="not equinox's"):
        rlxjax.coreml_jit(lambda x: p.bind(x) * 2.0).lower(np.ones(3, np.float32))
