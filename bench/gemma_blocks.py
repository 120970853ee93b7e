"""Gemma decoder blocks as their libraries write them, for bench/grad_ops.py.

``flax_block`` follows flax's examples/gemma (modules.py Attention / FeedForward / Block,
layers.py Einsum / RMSNorm, positional_embeddings.py apply_rope; the example is not part of
the flax package, so it is written out here as it reads): MQA as Gemma 2B configures it
(one K/V head, ``'BTNH,BSNH->BTNS'`` broadcasting it), the bool ``attn_mask`` an input,
masked with ``where(mask, logits, K_MASK)``; with ``soft_cap`` Gemma 2's logit soft-capping
``tanh(logits / c) · c``. ``keras_block`` is keras-hub's own GemmaDecoderBlock through
``stateless_call`` (needs keras_hub: run under /work/.venv-keras with KERAS_BACKEND=jax),
``keras_llama_block`` its LlamaTransformerDecoder (grouped-query attention).
Each returns ``(fn, args)`` with ``fn(params, x, *rest)``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

K_MASK = -2.3819763e38
# batch, length, width, heads, kv heads (MQA, as Gemma 2B), head dim, ffw width
B, T, D, N, KV, H, F = 2, 16, 64, 4, 1, 16, 128


def _rope(inputs, positions, head_dim, max_wavelength=10_000):
    fraction = 2 * jnp.arange(0, head_dim // 2) / head_dim
    timescale = max_wavelength**fraction
    sinusoid_inp = positions[..., jnp.newaxis] / timescale[jnp.newaxis, jnp.newaxis, :]
    sinusoid_inp = sinusoid_inp[..., jnp.newaxis, :]
    sin, cos = jnp.sin(sinusoid_inp), jnp.cos(sinusoid_inp)
    first_half, second_half = jnp.split(inputs, 2, axis=-1)
    first_part = first_half * cos - second_half * sin
    second_part = second_half * cos + first_half * sin
    return jnp.concatenate([first_part, second_part], axis=-1).astype(inputs.dtype)


def _rms_norm(x, scale):
    var = jnp.mean(jnp.square(x), axis=-1, keepdims=True)
    normed = jnp.asarray(x * jnp.reciprocal(jnp.sqrt(var + 1e-06)))
    return normed * (1 + jnp.expand_dims(scale, axis=range(len(x.shape) - 1)))


def _attention(p, x, segment_pos, attn_mask, soft_cap):
    query_proj = jnp.einsum("BTD,NDH->BTNH", x, p["q_einsum"])
    key_proj, value_proj = jnp.einsum("BSD,CKDH->CBSKH", x, p["kv_einsum"])
    query_proj = _rope(query_proj, segment_pos, H)
    query_scaled = query_proj * H**-0.5
    key_proj = _rope(key_proj, segment_pos, H)
    logits = jnp.einsum("BTNH,BSNH->BTNS", query_scaled, key_proj)
    if soft_cap is not None:
        logits = jnp.tanh(logits / soft_cap)
        logits = logits * soft_cap
    padded_logits = jnp.where((jnp.expand_dims(attn_mask, -2)), logits, K_MASK)
    probs = jax.nn.softmax(padded_logits, axis=-1).astype(key_proj.dtype)
    encoded = jnp.einsum("BTNS,BSNH->BTNH", probs, value_proj)
    return jnp.einsum("BTNH,NHD->BTD", encoded, p["attn_vec_einsum"])


def flax_block(soft_cap=None):
    """flax examples/gemma Block (no post norms: Gemma 1) on a causal + padding mask."""
    r = np.random.default_rng(0)

    def normal(*shape):
        return (r.standard_normal(shape) * 0.05).astype(np.float32)

    params = {"pre_attention_norm": normal(D), "pre_ffw_norm": normal(D),
              "attn": {"q_einsum": normal(N, D, H), "kv_einsum": normal(2, KV, D, H),
                       "attn_vec_einsum": normal(N, H, D)},
              "mlp": {"gate_proj": normal(D, F), "up_proj": normal(D, F),
                      "down_proj": normal(F, D)}}

    def block(p, x, segment_pos, attn_mask):
        inputs_normalized = _rms_norm(x, p["pre_attention_norm"])
        attn_output = _attention(p["attn"], inputs_normalized, segment_pos, attn_mask,
                                 soft_cap)
        attn_output += x
        residual = attn_output
        attn_output = _rms_norm(attn_output, p["pre_ffw_norm"])
        m = p["mlp"]
        activations = jax.nn.gelu(attn_output @ m["gate_proj"]) * (attn_output @ m["up_proj"])
        return residual + activations @ m["down_proj"]

    x = r.standard_normal((B, T, D)).astype(np.float32)
    pos = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)).copy()
    lengths = np.array([T, T - 5])
    attn_mask = np.tril(np.ones((T, T), bool))[None] & (np.arange(T) < lengths[:, None])[:, None]
    return block, (params, x, pos, attn_mask)


def keras_block():
    """keras-hub's GemmaDecoderBlock (its CPU path: the einsums and Keras' Softmax layer)."""
    from keras_hub.src.models.gemma.gemma_decoder_block import GemmaDecoderBlock

    layer = GemmaDecoderBlock(hidden_dim=D, intermediate_dim=2 * F, head_dim=H,
                              num_query_heads=N, num_key_value_heads=KV)
    layer.build((B, T, D))
    tv = [np.asarray(v.value) for v in layer.trainable_variables]
    ntv = [np.asarray(v.value) for v in layer.non_trainable_variables]

    def block(tv, x, padding_mask):
        return layer.stateless_call(tv, ntv, x, padding_mask=padding_mask)[0]

    x = np.random.default_rng(0).standard_normal((B, T, D)).astype(np.float32)
    padding_mask = np.arange(T)[None] < np.array([T, T - 5])[:, None]
    return block, (tv, x, padding_mask)


def keras_llama_block():
    """keras-hub's LlamaTransformerDecoder (GQA: K/V heads repeated to the query heads, then
    keras' ops.dot_product_attention, i.e. jax.nn.dot_product_attention, on JAX)."""
    from keras_hub.src.models.llama.llama_decoder import LlamaTransformerDecoder

    layer = LlamaTransformerDecoder(intermediate_dim=F, num_query_heads=N,
                                    num_key_value_heads=2)
    layer.build((B, T, D))
    tv = [np.asarray(v.value) for v in layer.trainable_variables]
    ntv = [np.asarray(v.value) for v in layer.non_trainable_variables]

    def block(tv, x, padding_mask):
        return layer.stateless_call(tv, ntv, x, decoder_padding_mask=padding_mask)[0]

    x = np.random.default_rng(0).standard_normal((B, T, D)).astype(np.float32)
    padding_mask = np.arange(T)[None] < np.array([T, T - 5])[:, None]
    return block, (tv, x, padding_mask)
