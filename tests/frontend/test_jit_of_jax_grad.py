"""``rlxjax.coreml_jit(jax.grad(loss))``: the frontend compiles what JAX's own AD emits
(add_any, transposes, broadcast zeros, pjit-wrapped pieces, custom_jvp rules of jax.nn
functions, select_n, pad, integer_pow, dot_general with preferred_element_type, ...).

Oracle: ``jax.jit(jax.grad(loss))`` via helpers.check_against_jax (which also validates
every program with coremltools' loader). Tolerances: rtol 1e-5 / atol 1e-6 unless a test
says otherwise with the measured error that justifies it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlxjax
from helpers import check_against_jax

RNG = np.random.default_rng(0)


def _n(*shape, scale=1.0):
    return (RNG.normal(size=shape) * scale).astype(np.float32)


def _w(shape):
    rng = np.random.default_rng(sum(shape) + len(shape))
    return (rng.integers(-8, 9, size=shape) / 4).astype(np.float32)


def weighted(f):
    def loss(*args):
        y = f(*args)
        return jnp.sum(y * _w(np.shape(y)))

    return loss


@jax.custom_vjp
def _sin_custom_vjp(x):
    return jnp.sin(x)


_sin_custom_vjp.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, g: (2.0 * g * c,))


# -- per-op losses --------------------------------------------------------------------------
X = _n(3, 4)
Y = _n(3, 4)
POS = np.abs(_n(3, 4)) + 0.5
DY = (RNG.integers(-8, 9, size=(3, 4)) / 4).astype(np.float32)  # ties for max/min
DY2 = (RNG.integers(-8, 9, size=(3, 4)) / 4).astype(np.float32)

OPS = [
    ("add_bcast", lambda x, y: x + y[:1], (X, Y)),
    ("sub_scalar", lambda x, y: x - jnp.sum(y), (X, Y)),
    ("mul", lambda x, y: x * y, (X, Y)),
    ("div", lambda x, y: x / y, (X, POS)),
    ("rem", lambda x, y: lax.rem(x, y), (X, POS)),
    ("max_ties", jnp.maximum, (DY, DY2)),
    ("min_ties", jnp.minimum, (DY, DY2)),
    ("pow", jnp.power, (POS, Y)),
    ("integer_pow", lambda x, y: x ** 3 + y ** -2, (X, POS)),
    ("exp_log", lambda x, y: jnp.exp(x) * jnp.log(y), (X, POS)),
    ("exp2_log1p_expm1", lambda x, y: jnp.exp2(x) + jnp.log1p(y) * jnp.expm1(x), (X, POS)),
    ("tanh_logistic", lambda x, y: jnp.tanh(x) * jax.nn.sigmoid(y), (X, Y)),
    ("sqrt_rsqrt", lambda x, y: jnp.sqrt(y) + lax.rsqrt(y) * x, (X, POS)),
    ("abs_erf_sin_cos", lambda x, y: jnp.abs(x) * lax.erf(y) + jnp.sin(x) * jnp.cos(y),
     (X, Y)),
    ("square", lambda x, y: jnp.square(x - y), (X, Y)),
    ("where", lambda x, y: jnp.where(x > y, x * 2.0, y ** 2), (X, Y)),
    ("clip", lambda x, y: jnp.clip(x, -0.5, 0.5) * y, (DY, Y)),
    ("clamp", lambda x, y: lax.clamp(-0.5, x, 0.5) * y, (DY, Y)),
    ("convert", lambda x, y: x.astype(jnp.float16).astype(jnp.float32) * y, (X, Y)),
    ("stop_gradient", lambda x, y: lax.stop_gradient(x) * y + x, (X, Y)),
    ("reduce_sum", lambda x, y: jnp.sum(x * y, axis=1), (X, Y)),
    ("reduce_max_min", lambda x, y: jnp.max(x, axis=0) + jnp.min(y, axis=1).sum(), (DY, DY2)),
    ("reduce_prod", lambda x, y: jnp.prod(x, axis=1) * jnp.sum(y), (X, Y)),
    ("mean_var", lambda x, y: jnp.var(x, axis=0) + jnp.mean(y), (X, Y)),
    ("dot", lambda x, y: x @ y.T, (X, Y)),
    ("einsum", lambda x, y: jnp.einsum("ij,kj->ki", x, y), (X, Y)),
    ("transpose_reshape", lambda x, y: (x.T.reshape(2, 6) * y.reshape(6, 2).T), (X, Y)),
    ("concat_slice", lambda x, y: jnp.concatenate([x[:, ::2], y[:, 1:3]], axis=1), (X, Y)),
    ("rev_expand_squeeze", lambda x, y: jnp.squeeze(jnp.flip(x, 0)[None] * y[:, None]),
     (X, Y)),
    ("pad", lambda x, y: lax.pad(x, jnp.sum(y), ((1, -1, 1), (-1, 2, 0))), (X, Y)),
    ("broadcast", lambda x, y: jnp.broadcast_to(x[:, :1], (2, 3, 4)) * y, (X, Y)),
    ("logsumexp", lambda x, y: jax.nn.logsumexp(x * y, axis=-1), (X, Y)),
    ("log_softmax", lambda x, y: jax.nn.log_softmax(x) * y, (X, Y)),
    ("softmax", lambda x, y: jax.nn.softmax(x, axis=0) * y, (X, Y)),
    ("relu_gelu", lambda x, y: jax.nn.relu(x) * jax.nn.gelu(y), (X, Y)),
    ("gelu_exact", lambda x, y: jax.nn.gelu(x, approximate=False) * y, (X, Y)),
    ("softplus_silu", lambda x, y: jax.nn.softplus(x) + jax.nn.silu(y), (X, Y)),
    ("relu6_elu", lambda x, y: jax.nn.relu6(x * 4) + jax.nn.elu(y), (X, Y)),
    ("norm", lambda x, y: jnp.linalg.norm(x, axis=1) * jnp.sum(y), (X, Y)),
    ("log_sigmoid_standardize",
     lambda x, y: jax.nn.log_sigmoid(x) + jax.nn.standardize(y, axis=-1) * x, (X, Y)),
    ("leaky_relu_hard_tanh", lambda x, y: jax.nn.leaky_relu(x) * jax.nn.hard_tanh(y * 3),
     (X, Y)),
    ("logaddexp", jnp.logaddexp, (X, Y)),
    ("mean_where", lambda x, y: jnp.mean(x * y, where=x > 0), (X, Y)),
    ("split", lambda x, y: jnp.split(x, 2, axis=1)[0] * jnp.split(y, [1], axis=1)[1][:, :2],
     (X, Y)),
    ("remat", lambda x, y: jax.checkpoint(lambda a: jnp.sin(a) * a)(x) * y, (X, Y)),
    ("custom_vjp", lambda x, y: _sin_custom_vjp(x) * y, (X, Y)),
]


@pytest.mark.parametrize("name,f,args", OPS, ids=[o[0] for o in OPS])
def test_jit_of_grad_per_op(name, f, args):
    check_against_jax(jax.grad(weighted(f), argnums=(0, 1)), *args)


# -- primitives JAX's AD emits, compiled on their own -------------------------------------
def test_reshape_with_dimensions():
    # a transposing reshape, as in JAX's reduce_prod JVP
    x = _n(2, 3, 4)
    check_against_jax(lambda v: lax.reshape(v, (4, 6), dimensions=(2, 0, 1)), x)


def test_split():
    x = _n(3, 7)
    check_against_jax(lambda v: lax.split(v, (2, 4, 1), axis=1), x)
    check_against_jax(lambda v: jnp.split(v, [1], axis=0), x)


@pytest.mark.parametrize("cfg", [((1, -1, 1), (-1, 2, 0)), ((0, 0, 2), (2, 1, 1)),
                                 ((-2, 0, 0), (0, -3, 3))], ids=str)
def test_pad_with_runtime_value(cfg):
    check_against_jax(lambda x, v: lax.pad(x, v, cfg), X, np.float32(-2.5))
    check_against_jax(lambda x, v: lax.pad(x, v * 2, cfg), X, np.float32(np.inf))


def test_gather_in_grad():
    # integer-label cross-entropy: gather, and scatter-add in its gradient (the indexing
    # family; more in tests/frontend/test_indexing.py)
    labels = np.array([[0], [2], [1]], np.int32)
    loss = lambda x: -jnp.sum(jnp.take_along_axis(jax.nn.log_softmax(x), labels, axis=1))
    check_against_jax(jax.grad(loss), X)


def test_optax_losses():
    optax = pytest.importorskip("optax")
    onehot = np.eye(4, dtype=np.float32)[[0, 2, 3]]

    def loss(x, y):
        return (optax.softmax_cross_entropy(x * y, onehot).mean()
                + optax.sigmoid_binary_cross_entropy(x, jax.nn.sigmoid(y)).mean()
                + optax.l2_loss(x, y).sum() + optax.huber_loss(x, y).sum())

    check_against_jax(jax.grad(loss, argnums=(0, 1)), X, Y)


def test_jit_of_value_and_grad():
    f = weighted(lambda x, y: jnp.tanh(x @ y.T))
    check_against_jax(jax.value_and_grad(f, argnums=(0, 1)), X, Y)


# -- models ---------------------------------------------------------------------------------
def _mlp_params(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [{"w": (rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32),
             "b": (rng.normal(size=(b,)) * 0.1).astype(np.float32)}
            for a, b in zip(sizes[:-1], sizes[1:])]


def _onehot(labels, n):
    return np.eye(n, dtype=np.float32)[labels]


def _mlp_loss(params, x, y):
    h = x
    for layer in params[:-1]:
        h = jax.nn.gelu(h @ layer["w"] + layer["b"])
    logits = h @ params[-1]["w"] + params[-1]["b"]
    return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))


def test_mlp_gelu_cross_entropy():
    params = _mlp_params([6, 16, 16, 5])
    x = _n(8, 6)
    y = _onehot(RNG.integers(0, 5, 8), 5)
    check_against_jax(jax.grad(_mlp_loss), params, x, y)
    check_against_jax(jax.value_and_grad(_mlp_loss, argnums=(0, 1)), params, x, y)


def _attention_loss(params, x):
    """Two-head self-attention, softmax over the scores, then a squared-error loss."""
    t, d = x.shape
    h = 2
    q = (x @ params["wq"]).reshape(t, h, d // h)
    k = (x @ params["wk"]).reshape(t, h, d // h)
    v = (x @ params["wv"]).reshape(t, h, d // h)
    scores = jnp.einsum("qhd,khd->hqk", q, k) / np.sqrt(d // h).astype(np.float32)
    att = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("hqk,khd->qhd", att, v).reshape(t, d) @ params["wo"]
    return jnp.mean((out - x) ** 2)


def test_attention_two_heads():
    d = 8
    params = {k: _n(d, d, scale=0.4) for k in ("wq", "wk", "wv", "wo")}
    check_against_jax(jax.grad(_attention_loss, argnums=(0, 1)), params, _n(5, d))


def test_flax_mlp_with_layernorm():
    nn = pytest.importorskip("flax.linen")

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.Dense(16)(x)
            x = nn.LayerNorm()(x)
            x = nn.gelu(x)
            return nn.Dense(3)(x)

    model = MLP()
    x = _n(4, 5)
    y = _onehot(np.array([0, 2, 1, 2]), 3)
    params = jax.tree_util.tree_map(np.asarray, model.init(jax.random.PRNGKey(0), x))

    def loss(params, x, y):
        logits = model.apply(params, x)
        return -jnp.mean(jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))

    check_against_jax(jax.grad(loss), params, x, y)


def test_equinox_mlp():
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(in_size=5, out_size=2, width_size=12, depth=2, activation=jax.nn.relu,
                     key=jax.random.PRNGKey(1))
    params, static = eqx.partition(mlp, eqx.is_array)
    params = jax.tree_util.tree_map(np.asarray, params)
    x, y = _n(6, 5), _n(6, 2)

    def loss(params, x, y):
        model = eqx.combine(params, static)
        pred = jax.vmap(model)(x)
        return jnp.mean((pred - y) ** 2)

    check_against_jax(jax.grad(loss), params, x, y)
