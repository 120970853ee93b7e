"""Issue 17, deliverable 6: flax's and equinox's own models with their randomness as
written - a linen CNN with ``nn.Dropout``, a VAE with ``jax.random.normal`` (flax's
examples/vae, small), ``nn.RNN`` without an initial carry (and one whose cell drops out:
draws inside its scan), an nnx model with ``nnx.Dropout(rngs=...)``, an equinox MLP with
``eqx.nn.Dropout``, seq2seq-style ``jax.random.categorical`` sampling.

Every model's loss is ``loss(params, rng, *batch) -> (loss, next rng)``: a key split each
step (the nnx model: its RNG state, advanced by the model), so one training loop drives
them all. Oracles: JAX + optax (``jax.jit`` of ``jax.value_and_grad``) on the same keys,
20 steps equal to rtol 1e-4; in the default mode the deterministic model (dead
randomness) equals ``jax.jit`` and the training one is an error naming the draw.

The modes are a parameter (``RANDOM_MODES``); ``"device"`` (the same distributions, not
JAX's numbers) has its own oracles in test_random_models_device.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import flax.linen as nn
from flax import nnx

import rlxjax
from helpers import TEST_BACKEND, assert_tree_close
from rlxjax.errors import UnsupportedPrimitiveError

optax = pytest.importorskip("optax")
eqx = pytest.importorskip("equinox")

F32 = np.float32
RANDOM_MODES = ["inputs"]   # "device": test_random_models_device.py (its own oracles)
STEPS = 20


def _data(seed, *shape):
    return np.random.default_rng(seed).normal(size=shape).astype(F32)


@dataclass
class Case:
    params: Any
    loss: Callable                 # (params, rng, *batch, train=True) -> (loss, next rng)
    batch: Tuple
    rng: Any                       # the first step's rng (a key, or nnx RNG state)
    draw: Optional[str]            # the jax.random function the training loss calls


def _keyed(apply):
    """``apply(params, key, *batch, train)`` -> a loss splitting its key each step."""
    def loss(params, rng, *batch, train=True):
        key, nxt = jax.random.split(rng)
        return apply(params, key, *batch, train), nxt
    return loss


# -- 1. flax linen CNN with nn.Dropout -----------------------------------------------------
class DropoutCNN(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.relu(nn.Conv(4, (3, 3))(x))
        x = nn.Dropout(0.25, deterministic=not train)(x)
        x = x.reshape((x.shape[0], -1))
        return nn.Dense(3)(x)


def linen_cnn() -> Case:
    model = DropoutCNN()
    x, y = _data(1, 4, 6, 6, 2), jax.nn.one_hot(np.arange(4) % 3, 3)
    params = model.init(jax.random.key(0), x, False)

    def apply(params, key, x, y, train):
        logits = model.apply(params, x, train, rngs={"dropout": key})
        return optax.softmax_cross_entropy(logits, y).mean()

    return Case(params, _keyed(apply), (x, np.asarray(y)), jax.random.key(10),
                "jax.random.bernoulli")


# -- 2. VAE (flax examples/vae, small) ------------------------------------------------------
class Encoder(nn.Module):
    latents: int

    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(16, name="fc1")(x))
        return nn.Dense(self.latents, name="fc2_mean")(x), \
            nn.Dense(self.latents, name="fc2_logvar")(x)


class Decoder(nn.Module):
    @nn.compact
    def __call__(self, z):
        return nn.Dense(12, name="fc2")(nn.relu(nn.Dense(16, name="fc1")(z)))


def reparameterize(rng, mean, logvar):  # flax examples/vae/models.py
    std = jnp.exp(0.5 * logvar)
    eps = jax.random.normal(rng, logvar.shape)
    return mean + eps * std


class VAE(nn.Module):
    latents: int = 3

    def setup(self):
        self.encoder = Encoder(self.latents)
        self.decoder = Decoder()

    def __call__(self, x, z_rng, train: bool):
        mean, logvar = self.encoder(x)
        z = reparameterize(z_rng, mean, logvar) if train else mean
        return self.decoder(z), mean, logvar


def vae() -> Case:
    model = VAE()
    x = (np.random.default_rng(2).uniform(size=(8, 12)) > 0.5).astype(F32)
    params = model.init(jax.random.key(0), x, jax.random.key(1), True)

    def apply(params, key, x, train):  # flax examples/vae/train.py's loss
        logits, mean, logvar = model.apply(params, x, key, train)
        bce = -jnp.sum(x * jax.nn.log_sigmoid(logits) + (1 - x) * jax.nn.log_sigmoid(-logits),
                       axis=-1)
        kld = -0.5 * jnp.sum(1 + logvar - jnp.square(mean) - jnp.exp(logvar), axis=-1)
        return jnp.mean(bce + kld)

    return Case(params, _keyed(apply), (x,), jax.random.key(20), "jax.random.normal")


# -- 3. nn.RNN without an initial carry (its zero carry comes from a key: dead) ----------------
def linen_rnn() -> Case:
    model = nn.Sequential([nn.RNN(nn.LSTMCell(6)), nn.Dense(2)])
    x, y = _data(3, 2, 5, 3), _data(4, 2, 5, 2)
    params = model.init(jax.random.key(0), x)

    def apply(params, key, x, y, train):
        return jnp.mean((model.apply(params, x) - y) ** 2)

    return Case(params, _keyed(apply), (x, y), jax.random.key(30), None)


# -- 3b. nn.RNN whose cell drops out: a draw each step, inside the scan ----------------------
class DropoutLSTMCell(nn.Module):
    features: int = 6
    deterministic: bool = False

    @nn.compact
    def __call__(self, carry, x):
        carry, y = nn.LSTMCell(self.features)(carry, x)
        return carry, nn.Dropout(0.3, deterministic=self.deterministic)(y)

    def initialize_carry(self, rng, shape):
        return nn.LSTMCell(self.features, parent=None).initialize_carry(rng, shape)

    @property
    def num_feature_axes(self):
        return 1


class DropoutRNN(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool):
        cell = DropoutLSTMCell(deterministic=not train)
        x = nn.RNN(cell, split_rngs={"params": False, "dropout": True})(x)
        return nn.Dense(2)(x)


def linen_rnn_dropout() -> Case:
    model = DropoutRNN()
    x, y = _data(3, 2, 5, 3), _data(4, 2, 5, 2)
    params = model.init(jax.random.key(0), x, False)

    def apply(params, key, x, y, train):
        return jnp.mean((model.apply(params, x, train, rngs={"dropout": key}) - y) ** 2)

    return Case(params, _keyed(apply), (x, y), jax.random.key(35), "jax.random.bernoulli")


# -- 4. nnx model with nnx.Dropout(rngs=...) ---------------------------------------------------
class NnxMLP(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(6, 12, rngs=rngs)
        self.drop = nnx.Dropout(0.4, rngs=rngs)
        self.l2 = nnx.Linear(12, 2, rngs=rngs)

    def __call__(self, x, train: bool):
        return self.l2(self.drop(nnx.relu(self.l1(x)), deterministic=not train))


def nnx_mlp(dropout_seed: int = 40) -> Case:
    graphdef, params, rng_state = nnx.split(NnxMLP(nnx.Rngs(0, dropout=dropout_seed)),
                                            nnx.Param,
                                            nnx.RngState)
    x, y = _data(5, 8, 6), _data(6, 8, 2)

    def loss(params, rng_state, x, y, train=True):
        m = nnx.merge(graphdef, params, rng_state, copy=True)
        return jnp.mean((m(x, train) - y) ** 2), nnx.state(m, nnx.RngState)

    return Case(params, loss, (x, y), rng_state, "jax.random.bernoulli")


# -- 5. equinox MLP with eqx.nn.Dropout -----------------------------------------------------
class EqxMLP(eqx.Module):
    l1: eqx.nn.Linear
    drop: eqx.nn.Dropout
    l2: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.l1 = eqx.nn.Linear(6, 12, key=k1)
        self.drop = eqx.nn.Dropout(0.3)
        self.l2 = eqx.nn.Linear(12, 2, key=k2)

    def __call__(self, x, key, train):
        h = jax.nn.relu(self.l1(x))
        return self.l2(self.drop(h, key=key, inference=not train))


def eqx_mlp() -> Case:
    model = EqxMLP(jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_inexact_array)
    x, y = _data(7, 8, 6), _data(8, 8, 2)

    def apply(params, key, x, y, train):
        m = eqx.combine(params, static)
        keys = jax.random.split(key, x.shape[0])
        out = jax.vmap(lambda x, k: m(x, k, train))(x, keys)
        return jnp.mean((out - y) ** 2)

    return Case(params, _keyed(apply), (x, y), jax.random.key(50), "jax.random.bernoulli")


# -- 6. seq2seq-style categorical sampling ------------------------------------------------------
class Seq2SeqStep(nn.Module):
    """Two decoder steps: the second reads the token the first one sampled (flax's
    examples/seq2seq decodes with jax.random.categorical when sampling)."""

    vocab: int = 5

    @nn.compact
    def __call__(self, x, key, train: bool):
        embed = nn.Embed(self.vocab, 6)
        cell = nn.Dense(6)
        head = nn.Dense(self.vocab)
        h = jnp.tanh(cell(x))
        logits1 = head(h)
        tok = jax.random.categorical(key, logits1) if train else jnp.argmax(logits1, -1)
        h = jnp.tanh(cell(h + embed(tok)))
        return logits1, head(h)


def seq2seq() -> Case:
    model = Seq2SeqStep()
    x = _data(9, 4, 6)
    y = jax.nn.one_hot(np.array([1, 3, 0, 2]), 5)
    params = model.init(jax.random.key(0), x, jax.random.key(1), True)

    def apply(params, key, x, y, train):
        l1, l2 = model.apply(params, x, key, train)
        return (optax.softmax_cross_entropy(l1, y) + optax.softmax_cross_entropy(l2, y)).mean()

    return Case(params, _keyed(apply), (x, np.asarray(y)), jax.random.key(60),
                "jax.random.categorical")


MODELS = {"linen_cnn": linen_cnn, "vae": vae, "linen_rnn": linen_rnn,
          "linen_rnn_dropout": linen_rnn_dropout, "nnx": nnx_mlp, "equinox": eqx_mlp,
          "seq2seq": seq2seq}
# the 20-step training runs are slow (~10-17 s each on the reference backend); linen
# dropout and nnx training run by default in test_random_inputs.py / test_random_state.py
FAST_TRAIN: set = set()


def _same_rng(got, want):
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        if jax.dtypes.issubdtype(b.dtype, jax.dtypes.prng_key):
            a, b = jax.random.key_data(a), jax.random.key_data(b)
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# -- random="inputs": differentiates and trains as JAX + optax on the same keys ---------------
@pytest.mark.parametrize("random", RANDOM_MODES)
@pytest.mark.parametrize("name", [n if n in FAST_TRAIN else pytest.param(
    n, marks=pytest.mark.slow) for n in MODELS])
def test_trains_20_steps_as_jax_and_optax(name, random):
    case = MODELS[name]()
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(case.loss, opt, has_aux=True, backend=TEST_BACKEND,
                                    random=random)
    state = step.init(case.params)

    @jax.jit
    def jax_step(p, s, rng):
        (v, rng), g = jax.value_and_grad(case.loss, has_aux=True)(p, rng, *case.batch)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, rng, v

    p, s = case.params, opt.init(case.params)
    ours, theirs = case.rng, case.rng
    got, want = [], []
    for _ in range(STEPS):
        state, v, ours = step(state, ours, *case.batch)
        p, s, theirs, w = jax_step(p, s, theirs)
        got.append(float(v))
        want.append(float(w))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    _same_rng(ours, theirs)
    assert_tree_close(jax.tree_util.tree_map(np.asarray, step.params(state)),
                      jax.tree_util.tree_map(np.asarray, p), rtol=1e-4, atol=1e-5)
    assert len(step._programs) == 1  # new keys / counters: the same program


@pytest.mark.slow
@pytest.mark.parametrize("random", RANDOM_MODES)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_gradient_equals_jax(name, random):
    case = MODELS[name]()
    (l1, r1), g1 = rlxjax.coreml_value_and_grad(case.loss, has_aux=True, random=random,
                                                backend=TEST_BACKEND)(
        case.params, case.rng, *case.batch)
    (l2, r2), g2 = jax.jit(jax.value_and_grad(case.loss, has_aux=True))(
        case.params, case.rng, *case.batch)
    assert_tree_close((l1, g1), (l2, g2), rtol=1e-4, atol=1e-5)
    _same_rng(r1, r2)


# -- the default mode: dead randomness compiles, live randomness is a clear error ------------
# (dead randomness of linen dropout, nn.RNN, nnx and equinox runs by default in
# test_dead_random.py: here only the seq2seq sampler's, the rest with -m slow)
@pytest.mark.parametrize("name", [n if n == "seq2seq" else pytest.param(
    n, marks=pytest.mark.slow) for n in sorted(MODELS)])
def test_default_mode_deterministic_compiles_and_training_is_named(name):
    case = MODELS[name]()

    def evaluate(params, rng, *batch):  # the rng is passed, nothing live reads it
        return case.loss(params, rng, *batch, train=False)[0]

    got = rlxjax.coreml_jit(evaluate, backend=TEST_BACKEND)(case.params, case.rng, *case.batch)
    assert_tree_close(got, jax.jit(evaluate)(case.params, case.rng, *case.batch),
                      rtol=1e-5, atol=1e-6)
    train = lambda p, r, *b: case.loss(p, r, *b, train=True)[0]  # noqa: E731
    if case.draw is None:  # nothing random in training either
        return
    with pytest.raises(UnsupportedPrimitiveError, match=rf"{case.draw}.*test_random_models"
                       r"\.py.*random='inputs'"):
        rlxjax.coreml_grad(train, backend=TEST_BACKEND).lower(case.params, case.rng,
                                                              *case.batch)
