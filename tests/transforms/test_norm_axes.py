"""A normalisation whose statistics span a leading dim too (over (0, 2, 3) of NCHW, a
batch norm's) is not a layer norm over the trailing dims: it was recognised as
``layer_norm(axis=2)``, its forward off by 0.9 and its gamma gradient by 234 against JAX."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import rlxjax

RNG = np.random.default_rng(0)
X = RNG.standard_normal((2, 6, 3, 3)).astype(np.float32)
G, B = RNG.standard_normal(6).astype(np.float32), RNG.standard_normal(6).astype(np.float32)
W = np.arange(X.size, dtype=np.float32).reshape(X.shape)


def _bn(x, g, b):
    m = x.mean((0, 2, 3), keepdims=True)
    v = ((x - m) ** 2).mean((0, 2, 3), keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5) * g[:, None, None] + b[:, None, None]


def test_statistics_over_a_leading_dim_are_no_layer_norm():
    lowered = rlxjax.coreml_jit(_bn).lower(X, G, B)
    assert not any(n.op == "layer_norm" for n in lowered.graph.nodes)
    np.testing.assert_allclose(rlxjax.coreml_jit(_bn)(X, G, B), jax.jit(_bn)(X, G, B),
                               rtol=1e-5, atol=1e-5)


def test_and_its_gradients_are_jaxs():
    loss = lambda x, g, b: jnp.sum(_bn(x, g, b) * W)  # noqa: E731
    got = rlxjax.coreml_jit(jax.grad(loss, (0, 1, 2)))(X, G, B)
    want = jax.jit(jax.grad(loss, (0, 1, 2)))(X, G, B)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))
