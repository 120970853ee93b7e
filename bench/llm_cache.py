"""Generation with a KV cache for the Llama-style decoders of ``llm_models.py``: ``prefill``
and ``decode`` over the same flax parameters (``Decoder.init``'s tree), written as the
functions of one package take them, ``fn(params, cache, *inputs) -> (logits, new_cache)``.

The cache is ``{"k": [one [kv_heads, ctx, head_dim] per layer], "v": ..., "n": int32
scalar}`` (``empty_cache``): keys and values of every position so far and how many there
are. Keys and values are kept per key/value head (grouped-query attention reads them once
for the ``heads // kv_heads`` query heads of the group, with no ``repeat``), one leaf per
layer (a layer's update writes its own leaf - on Core AI its own state - with no stacking
of the layers into one tensor).

* ``prefill(s, ctx)(params, cache, prompt, length)``: a prompt padded to ``ctx`` tokens and
  its true length (1..ctx) -> the logits after its last token ``[1, vocab]``. One static
  program takes a prompt of any length up to the context (the padding's keys and values
  land beyond ``length``, where ``decode`` overwrites them before any query can see them).
* ``decode(s, ctx)(params, cache, tok)``: one token ``[1, 1]`` at position ``cache["n"]``
  -> the next token's logits ``[1, vocab]``.

``forward_logits`` of a prompt equals ``Decoder.apply`` of it (the test checks that), so the
cached path is the model, not a second one.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from llm_models import Shape


def empty_cache(s: Shape, ctx: int):
    z = np.zeros((s.kv_heads, ctx, s.hd), np.float32)
    return {"k": [z.copy() for _ in range(s.layers)], "v": [z.copy() for _ in range(s.layers)],
            "n": np.zeros((), np.int32)}


def _rope_tables(s: Shape, ctx: int):
    hd = s.hd
    inv = 1.0 / (s.rope_theta ** (np.arange(0, hd, 2, dtype=np.float32) / hd))
    ang = np.arange(ctx, dtype=np.float32)[:, None] * inv[None, :]
    return (np.concatenate([np.cos(ang)] * 2, -1).astype(np.float32),
            np.concatenate([np.sin(ang)] * 2, -1).astype(np.float32))


def _rope(x, cos, sin):
    """x [..., t, hd] with cos / sin [t, hd]: llm_models.rope's half-split form."""
    hd = x.shape[-1]
    x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
    return x * cos + jnp.concatenate([-x2, x1], -1) * sin


def _norm(x, w, eps):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _act(s: Shape):
    return jax.nn.silu if s.act == "silu" else (lambda u: jax.nn.gelu(u, approximate=True))


def _blocks(s: Shape, p, cache, x, cos, sin, pos, mask):
    """x [t, d] at positions pos..pos+t-1 through every block; keys and values written into
    the cache at ``pos``; ``mask`` [t, ctx] says which cached positions each query sees."""
    t, g, rep, hd = x.shape[0], s.kv_heads, s.heads // s.kv_heads, s.hd
    ks, vs = [], []
    for i in range(s.layers):
        lp = p[f"layer{i}"]
        h = _norm(x, lp["attn_norm"]["scale"], s.eps)
        q = (h @ lp["q"]["kernel"]).reshape(t, g, rep, hd).transpose(1, 2, 0, 3)  # g r t hd
        k = (h @ lp["k"]["kernel"]).reshape(t, g, hd).transpose(1, 0, 2)          # g t hd
        v = (h @ lp["v"]["kernel"]).reshape(t, g, hd).transpose(1, 0, 2)
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        kc = jax.lax.dynamic_update_slice(cache["k"][i], k, (0, pos, 0))           # g ctx hd
        vc = jax.lax.dynamic_update_slice(cache["v"][i], v, (0, pos, 0))
        ks.append(kc)
        vs.append(vc)
        att = jnp.einsum("grtd,gkd->grtk", q, kc) / np.sqrt(hd).astype(np.float32)
        att = jnp.where(mask, att, -1e9)
        y = jnp.einsum("grtk,gkd->grtd", jax.nn.softmax(att, -1), vc)
        x = x + y.transpose(2, 0, 1, 3).reshape(t, s.heads * hd) @ lp["o"]["kernel"]
        h = _norm(x, lp["mlp_norm"]["scale"], s.eps)
        x = x + (_act(s)(h @ lp["gate"]["kernel"]) * (h @ lp["up"]["kernel"])) @ \
            lp["down"]["kernel"]
    return x, ks, vs


def _head(s: Shape, p, x):
    """x [1, d] -> logits [1, vocab] (the tied embedding)."""
    return _norm(x, p["final_norm"]["scale"], s.eps) @ p["embed"]["embedding"].T


def prefill(s: Shape, ctx: int):
    cos_t, sin_t = _rope_tables(s, ctx)
    causal = np.tril(np.ones((ctx, ctx), bool))

    def fn(params, cache, prompt, length):
        p = params["params"]
        x = jnp.asarray(p["embed"]["embedding"])[prompt[0]]
        x, k, v = _blocks(s, p, cache, x, cos_t, sin_t, 0, causal)
        last = jax.lax.dynamic_slice_in_dim(x, length - 1, 1, 0)
        return _head(s, p, last), {"k": k, "v": v, "n": length.astype(jnp.int32)}
    return fn


def decode(s: Shape, ctx: int):
    cos_t, sin_t = _rope_tables(s, ctx)
    positions = np.arange(ctx, dtype=np.int32)

    def fn(params, cache, tok):
        p = params["params"]
        pos = cache["n"]
        x = jnp.asarray(p["embed"]["embedding"])[tok[0]]
        cos = jax.lax.dynamic_slice_in_dim(cos_t, pos, 1, 0)
        sin = jax.lax.dynamic_slice_in_dim(sin_t, pos, 1, 0)
        x, k, v = _blocks(s, p, cache, x, cos, sin, pos, (positions <= pos)[None, :])
        return _head(s, p, x), {"k": k, "v": v, "n": pos + 1}
    return fn


def pad_prompt(prompt, ctx: int):
    """A ``[1, n]`` prompt -> (the prompt padded with zeros to ``[1, ctx]``, n as int32)."""
    prompt = np.asarray(prompt, np.int32)
    n = prompt.shape[1]
    if not 1 <= n <= ctx:
        raise ValueError(f"a prompt of {n} tokens: 1 to {ctx} fit the context")
    return np.pad(prompt, ((0, 0), (0, ctx - n))), np.int32(n)


def jax_generate(s: Shape, ctx: int, params, prompt, n_new: int):
    """JAX's greedy generation (jax.jit of the same prefill / decode): the tokens and the
    logits each one was taken from."""
    pre, dec = jax.jit(prefill(s, ctx)), jax.jit(decode(s, ctx))
    logits, cache = pre(params, empty_cache(s, ctx), *pad_prompt(prompt, ctx))
    toks, seen = [], []
    for _ in range(n_new):
        t = jnp.argmax(logits, -1).astype(jnp.int32)
        toks.append(int(t[0]))
        seen.append(np.asarray(logits))
        logits, cache = dec(params, cache, t[:, None])
    return toks, np.stack(seen)
