"""Small models shared by the model-level tests and the benchmarks (flax.linen)."""
from __future__ import annotations

from collections.abc import Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import rlxjax.nn as rnn


def cross_entropy(logits, labels_onehot):
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * labels_onehot, axis=-1))


class MLP(nn.Module):
    """LayerNorm -> Dense -> gelu -> Dense."""
    hidden: int = 32
    classes: int = 4

    @nn.compact
    def __call__(self, x):
        x = nn.LayerNorm()(x)
        x = nn.gelu(nn.Dense(self.hidden)(x))
        return nn.Dense(self.classes)(x)


class TransformerBlock(nn.Module):
    """Pre-norm block: RMSNorm -> multi-head self-attention -> residual -> LayerNorm ->
    MLP -> residual."""
    d: int = 32
    heads: int = 4

    @nn.compact
    def __call__(self, x):
        h = nn.RMSNorm()(x)
        b, t, d = h.shape
        # No bias on q/k/v: the key bias gets an exactly zero gradient (softmax is shift
        # invariant), which adam would turn into steps driven by rounding noise alone.
        qkv = nn.Dense(3 * d, use_bias=False)(h).reshape(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        att = jax.nn.softmax(jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(d // self.heads))
        o = jnp.einsum("bhts,bshd->bthd", att, v).reshape(b, t, d)
        x = x + nn.Dense(d)(o)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(d)(nn.gelu(nn.Dense(2 * d)(h)))


class ChannelNet(nn.Module):
    """NHWC feature maps: GroupNorm -> per-pixel Dense -> gelu -> GroupNorm -> pool ->
    classifier (convolutions arrive with the primitive-coverage work)."""
    channels: int = 8
    classes: int = 4

    @nn.compact
    def __call__(self, x):
        x = nn.GroupNorm(num_groups=2)(nn.Dense(self.channels)(x))
        x = nn.gelu(x)
        x = nn.GroupNorm(num_groups=4)(nn.Dense(self.channels)(x))
        return nn.Dense(self.classes)(x.mean(axis=(1, 2)))


class CNN(nn.Module):
    """NHWC classifier: strided conv -> GroupNorm -> gelu -> depthwise conv -> GroupNorm
    -> avg-pool -> max-pool -> Dense."""
    channels: int = 8
    classes: int = 4

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(self.channels, (3, 3), strides=(2, 2), padding="SAME")(x)
        x = nn.gelu(nn.GroupNorm(num_groups=2)(x))
        x = nn.Conv(self.channels, (3, 3), feature_group_count=self.channels)(x)
        x = nn.GroupNorm(num_groups=4)(x)
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = nn.max_pool(x, (2, 2), strides=(1, 1), padding="SAME")
        return nn.Dense(self.classes)(x.reshape(x.shape[0], -1))


class DiTBlock(nn.Module):
    """adaLN-Zero: conditioning -> (shift, scale, gate) x 2; attention-free token mixer."""
    d: int = 32

    @nn.compact
    def __call__(self, x, c):
        mod = nn.Dense(6 * self.d)(jax.nn.silu(c))[:, None, :]
        s1, sc1, g1, s2, sc2, g2 = jnp.split(mod, 6, axis=-1)
        h = rnn.ada_layer_norm(x, sc1, s1, kind="layer")
        x = rnn.gated_residual(x, nn.Dense(self.d)(h), g1)
        h = rnn.ada_layer_norm(x, sc2, s2, kind="rms")
        return rnn.gated_residual(x, nn.Dense(self.d)(nn.gelu(nn.Dense(2 * self.d)(h))), g2)


class BNNet(nn.Module):
    """Dense -> BatchNorm (training mode, batch statistics) -> relu -> Dense."""

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Dense(16)(x)
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9)(x)
        return nn.Dense(4)(jax.nn.relu(x))


def rng_data(seed, *shapes):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(np.float32) for s in shapes]


def onehot(seed, n, classes):
    r = np.random.default_rng(seed)
    return np.eye(classes, dtype=np.float32)[r.integers(0, classes, n)]


def _mlp_layernorm():
    x, = rng_data(0, (8, 16))
    y = onehot(1, 8, 4)
    m = MLP()
    return (lambda p, x, y: cross_entropy(m.apply(p, x), y),
            m.init(jax.random.PRNGKey(0), x), (x, y))


def _transformer_block():
    xt, = rng_data(2, (2, 8, 32))
    tb = TransformerBlock()
    return (lambda p, x: jnp.mean(tb.apply(p, x) ** 2), tb.init(jax.random.PRNGKey(1), xt),
            (xt,))


def _channelnet_groupnorm():
    xc, = rng_data(3, (2, 4, 4, 3))
    cn = ChannelNet()
    yc = onehot(4, 2, 4)
    return (lambda p, x, y: cross_entropy(cn.apply(p, x), y),
            cn.init(jax.random.PRNGKey(2), xc), (xc, yc))


def _cnn_groupnorm():
    xi, = rng_data(8, (2, 8, 8, 3))
    cnn = CNN()
    yc = onehot(4, 2, 4)
    return (lambda p, x, y: cross_entropy(cnn.apply(p, x), y),
            cnn.init(jax.random.PRNGKey(5), xi), (xi, yc))


def _dit_block():
    xd, cd = rng_data(5, (2, 6, 32), (2, 16))
    dit = DiTBlock()
    return (lambda p, x, c: jnp.mean(dit.apply(p, x, c) ** 2),
            dit.init(jax.random.PRNGKey(3), xd, cd), (xd, cd))


def _batchnorm_train():
    xb, = rng_data(6, (8, 5))
    yb = onehot(7, 8, 4)
    bn = BNNet()
    vb = bn.init(jax.random.PRNGKey(4), xb)

    def bn_loss(params, stats, x, y):
        logits, upd = bn.apply({"params": params, "batch_stats": stats}, x,
                               mutable=["batch_stats"])
        return cross_entropy(logits, y), upd["batch_stats"]

    return (bn_loss, vb["params"], (vb["batch_stats"], xb, yb))


_WORKLOAD_BUILDERS = {"mlp_layernorm": _mlp_layernorm, "transformer_block": _transformer_block,
                      "channelnet_groupnorm": _channelnet_groupnorm,
                      "cnn_groupnorm": _cnn_groupnorm, "dit_block": _dit_block,
                      "batchnorm_train": _batchnorm_train}


class _Workloads(Mapping):
    """The workloads by name, each model built (flax init: XLA compiles) when first read.

    Test modules name the workloads at import (``parametrize(sorted(workloads()))``) and
    pytest imports every module in every xdist worker to collect it: building all six models
    there cost each worker seconds per importing module, for tests it then deselected."""

    def __init__(self):
        self._built = {}

    def __getitem__(self, name):
        if name not in self._built:
            self._built[name] = _WORKLOAD_BUILDERS[name]()
        loss, params, batch = self._built[name]
        # fresh containers and numpy copies: a test that edits its copy changes no other's
        fresh = jax.tree_util.tree_map(
            lambda a: a.copy() if isinstance(a, np.ndarray) else a, (params, batch))
        return (loss, *fresh)

    def __iter__(self):
        return iter(_WORKLOAD_BUILDERS)

    def __len__(self):
        return len(_WORKLOAD_BUILDERS)


_WORKLOADS = _Workloads()


def workloads():
    """name -> (loss(params, *batch), params, batch): the models above as training losses,
    built once per process on first read; each read gets its own containers and numpy
    copies (the jax arrays are immutable; the loss closures are pure)."""
    return _WORKLOADS


# -- a causal LM with a KV cache, as flax writes a decoder (tests/models/test_kv_cache.py,
# bench/kv_cache.py): nn.MultiHeadDotProductAttention(decode=True) keeps cached_key /
# cached_value / cache_index in the "cache" collection, the position embedding its own
# index (flax's lm1b AddPositionEmbs with decode)
KV_LM_VOCAB, KV_LM_MAX_LEN = 32, 24


class KVPosEmb(nn.Module):
    decode: bool = False

    @nn.compact
    def __call__(self, x):
        pe = self.param("pos", nn.initializers.normal(0.02), (KV_LM_MAX_LEN, x.shape[-1]))
        if not self.decode:
            return x + pe[None, :x.shape[1]]
        is_init = self.has_variable("cache", "index")
        idx = self.variable("cache", "index", lambda: jnp.array(0, jnp.int32))
        if not is_init:
            return x + pe[None, :x.shape[1]]
        i = idx.value
        idx.value = i + x.shape[1]
        return x + jax.lax.dynamic_slice_in_dim(pe, i, x.shape[1])[None]


class KVBlock(nn.Module):
    heads: int = 2
    decode: bool = False

    @nn.compact
    def __call__(self, x):
        mask = None if self.decode else nn.make_causal_mask(jnp.ones(x.shape[:2]))
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads, decode=self.decode)(
            h, mask=mask)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(x.shape[-1])(nn.gelu(nn.Dense(4 * x.shape[-1])(h)))


class KVLM(nn.Module):
    """Token + position embeddings, ``layers`` pre-norm blocks, a LayerNorm and the head."""
    width: int = 32
    layers: int = 2
    decode: bool = False

    @nn.compact
    def __call__(self, tokens):
        x = KVPosEmb(self.decode)(nn.Embed(KV_LM_VOCAB, self.width)(tokens))
        for _ in range(self.layers):
            x = KVBlock(decode=self.decode)(x)
        return nn.Dense(KV_LM_VOCAB)(nn.LayerNorm()(x))


def kv_lm_init(model, decoder):
    """(params, the empty cache) of ``model`` / its ``decode=True`` twin."""
    tokens = jnp.zeros((1, KV_LM_MAX_LEN), jnp.int32)
    return (model.init(jax.random.key(0), tokens)["params"],
            decoder.init(jax.random.key(0), tokens)["cache"])


def kv_lm_decode(decoder, params, cache, tok):
    """One token [1, 1] -> (its logits [1, V], the new cache)."""
    logits, v = decoder.apply({"params": params, "cache": cache}, tok, mutable=["cache"])
    return logits[:, -1], v["cache"]


def kv_lm_prefill(decoder, params, cache, prompt):
    """The prompt [1, n] through the one-token step (a scan) -> (last logits, cache)."""
    def body(c, t):
        logits, c = kv_lm_decode(decoder, params, c, t.reshape(1, 1))
        return c, logits

    cache, logits = jax.lax.scan(body, cache, prompt[0])
    return logits[-1], cache
