"""Issue 5's "done when": a flax CNN classifier (strided conv, depthwise conv, GroupNorm,
max-pool and avg-pool, softmax cross-entropy via take_along_axis) and a small transformer
language model (embedding, causal attention, RMSNorm, tied output projection,
cross-entropy) compile with coreml_jit (forward, and JAX's own gradient jaxpr) and
coreml_grad, pass coremltools' loader and match JAX on the reference backend.

Tolerance: the fused norm backward evaluates the same derivative as JAX's decomposed one
in a different order (see test_grad_models.py): rtol 1e-4 / atol 1e-5 for gradients;
forward values FP32_TOL."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
from helpers import FP32_TOL, assert_tree_close
from models import CNN

GRAD_TOL = dict(rtol=1e-4, atol=1e-5)


def xent(logits, labels):
    """Softmax cross-entropy with integer labels, via take_along_axis."""
    lp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(lp, labels[..., None], axis=-1))


class TinyLM(nn.Module):
    vocab: int = 17
    d: int = 16
    heads: int = 2
    layers: int = 2

    @nn.compact
    def __call__(self, tokens):
        t = tokens.shape[-1]
        emb = nn.Embed(self.vocab, self.d)
        pos = self.param("pos", nn.initializers.normal(0.02), (t, self.d))
        h = emb(tokens) + pos
        mask = nn.make_causal_mask(tokens)
        for _ in range(self.layers):
            a = nn.MultiHeadDotProductAttention(num_heads=self.heads)(
                nn.RMSNorm()(h), mask=mask)
            h = h + a
            h = h + nn.Dense(self.d)(nn.gelu(nn.Dense(2 * self.d)(nn.RMSNorm()(h))))
        return emb.attend(nn.RMSNorm()(h))  # tied output projection


def _compiled(fn, *args):
    c = fn.lower(*args).compile()
    c.validate()  # coremltools' loader
    return c(*args)


def _check(loss, params, *batch):
    """The loss and its gradient through coreml_jit (the gradient as JAX's own AD jaxpr),
    and coreml_grad, all loader-validated, against one jax.jit(jax.value_and_grad) (eager
    flax would compile op by op)."""
    args = (params,) + batch
    ref = dict(backend="reference")
    value, grads = jax.jit(jax.value_and_grad(loss))(*args)
    assert_tree_close(_compiled(rlxjax.coreml_jit(loss, **ref), *args), value, **FP32_TOL)
    assert_tree_close(_compiled(rlxjax.coreml_jit(jax.grad(loss), **ref), *args), grads,
                      **GRAD_TOL)
    assert_tree_close(_compiled(rlxjax.coreml_grad(loss, **ref), *args), grads, **GRAD_TOL)


def test_flax_cnn_classifier():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    y = np.array([3, 1], np.int32)
    model = CNN()
    params = jax.jit(model.init)(jax.random.PRNGKey(0), x)
    _check(lambda p, x, y: xent(model.apply(p, x), y), params, x, y)


# ~10 s; transformer training stays in the default run (tests/training/test_train_step.py, tests/ir/test_ir_text.py)
@pytest.mark.slow
def test_flax_transformer_lm():
    rng = np.random.default_rng(1)
    model = TinyLM()
    tokens = rng.integers(0, model.vocab, size=(2, 9)).astype(np.int32)
    params = jax.jit(model.init)(jax.random.PRNGKey(1), tokens[:, :-1])

    def loss(p, tokens):
        return xent(model.apply(p, tokens[:, :-1]), tokens[:, 1:])

    _check(loss, params, tokens)
