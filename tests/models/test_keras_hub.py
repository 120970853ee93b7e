"""keras-hub models (Keras 3, JAX backend) as written, tiny random-init configs (no
downloads): LoRA training through rlxjax.keras.stateless + trainable= against JAX + optax,
greedy / top-k / top-p generation (keras-hub's generate path, rlxjax.keras.generate)
against Keras' own generate and jax.jit token for token / draw for draw.

Needs ``pip install keras keras-hub`` (skipped without); the default run takes one sample
(GPT-2: LoRA steps and greedy generation), ``-m slow`` the rest."""
from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

keras_hub = pytest.importorskip("keras_hub")
keras = pytest.importorskip("keras")
optax = pytest.importorskip("optax")
if keras.config.backend() != "jax":
    pytest.skip("Keras runs on another backend (set KERAS_BACKEND=jax)", allow_module_level=True)

import rlxjax  # noqa: E402
import rlxjax.keras as rk  # noqa: E402

V = 64


def causal_lm(kind, dropout=0.0):
    keras.utils.set_random_seed(0)
    m = keras_hub.models
    if kind == "gpt2":
        bb = m.GPT2Backbone(vocabulary_size=V, num_layers=2, num_heads=2, hidden_dim=16,
                            intermediate_dim=32, max_sequence_length=32, dropout=dropout)
        return m.GPT2CausalLM(backbone=bb, preprocessor=None)
    if kind == "gemma":
        bb = m.GemmaBackbone(vocabulary_size=V, num_layers=2, num_query_heads=2,
                             num_key_value_heads=1, hidden_dim=16, intermediate_dim=32,
                             head_dim=8, dropout=dropout)
        return m.GemmaCausalLM(backbone=bb, preprocessor=None)
    bb = m.LlamaBackbone(vocabulary_size=V, num_layers=2, num_query_heads=2,
                         num_key_value_heads=1, hidden_dim=16, intermediate_dim=32,
                         dropout=dropout)
    return m.LlamaCausalLM(backbone=bb, preprocessor=None)


def check_lora(kind, compress=None, steps=10):
    lm = causal_lm(kind)
    lm.backbone.enable_lora(2)
    rng = np.random.default_rng(0)
    tok = rng.integers(0, V, (2, 12)).astype(np.int32)
    x = {"token_ids": tok, "padding_mask": np.ones((2, 12), bool)}
    y = np.roll(tok, -1, axis=1)
    fn, tv, ntv = rk.stateless(lm)
    # Keras' LoRA trains the adapters (and the adapted layers' biases); the base is frozen
    assert tv and all("lora" in v.path or v.path.endswith("bias") for v in lm.trainable_variables)

    def loss(params, x, y):
        return optax.softmax_cross_entropy_with_integer_labels(fn(*params, x), y).mean()

    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, trainable=(True, False), compress=compress)
    st = step.init((tv, ntv))
    base = list(step.frozen_params()[1])  # the (dequantised) base the program computes with

    @jax.jit
    def ref_step(p, o):
        lo, g = jax.value_and_grad(lambda p: loss((p, base), x, y))(p)
        u, o = opt.update(g, o, p)
        return optax.apply_updates(p, u), o, lo

    p, o = tv, opt.init(tv)
    got, want = [], []
    for _ in range(steps):
        st, lo = step(st, x, y)
        p, o, lr = ref_step(p, o)
        got.append(float(lo))
        want.append(float(lr))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for a, b in zip(step.params(st)[0], p):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def check_generate(kind, sampler):
    lm = causal_lm(kind)
    samplers = {"greedy": "greedy", "top_k": keras_hub.samplers.TopKSampler(k=5, seed=3),
                "top_p": keras_hub.samplers.TopPSampler(p=0.9, seed=3)}
    lm.compile(sampler=samplers[sampler])
    tok = np.zeros((2, 20), np.int32)
    mask = np.zeros((2, 20), bool)
    tok[:, :4] = [[5, 6, 7, 8], [9, 10, 11, 12]]
    mask[:, :4] = True
    inputs = {"token_ids": tok, "padding_mask": mask}
    fn, state = rk.generate(lm)
    want = jax.jit(fn)(inputs, state)["token_ids"]
    if sampler == "greedy":  # 16 new tokens, as Keras' own generate makes them
        keras_out = lm.generate(inputs, max_length=20, stop_token_ids=None)["token_ids"]
        np.testing.assert_array_equal(keras_out, want)
    got = rlxjax.coreml_jit(fn, random=None if sampler == "greedy" else "inputs")(inputs, state)
    np.testing.assert_array_equal(got["token_ids"], want)
    assert np.all(got["token_ids"][:, :4] == tok[:, :4])


def test_gpt2_lora_steps_and_greedy_generate():
    check_lora("gpt2", steps=3)
    check_generate("gpt2", "greedy")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2", "gemma", "llama"])
@pytest.mark.parametrize("compress", [None, "int8"])
def test_lora_ten_steps_equal_optax(kind, compress):
    check_lora(kind, compress)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2", "gemma", "llama"])
@pytest.mark.parametrize("sampler", ["greedy", "top_k", "top_p"])
def test_generate_equals_keras_and_jax(kind, sampler):
    check_generate(kind, sampler)


@pytest.mark.slow
def test_dropout_gradient_with_random_inputs():
    lm = causal_lm("gpt2", dropout=0.1)
    fn, tv, ntv = rk.stateless(lm, training=True)
    tok = np.arange(24, dtype=np.int32).reshape(2, 12) % V
    x = {"token_ids": tok, "padding_mask": np.ones((2, 12), bool)}

    def loss(tv, ntv, x):
        return jnp.mean(fn(tv, ntv, x) ** 2)

    got = rlxjax.coreml_grad(loss, random="inputs")(tv, ntv, x)
    want = jax.grad(loss)(tv, ntv, x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_stateless_refuses_wrong_counts():
    lm = causal_lm("gpt2")
    fn, tv, ntv = rk.stateless(lm)
    with pytest.raises(rlxjax.ArgumentError, match="trainable"):
        fn(tv[:-1], ntv, {"token_ids": np.zeros((1, 4), np.int32),
                          "padding_mask": np.ones((1, 4), bool)})
