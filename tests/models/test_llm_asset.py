"""One asset for a Llama-style language model (bench/llm_models.py, bench/llm_cache.py):
``train_step``, ``prefill`` and ``decode`` over one int8 base and one set of LoRA adapters,
``step.save(path, functions=...)``, on both formats at a small shape.

The package is trained one step by ``step(...)`` and one through its own ``train_step``,
then ``prefill`` (a prompt padded to the context plus its length) and 16 ``decode`` calls
generate greedily from the state the steps wrote, the KV cache in state. Against JAX: the
same two adam steps on the dequantised base (``step.frozen_params()``) and ``jax.jit``
greedy generation with the same base and JAX's adapters. The cached prefill / decode are
checked against the flax model's own forward first, so the reference is the model."""
from __future__ import annotations

import functools
import os
import sys

import jax
import numpy as np
import optax
import pytest

import rlxjax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import llm_cache as lc  # noqa: E402
import llm_models as lm  # noqa: E402

S = lm.Shape(vocab=64, d=32, layers=1, heads=4, kv_heads=2, ffn=64)
CTX, SEQ, N_NEW = 8, 6, 16
ATOL = 1e-4          # logits: fp32 evaluation order through int8-dequantised weights
RTOL_LOSS = 1e-5


@functools.lru_cache(maxsize=None)
def _model():
    model = lm.Decoder(S)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, S.vocab, (1, SEQ + 1)).astype(np.int32)
    shapes = jax.eval_shape(lambda: model.init(jax.random.PRNGKey(0), tokens[:, :-1]))
    base = jax.tree.map(lambda x: np.ones(x.shape, np.float32) if len(x.shape) == 1 else
                        (0.3 * rng.standard_normal(x.shape)).astype(np.float32), shapes)
    return model, base, tokens


def test_cached_prefill_and_decode_are_the_flax_model():
    model, base, tokens = _model()
    full = np.asarray(model.apply(base, tokens))
    pre, dec = jax.jit(lc.prefill(S, CTX)), jax.jit(lc.decode(S, CTX))
    logits, cache = pre(base, lc.empty_cache(S, CTX), *lc.pad_prompt(tokens[:, :3], CTX))
    np.testing.assert_allclose(logits, full[:, 2], rtol=0, atol=1e-5)
    for j in range(3, SEQ + 1):
        logits, cache = dec(base, cache, tokens[:, j:j + 1])
        np.testing.assert_allclose(logits, full[:, j], rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="fit the context"):
        lc.pad_prompt(np.zeros((1, CTX + 1), np.int32), CTX)


def _one_asset(fmt, tmp_path):
    model, base, tokens = _model()
    tree = lm.lora_tree(base, rank=4)
    loss, opt = lm.lora_loss(model), optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", format=fmt,
                                    target="iOS18" if fmt == "mlpackage" else None,
                                    trainable=rlxjax.lora.TRAINABLE, compress="int8")
    st = step.init(tree, tokens)
    st, v0 = step(st, tokens)
    merge = rlxjax.lora.merge
    pre, dec = lc.prefill(S, CTX), lc.decode(S, CTX)
    cache = lc.empty_cache(S, CTX)
    prompt = tokens[:, :4]
    padded, n = lc.pad_prompt(prompt, CTX)
    path = step.save(tmp_path / f"lm.{fmt}", functions={
        "prefill": (lambda t, c, prompt, length: pre(merge(t), c, prompt, length),
                    cache, padded, n),
        "decode": (lambda t, c, tok: dec(merge(t), c, tok), cache,
                   np.zeros((1, 1), np.int32))})
    m = rlxjax.load(path, flat=True)
    assert m.functions == ("train_step", "prefill", "decode")
    state = m.make_state(step.export_state(st, tmp_path / "init"))
    v1 = m.function("train_step")(seq=tokens, state=state)["out"]
    p, d = m.function("prefill"), m.function("decode")
    # the cache never leaves the state: decode takes a token and gives the logits
    assert d.input_names == ("tok",) and d.output_names == ("out",)
    assert p.input_names == ("prompt", "length")
    logits = p(prompt=padded, length=n, state=state)["out"]
    got, seen = [], []
    for _ in range(N_NEW):
        t = np.argmax(logits, -1).astype(np.int32)
        got.append(int(t[0]))
        seen.append(np.asarray(logits))
        logits = d(tok=t[:, None], state=state)["out"]

    frozen = step.frozen_params()["base"]
    adapters, o = tree["lora"], opt.init(tree["lora"])

    @jax.jit
    def jstep(a, o, x):
        lv, g = jax.value_and_grad(lambda a: loss({"base": frozen, "lora": a}, x))(a)
        u, o = opt.update(g, o, a)
        return optax.apply_updates(a, u), o, lv

    want_losses = []
    for _ in range(2):
        adapters, o, lv = jstep(adapters, o, tokens)
        want_losses.append(float(lv))
    np.testing.assert_allclose([float(np.asarray(v0)), float(np.asarray(v1))], want_losses,
                               rtol=RTOL_LOSS)
    want, want_logits = lc.jax_generate(S, CTX, merge({"base": frozen, "lora": adapters}),
                                        prompt, N_NEW)
    assert got == want
    np.testing.assert_allclose(np.stack(seen), want_logits, rtol=0, atol=ATOL)


def test_one_aimodel_trains_and_generates_as_jax(tmp_path):
    pytest.importorskip("coreai.authoring",
                        reason="format='aimodel' needs coreai-core (rlxjax[coreai])")
    _one_asset("aimodel", tmp_path)


def test_one_mlpackage_trains_and_generates_as_jax(tmp_path):
    _one_asset("mlpackage", tmp_path)
