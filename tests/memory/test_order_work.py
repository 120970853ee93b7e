"""The memory order's work grows with the program, not faster (issue 36): a train step of a
Llama-style decoder at depth L and 2L, the work the pass reports (coreml/mil_order.py
``WORK``: ops, dependencies, refine's screening steps, evaluated orders) counted, not timed.

Without the memo of coreml/mil_order_refine.py (every live value re-screened after each
kept move: O(moves x live)) the screening steps grow 3.6x here (6,100 -> 21,730) for 1.85x
the ops; with it 1.7x (1,244 -> 2,159). What the counts do not bound: each evaluated order
is a vectorised O(n) pass, and how many moves the search keeps depends on the program (a
12-layer step of this model keeps 4.7x the 6-layer one's: see the module's docstring)."""
from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

import rlxjax
from rlxjax.coreml import mil_order

D, HEADS, FFN, VOCAB, SEQ = 64, 4, 128, 2000, 16


class _Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        t = x.shape[1]
        h = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
        q, k, v = (nn.Dense(D, use_bias=False)(h).reshape(-1, t, HEADS, D // HEADS)
                   for _ in range(3))
        att = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.float32(np.sqrt(D // HEADS))
        att = jnp.where(np.tril(np.ones((t, t), bool)), att, -1e9)
        y = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(att, -1), v).reshape(-1, t, D)
        x = x + nn.Dense(D, use_bias=False)(y)
        h = x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6)
        g = jax.nn.silu(nn.Dense(FFN, use_bias=False)(h)) * nn.Dense(FFN, use_bias=False)(h)
        return x + nn.Dense(D, use_bias=False)(g)


class _Decoder(nn.Module):
    layers: int

    @nn.compact
    def __call__(self, tokens):
        emb = nn.Embed(VOCAB, D)
        x = emb(tokens)
        for _ in range(self.layers):
            x = _Block()(x)
        return emb.attend(x)


def decoder_lm(layers: int):
    """(params, tokens, loss) of the decoder at ``layers`` layers: next-token cross entropy
    (tests/memory/test_compile_work.py compiles the same model)."""
    model = _Decoder(layers)
    tokens = np.random.default_rng(0).integers(0, VOCAB, (1, SEQ + 1)).astype(np.int32)
    params = model.init(jax.random.PRNGKey(0), tokens[:, :-1])

    def loss(p, seq):
        logits = model.apply(p, seq[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, seq[:, 1:]).mean()

    return params, tokens, loss


def _work(layers: int):
    params, tokens, loss = decoder_lm(layers)
    opt = optax.adam(1e-3)
    mil_order.WORK.clear()
    rlxjax.coreml_train_step(loss, opt).lower(params, opt.init(params), tokens).compile()
    return dict(mil_order.WORK)


def test_order_work_grows_linearly_with_depth():
    small, big = _work(3), _work(6)
    ratio = big["ops"] / small["ops"]
    assert 1.8 < ratio < 2.2, (small, big)  # the program doubled
    assert big["screens"] > 0 and big["evaluated"] > 0  # the refinement ran
    for kind in ("edges", "screens", "evaluated"):
        # linear: the ops' ratio; 25 % above it for what grows slower than the depth
        assert big[kind] <= 1.25 * ratio * small[kind], (kind, small, big)
