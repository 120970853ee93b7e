"""flax nnx hijax Variables (nnx.var_defaults(hijax=True), flax's nnx_toy_examples): the
forward and rlxjax's gradient compile (frontend/hijax.py) and equal JAX's (the gradient:
jax.grad of the same model built without hijax, since JAX's own cannot differentiate
get_variable with QDD); returning a Variable is refused with the user's line."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax

nnx = pytest.importorskip("flax.nnx")
if not hasattr(nnx, "var_defaults"):
    pytest.skip("this flax has no hijax Variables", allow_module_level=True)


class Count(nnx.Variable):
    pass


class MLP(nnx.Module):
    def __init__(self, rngs):
        self.count = Count(jnp.array(0))
        self.l1 = nnx.Linear(2, 8, rngs=rngs)
        self.l2 = nnx.Linear(8, 1, rngs=rngs)

    def __call__(self, x):
        return self.l2(jax.nn.relu(self.l1(x))) * (self.count[...] + 1)


def _split(hijax):
    with nnx.var_defaults(hijax=hijax):
        return nnx.split(MLP(nnx.Rngs(0)), nnx.Param, ...)


X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)


def test_forward_and_gradient_equal_jax():
    g, params, rest = _split(True)

    def f(p, r, x):
        m = nnx.merge(g, p, r)
        y = m(m(x)[:, :1] * np.ones((1, 2), np.float32))
        return y, m.count[...] + 1

    def loss(p, r, x):
        return jnp.sum(f(p, r, x)[0] ** 2)

    got = rlxjax.coreml_jit(f)(params, rest, X)
    want = jax.jit(f)(params, rest, X)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
    assert int(got[1]) == int(want[1]) == 1
    pure = jax.tree_util.tree_map(lambda v: jnp.asarray(v[...]), nnx.to_pure_dict(params))

    def loss0(p, x):  # the same model in plain JAX
        mlp = lambda x, c: (jax.nn.relu(x @ p["l1"]["kernel"] + p["l1"]["bias"])  # noqa: E731
                            @ p["l2"]["kernel"] + p["l2"]["bias"]) * c
        return jnp.sum(mlp(mlp(x, 1.0)[:, :1] * np.ones((1, 2), np.float32), 1.0) ** 2)

    grads = nnx.to_pure_dict(rlxjax.coreml_grad(loss)(params, rest, X))
    ref = jax.grad(loss0)(pure, X)
    for a, b in zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(ref)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_returning_a_variable_is_refused():
    g, params, rest = _split(True)

    def f(p, r, x):
        m = nnx.merge(g, p, r)
        m(x)
        return nnx.state(m)

    with pytest.raises(rlxjax.UnsupportedPrimitiveError, match="returns a Variable"):
        rlxjax.coreml_jit(f)(params, rest, X)


def test_updating_an_argument_variable_is_refused():
    """jax.jit writes a hijax Variable's update back into the argument (flax's
    hijax_basic.py counts calls so); a compiled program cannot, so it is refused."""
    g, params, rest = _split(True)

    def f(p, r, x):
        m = nnx.merge(g, p, r)
        m.count[...] += 1
        return m(x)

    with pytest.raises(rlxjax.UnsupportedPrimitiveError, match="updates a Variable of an arg"):
        rlxjax.coreml_jit(f)(params, rest, X)


def test_a_variable_made_inside_may_be_updated():
    def f(x):
        with nnx.var_defaults(hijax=True):
            v = nnx.Variable(jnp.zeros_like(x))
        v[...] = v[...] + x
        v[...] = v[...] * 2.0
        return v[...]

    np.testing.assert_array_equal(rlxjax.coreml_jit(f)(X), jax.jit(f)(X))
