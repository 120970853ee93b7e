"""jax.custom_jvp / jax.custom_vjp rules are honoured by coreml_grad (not just their primal):
every case is compared with jax.grad, including points where the rule and the primal's
own derivative disagree."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
from helpers import assert_tree_close


def _both(loss, *args, argnums=0):
    want = jax.grad(loss, argnums=argnums)(*args)
    assert_tree_close(rlxjax.coreml_grad(loss, argnums=argnums)(*args), want)
    assert_tree_close(rlxjax.coreml_jit(jax.grad(loss, argnums=argnums))(*args), want)


def test_relu_has_derivative_zero_at_zero():
    # max(x, 0) splits the tie (1/2); jax.nn.relu's custom_jvp says 0.
    x = np.array([0.0, 1.0, -1.0, 0.0], np.float32)
    loss = lambda x: jax.nn.relu(x).sum()  # noqa: E731
    assert rlxjax.coreml_grad(loss)(x)[0] == 0.0
    _both(loss, x)


@jax.custom_vjp
def _clip_gradient(x, k):
    return x * 2.0


def _fwd(x, k):
    return x * 2.0, (x, k)


def _bwd(res, ct):
    x, k = res
    return jnp.clip(ct, -1.0, 1.0) * x * k.astype(jnp.float32), None


_clip_gradient.defvjp(_fwd, _bwd)


def test_custom_vjp_with_an_integer_argument():
    def loss(x, k):
        return (_clip_gradient(x, k) * 3.0).sum()

    _both(loss, np.array([0.5, -2.0, 3.0], np.float32), np.int32(2))


@jax.custom_jvp
def _safe_log(x):
    return jnp.log(x)


@_safe_log.defjvp
def _safe_log_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return jnp.log(x), t / jnp.maximum(x, 1e-3)


def test_custom_jvp_inside_scan_and_cond():
    def loss(w, xs):
        def step(c, x):
            c = jax.lax.cond(x.sum() > 0, lambda c: _safe_log(c * c + 1e-4 + x * x),
                             lambda c: jax.nn.relu(c - x), c)
            return c @ w, None

        c, _ = jax.lax.scan(step, jnp.ones(3), xs)
        return c.sum()

    rng = np.random.default_rng(1)
    w = (rng.standard_normal((3, 3)) * 0.4).astype(np.float32)
    xs = rng.standard_normal((4, 3)).astype(np.float32)
    _both(loss, w, xs, argnums=(0, 1))


@pytest.mark.parametrize("fn", [jax.nn.softplus, jax.nn.silu, jax.nn.gelu, jax.nn.relu6,
                                jax.nn.log_sigmoid, jax.nn.elu])
def test_jax_nn_activations(fn):
    x = np.array([-3.0, -1.0, 0.0, 0.0, 0.5, 6.0, 7.0], np.float32)
    _both(lambda x: (fn(x) * np.arange(1, 8, dtype=np.float32)).sum(), x)


def test_training_step_uses_the_custom_rule():
    import optax

    def loss(params, x):
        return jax.nn.relu(x @ params["w"]).sum()

    params = {"w": np.zeros((3, 2), np.float32)}  # every pre-activation is exactly 0
    x = np.ones((4, 3), np.float32)
    step = rlxjax.coreml_train_step(loss, optax.sgd(1.0))
    state, _ = step(step.init(params), x)
    np.testing.assert_array_equal(np.asarray(step.params(state)["w"]), 0.0)


def test_a_rule_that_cannot_be_traced_is_a_clear_error():
    @jax.custom_vjp
    def f(x):
        return x * 2.0

    def bad_bwd(res, ct):
        raise ValueError("this rule is broken")

    f.defvjp(lambda x: (x * 2.0, None), bad_bwd)
    with pytest.raises(rlxjax.errors.UnsupportedPrimitiveError, match="custom derivative rule"):
        rlxjax.coreml_grad(lambda x: f(x).sum())(np.ones(2, np.float32))
