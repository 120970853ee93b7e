"""Llama-style decoders at the published shapes of the small language models people
fine-tune on the device, in flax.linen, for ``bench/llm_scale.py`` and the LLM tests.

The architecture is the common one of SmolLM2, Qwen2.5, Llama-3.2 and (with a gated GELU)
Gemma-3: RMSNorm before attention and MLP, rotary position embedding (RoPE, half-split as in
Llama), grouped-query attention (``kv_heads`` key/value heads shared by ``heads`` query
heads), a gated MLP (SwiGLU: ``down(act(gate(x)) * up(x))``), a final RMSNorm and the output
projection tied to the input embedding. Weights are random (the shapes are what matter for
compile time and memory); ``layers=`` gives a shallower model of the same width for tests.

``SHAPES[name]`` is the published configuration. ``build(name, ...)`` returns
``(model, base, tokens)``: the flax module, its parameters (numpy, fp32; or shapes only with
``concrete=False``) and a batch of ``batch x (seq + 1)`` token ids. ``lora_loss(model)`` is the
next-token cross-entropy of the LoRA tree ``{"base", "lora"}`` of ``rlxjax.lora``, and
``lora_select`` puts the adapters on the q and v projections.
"""
from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class Shape:
    vocab: int
    d: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    head_dim: int = 0          # 0: d // heads
    act: str = "silu"          # "silu" (SwiGLU) or "gelu_tanh" (Gemma's GeGLU)
    rope_theta: float = 10000.0
    eps: float = 1e-6

    @property
    def hd(self) -> int:
        return self.head_dim or self.d // self.heads


SHAPES = {
    # HuggingFaceTB/SmolLM2-135M
    "smollm2-135m": Shape(vocab=49152, d=576, layers=30, heads=9, kv_heads=3, ffn=1536,
                          rope_theta=100000.0, eps=1e-5),
    # Qwen/Qwen2.5-0.5B (its q/k/v biases are left out: they change no shape that matters)
    "qwen2.5-0.5b": Shape(vocab=151936, d=896, layers=24, heads=14, kv_heads=2, ffn=4864,
                          rope_theta=1000000.0),
    # meta-llama/Llama-3.2-1B
    "llama-3.2-1b": Shape(vocab=128256, d=2048, layers=16, heads=32, kv_heads=8, ffn=8192,
                          rope_theta=500000.0, eps=1e-5),
    # google/gemma-3-1b-pt (its sliding-window layers attend like global ones at seq 128)
    "gemma-3-1b": Shape(vocab=262144, d=1152, layers=26, heads=4, kv_heads=1, ffn=6912,
                        head_dim=256, act="gelu_tanh"),
}


class RMSNorm(nn.Module):
    eps: float

    @nn.compact
    def __call__(self, x):
        w = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + self.eps) * w


def rope(x, theta):
    """Rotary embedding of ``x`` (batch, seq, heads, head_dim), Llama's half-split form."""
    t, hd = x.shape[1], x.shape[-1]
    inv = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    ang = np.arange(t, dtype=np.float32)[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[None, :, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[None, :, None, :]
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * cos + jnp.concatenate([-x2, x1], -1) * sin


class Block(nn.Module):
    s: Shape

    @nn.compact
    def __call__(self, x):
        s, t = self.s, x.shape[1]
        dense = lambda n, name: nn.Dense(n, use_bias=False, name=name)  # noqa: E731
        h = RMSNorm(s.eps, name="attn_norm")(x)
        q = dense(s.heads * s.hd, "q")(h).reshape(-1, t, s.heads, s.hd)
        k = dense(s.kv_heads * s.hd, "k")(h).reshape(-1, t, s.kv_heads, s.hd)
        v = dense(s.kv_heads * s.hd, "v")(h).reshape(-1, t, s.kv_heads, s.hd)
        q, k = rope(q, s.rope_theta), rope(k, s.rope_theta)
        rep = s.heads // s.kv_heads
        k, v = jnp.repeat(k, rep, axis=2), jnp.repeat(v, rep, axis=2)
        att = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(s.hd).astype(np.float32)
        att = jnp.where(np.tril(np.ones((t, t), bool)), att, -1e9)
        y = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(att, -1), v)
        x = x + dense(s.d, "o")(y.reshape(-1, t, s.heads * s.hd))
        h = RMSNorm(s.eps, name="mlp_norm")(x)
        act = jax.nn.silu if s.act == "silu" else (lambda u: jax.nn.gelu(u, approximate=True))
        return x + dense(s.d, "down")(act(dense(s.ffn, "gate")(h)) * dense(s.ffn, "up")(h))


class Decoder(nn.Module):
    s: Shape

    @nn.compact
    def __call__(self, tokens):
        emb = nn.Embed(self.s.vocab, self.s.d, name="embed")
        x = emb(tokens)
        for i in range(self.s.layers):
            x = Block(self.s, name=f"layer{i}")(x)
        return emb.attend(RMSNorm(self.s.eps, name="final_norm")(x))   # tied output


def shape(name: str, layers: int | None = None) -> Shape:
    s = SHAPES[name]
    return dataclasses.replace(s, layers=layers) if layers else s


def build(name: str, *, layers: int | None = None, seq: int = 128, batch: int = 1,
          concrete: bool = True, seed: int = 0):
    """``(model, base, tokens)``: ``base`` the flax variables (numpy fp32, or
    ``jax.ShapeDtypeStruct``s with ``concrete=False``), ``tokens`` int32 ``(batch, seq+1)``."""
    s = shape(name, layers)
    model = Decoder(s)
    tokens = np.random.default_rng(seed).integers(0, s.vocab, (batch, seq + 1)).astype(np.int32)
    init = lambda: model.init(jax.random.PRNGKey(seed), tokens[:, :-1])  # noqa: E731
    if not concrete:
        return model, jax.eval_shape(init), tokens
    # small random weights (std 0.02, as the published inits) so activations stay tame
    shapes = jax.eval_shape(init)
    rng = np.random.default_rng(seed + 1)
    base = jax.tree.map(
        lambda x: (np.ones(x.shape, np.float32) if len(x.shape) == 1 else
                   (0.02 * rng.standard_normal(x.shape, np.float32))), shapes)
    return model, base, tokens


def lora_select(path, leaf) -> bool:
    """Adapters on the q and v projections (the LoRA paper's choice)."""
    keys = [getattr(p, "key", None) for p in path]
    return len(keys) >= 2 and keys[-1] == "kernel" and keys[-2] in ("q", "v")


def lora_loss(model):
    """The next-token cross-entropy of the ``{"base", "lora"}`` tree of ``rlxjax.lora``."""
    import optax

    import rlxjax

    def loss(tree, seq):
        logits = model.apply(rlxjax.lora.merge(tree), seq[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, seq[:, 1:]).mean()
    return loss


def lora_tree(base, rank: int = 8, seed: int = 0):
    import rlxjax
    tree = rlxjax.lora.add_adapters(base, rank=rank, key=jax.random.key(seed),
                                    select=lora_select)
    return jax.tree.map(np.asarray, tree)
