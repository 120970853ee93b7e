"""A -NaN reaching a top_k is refused at call time (frontend/nan_sign.py): XLA ranks it
below -inf, Core ML cannot read a NaN's sign. Everything else about NaNs in top_k matches
JAX, and arguments that do not reach a top_k are not checked."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

import rlxjax
from rlxjax.frontend.nan_sign import has_negative_nan

NEG_NAN = np.float32(-np.abs(np.float32(np.nan)))
SPECIALS = [np.inf, -np.inf, np.nan, NEG_NAN, 0.0, -0.0, 1.5, -2.0]


def _with_neg_nan():
    x = np.array([np.inf, np.nan, 0, -np.inf, 3], np.float32)
    x[2] = NEG_NAN
    assert has_negative_nan(x) and not has_negative_nan(np.array([np.nan], np.float32))
    return x


def _assert_same(got, want):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_jit_refuses_negative_nan_that_reaches_top_k_only():
    f = lambda x, y: (lax.top_k(x * 2.0, 3), y + 1.0)  # noqa: E731
    x = _with_neg_nan()
    c = rlxjax.coreml_jit(f)
    with pytest.raises(rlxjax.ArgumentError, match=r"argument 'x' .*sign bit.*lax\.top_k at "
                                                   r".*test_nan_sign\.py"):
        c(x, x)
    plus = np.where(np.isnan(x), np.float32(np.nan), x).astype(np.float32)
    _assert_same(c(plus, x), jax.jit(f)(plus, x))  # y holds a -NaN and is not checked


def test_grad_and_loaded_package_refuse_it(tmp_path):
    x = _with_neg_nan()
    loss = lambda x: jnp.sum(lax.top_k(x, 2)[0] * jnp.arange(2.0))  # noqa: E731
    with pytest.raises(rlxjax.ArgumentError, match="argument 'x'"):
        rlxjax.coreml_grad(loss)(x)
    plus = np.array([4.0, np.nan, -1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(rlxjax.coreml_grad(loss)(plus), jax.grad(loss)(plus))
    compiled = rlxjax.coreml_jit(lambda x: lax.top_k(x, 2)).lower(x).compile()
    path = str(tmp_path / "topk.mlpackage")
    compiled.save(path)
    m = rlxjax.load(path, flat=True)
    with pytest.raises(rlxjax.ArgumentError, match="sign bit"):
        m(x)
    got = m(plus)
    _assert_same(list(got.values()), jax.jit(lambda x: lax.top_k(x, 2))(plus))


def test_top_k_inside_control_flow_checks_what_reaches_it():
    def f(x, w):
        def body(c, row):
            return c, lax.top_k(row, 2)[0]
        return lax.scan(body, 0.0, x)[1], w * 2
    x = np.tile(_with_neg_nan(), (2, 1))
    with pytest.raises(rlxjax.ArgumentError, match="argument .x.*a lax.top_k inside scan at .*test_nan_sign"):
        rlxjax.coreml_jit(f)(x, np.zeros(3, np.float32))
    w = np.array([NEG_NAN, 1, 2], np.float32)
    plus = np.where(np.isnan(x), np.float32(np.nan), x).astype(np.float32)
    _assert_same(rlxjax.coreml_jit(f)(plus, w), jax.jit(f)(plus, w))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(SPECIALS), min_size=2, max_size=6), st.integers(1, 6))
def test_top_k_of_specials_matches_jax_or_is_refused(vals, k):
    x = np.array(vals, np.float32)
    k = min(k, x.size)
    f = lambda x: lax.top_k(x, k)  # noqa: E731
    if has_negative_nan(x):
        with pytest.raises(rlxjax.ArgumentError, match="sign bit"):
            rlxjax.coreml_jit(f)(x)
        return
    got, want = rlxjax.coreml_jit(f)(x), jax.jit(f)(x)
    _assert_same(got, want)
    np.testing.assert_array_equal(np.signbit(got[0]), np.signbit(np.asarray(want[0])))


def test_train_step_refuses_it_in_the_batch():
    import optax

    loss = lambda p, x: jnp.sum(lax.top_k(x * p["w"], 2)[0])  # noqa: E731
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1))
    state = step.init({"w": np.ones(5, np.float32)})
    with pytest.raises(rlxjax.ArgumentError, match="argument 'x'.*top_k"):
        step(state, _with_neg_nan())
