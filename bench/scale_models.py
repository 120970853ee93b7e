"""The real-size models of ``bench/scale.py`` (flax.linen), each with its inputs and loss.

``MODELS[name]()`` returns ``(apply, params, fwd_args, loss, batch)``: ``apply(params,
*fwd_args)`` is the forward pass, ``loss(params, *batch)`` the scalar training loss (with
``has_aux`` where the model updates BatchNorm statistics). The shapes follow the published
models (GPT-2 small, ViT-S/16, ResNet-18); the UNet is a small diffusion-style one.
Parameters are made with ``jax.eval_shape`` by default (``concrete=True`` initialises them):
compiling needs their shapes only.
"""
from __future__ import annotations

from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


def _params(model, concrete, *args):
    init = lambda: model.init(jax.random.PRNGKey(0), *args)  # noqa: E731
    if concrete:
        return jax.tree_util.tree_map(np.asarray, init())
    return jax.eval_shape(init)


def _xent_onehot(logits, onehot):
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * onehot, axis=-1))


# -- GPT-2 small: 12 layers, d 768, 12 heads, vocab 50257, 1024 positions ----------------

class GPTBlock(nn.Module):
    d: int
    heads: int

    @nn.compact
    def __call__(self, x):
        t = x.shape[1]
        mask = nn.make_causal_mask(jnp.ones((x.shape[0], t), jnp.int32))
        h = nn.LayerNorm(epsilon=1e-5)(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h, mask=mask)
        h = nn.LayerNorm(epsilon=1e-5)(x)
        h = nn.gelu(nn.Dense(4 * self.d)(h), approximate=True)
        return x + nn.Dense(self.d)(h)


class GPT2(nn.Module):
    vocab: int = 50257
    positions: int = 1024
    d: int = 768
    layers: int = 12
    heads: int = 12
    remat: bool = False  # each block under nn.remat (jax.checkpoint, bench/memory.py)

    @nn.compact
    def __call__(self, tokens):
        wte = nn.Embed(self.vocab, self.d)
        wpe = self.param("wpe", nn.initializers.normal(0.01), (self.positions, self.d))
        x = wte(tokens) + wpe[None, :tokens.shape[1]]
        block = nn.remat(GPTBlock) if self.remat else GPTBlock
        for _ in range(self.layers):
            x = block(self.d, self.heads)(x)
        return wte.attend(nn.LayerNorm(epsilon=1e-5)(x))  # tied output embedding


def gpt2_small(concrete=False, batch=1, seq=128, remat=False, layers=12):
    model = GPT2(remat=remat, layers=layers)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model.vocab, (batch, seq)).astype(np.int32)
    targets = rng.integers(0, model.vocab, (batch, seq)).astype(np.int32)
    params = _params(model, concrete, tokens)

    def loss(p, tokens, targets):  # one-hot targets: the peer cannot convert the gradient
        # of take_along_axis ("Scatter batching index is not supported")
        return _xent_onehot(model.apply(p, tokens), jax.nn.one_hot(targets, model.vocab))

    return model.apply, params, (tokens,), loss, (tokens, targets)


# -- ViT-S/16: 224x224, patch 16, d 384, 12 layers, 6 heads, MLP 1536 ---------------------

class ViTBlock(nn.Module):
    d: int
    heads: int

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(self.d)(nn.gelu(nn.Dense(4 * self.d)(h), approximate=False))


class ViT(nn.Module):
    patch: int = 16
    d: int = 384
    layers: int = 12
    heads: int = 6
    classes: int = 1000

    @nn.compact
    def __call__(self, images):
        x = nn.Conv(self.d, (self.patch, self.patch), strides=self.patch, padding="VALID")(images)
        b, h, w, c = x.shape
        x = x.reshape(b, h * w, c)
        cls = self.param("cls", nn.initializers.zeros, (1, 1, c))
        x = jnp.concatenate([jnp.broadcast_to(cls, (b, 1, c)), x], axis=1)
        x = x + self.param("pos", nn.initializers.normal(0.02), (1, h * w + 1, c))
        for _ in range(self.layers):
            x = ViTBlock(self.d, self.heads)(x)
        return nn.Dense(self.classes)(nn.LayerNorm()(x)[:, 0])


def vit_s16(concrete=False, batch=1):
    model = ViT()
    rng = np.random.default_rng(1)
    images = rng.standard_normal((batch, 224, 224, 3)).astype(np.float32)
    labels = np.eye(model.classes, dtype=np.float32)[rng.integers(0, model.classes, batch)]
    params = _params(model, concrete, images)

    def loss(p, images, labels):
        return _xent_onehot(model.apply(p, images), labels)

    return model.apply, params, (images,), loss, (images, labels)


# -- ResNet-18: BatchNorm in training mode (batch statistics, running averages updated) --

class BasicBlock(nn.Module):
    channels: int
    strides: int = 1

    @nn.compact
    def __call__(self, x):
        bn = lambda: nn.BatchNorm(use_running_average=False, momentum=0.9)  # noqa: E731
        y = nn.Conv(self.channels, (3, 3), self.strides, padding=1, use_bias=False)(x)
        y = nn.relu(bn()(y))
        y = bn()(nn.Conv(self.channels, (3, 3), padding=1, use_bias=False)(y))
        if x.shape != y.shape:
            x = bn()(nn.Conv(self.channels, (1, 1), self.strides, use_bias=False)(x))
        return nn.relu(x + y)


class ResNet18(nn.Module):
    stages: Sequence[int] = (2, 2, 2, 2)
    classes: int = 1000

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(64, (7, 7), 2, padding=3, use_bias=False)(x)
        x = nn.relu(nn.BatchNorm(use_running_average=False, momentum=0.9)(x))
        x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for i, n in enumerate(self.stages):
            for j in range(n):
                x = BasicBlock(64 * 2 ** i, strides=2 if i > 0 and j == 0 else 1)(x)
        return nn.Dense(self.classes)(jnp.mean(x, axis=(1, 2)))


def resnet18(concrete=False, batch=2):
    model = ResNet18()
    rng = np.random.default_rng(2)
    images = rng.standard_normal((batch, 224, 224, 3)).astype(np.float32)
    labels = np.eye(model.classes, dtype=np.float32)[rng.integers(0, model.classes, batch)]
    variables = _params(model, concrete, images)
    params, stats = variables["params"], variables["batch_stats"]

    def apply(params, stats, images):
        return model.apply({"params": params, "batch_stats": stats}, images,
                           mutable=["batch_stats"])

    def loss(params, stats, images, labels):
        logits, upd = apply(params, stats, images)
        return _xent_onehot(logits, labels), upd["batch_stats"]

    return apply, params, (stats, images), loss, (stats, images, labels)


# -- a small UNet: GroupNorm, strided downsampling, nearest upsampling, skips ------------

class ResBlock(nn.Module):
    channels: int

    @nn.compact
    def __call__(self, x):
        h = nn.Conv(self.channels, (3, 3))(nn.silu(nn.GroupNorm(num_groups=8)(x)))
        h = nn.Conv(self.channels, (3, 3))(nn.silu(nn.GroupNorm(num_groups=8)(h)))
        if x.shape[-1] != self.channels:
            x = nn.Conv(self.channels, (1, 1))(x)
        return x + h


class UNet(nn.Module):
    widths: Sequence[int] = (32, 64, 128)

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.widths[0], (3, 3))(x)
        skips = []
        for i, w in enumerate(self.widths):
            x = ResBlock(w)(x)
            skips.append(x)
            if i < len(self.widths) - 1:
                x = nn.Conv(w, (3, 3), strides=2)(x)
        x = ResBlock(self.widths[-1])(x)
        for i, w in reversed(list(enumerate(self.widths))):
            x = ResBlock(w)(jnp.concatenate([x, skips[i]], axis=-1))
            if i > 0:
                b, h, wd, c = x.shape
                x = jax.image.resize(x, (b, 2 * h, 2 * wd, c), method="nearest")
        x = nn.silu(nn.GroupNorm(num_groups=8)(x))
        return nn.Conv(3, (3, 3))(x)


def unet_small(concrete=False, batch=2, size=64):
    model = UNet()
    rng = np.random.default_rng(3)
    noisy = rng.standard_normal((batch, size, size, 3)).astype(np.float32)
    target = rng.standard_normal((batch, size, size, 3)).astype(np.float32)
    params = _params(model, concrete, noisy)

    def loss(p, noisy, target):
        return jnp.mean((model.apply(p, noisy) - target) ** 2)

    return model.apply, params, (noisy,), loss, (noisy, target)


#: name -> (builder, has_aux of the loss)
MODELS = {
    "gpt2-small": (gpt2_small, False),
    "vit-s16": (vit_s16, False),
    "resnet18": (resnet18, True),
    "unet-small": (unet_small, False),
}
