"""keras-hub models (Keras 3, JAX backend) as written, tiny random-init configs (no
downloads): LoRA training through rlxjax.keras.stateless + trainable= against JAX + optax;
generation (keras-hub's generate path, rlxjax.keras.generate) with greedy, top-k and top-p
samplers for every causal-LM family keras-hub ships, on both formats (Core ML on the
reference interpreter, Core AI on coreai-core's runtime), against Keras' own ``generate``
token for token and draw for draw (the sampler's draws: JAX's, from its seed state, with
random="inputs"), bool, int32 and float32 padding masks.

Needs keras and keras-hub, which CI installs without TensorFlow (.ci/run: keras-hub with
--no-deps, plus regex and tokenizers, the imports it needs); skipped without them. The
default run takes a sample (GPT-2: LoRA steps and greedy generation; Qwen top-k on an int32
mask, and a mask outside its assumed bound refused; Phi-3 top-p on Core AI), ``-m slow``
the rest: every family x sampler x format, and int32 / float32 masks."""
from __future__ import annotations

import os

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import importlib  # noqa: E402
import importlib.util  # noqa: E402

if any(importlib.util.find_spec(m) is None for m in ("keras_hub", "keras", "optax")):
    pytest.skip("needs keras, keras-hub and optax (see the module docstring)",
                allow_module_level=True)


class _OnFirstUse:
    """A module imported when first read: Keras takes seconds to import, which every xdist
    worker would pay collecting this module (most of its tests are -m slow)."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return getattr(importlib.import_module(self._name), attr)


keras_hub, keras, optax = _OnFirstUse("keras_hub"), _OnFirstUse("keras"), _OnFirstUse("optax")


@pytest.fixture(autouse=True)
def _keras_on_jax():
    if keras.config.backend() != "jax":
        pytest.skip("Keras runs on another backend (set KERAS_BACKEND=jax)")

import rlxjax  # noqa: E402
import rlxjax.keras as rk  # noqa: E402

V = 64
FAMILIES = ["gpt2", "gemma", "gemma3", "llama", "mistral", "qwen", "qwen3", "phi3", "opt",
            "falcon", "gpt_neox", "bloom"]
SAMPLERS = ["greedy", "top_k", "top_p"]
FORMATS = ["mlpackage", "aimodel"]


def causal_lm(kind, dropout=0.0, layers=2):
    """A keras-hub CausalLM of family ``kind`` from a tiny config (random weights)."""
    keras.utils.set_random_seed(0)
    m = keras_hub.models
    c = dict(vocabulary_size=V, num_layers=layers, hidden_dim=16, intermediate_dim=32)
    gqa = dict(num_query_heads=2, num_key_value_heads=1)
    if kind == "gpt2":
        bb = m.GPT2Backbone(num_heads=2, max_sequence_length=32, dropout=dropout, **c)
        return m.GPT2CausalLM(backbone=bb, preprocessor=None)
    if kind == "gemma":
        bb = m.GemmaBackbone(head_dim=8, dropout=dropout, **gqa, **c)
        return m.GemmaCausalLM(backbone=bb, preprocessor=None)
    if kind == "llama":
        bb = m.LlamaBackbone(dropout=dropout, **gqa, **c)
        return m.LlamaCausalLM(backbone=bb, preprocessor=None)
    bb, lm = {
        "gemma3": lambda: (m.Gemma3Backbone(image_size=None, head_dim=8, **gqa, **c),
                           m.Gemma3CausalLM),
        "mistral": lambda: (m.MistralBackbone(**gqa, **c), m.MistralCausalLM),
        "qwen": lambda: (m.QwenBackbone(**gqa, **c), m.QwenCausalLM),
        "qwen3": lambda: (m.Qwen3Backbone(head_dim=8, **gqa, **c), m.Qwen3CausalLM),
        "phi3": lambda: (m.Phi3Backbone(**gqa, **c), m.Phi3CausalLM),
        "opt": lambda: (m.OPTBackbone(num_heads=2, max_sequence_length=32, dropout=0.0, **c),
                        m.OPTCausalLM),
        "falcon": lambda: (m.FalconBackbone(num_attention_heads=2, **c), m.FalconCausalLM),
        "gpt_neox": lambda: (m.GPTNeoXBackbone(num_heads=2, max_sequence_length=32, **c),
                             m.GPTNeoXCausalLM),
        "bloom": lambda: (m.BloomBackbone(num_heads=2, **c), m.BloomCausalLM),
    }[kind]()
    return lm(backbone=bb, preprocessor=None)


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


def prompt(kind, mask_dtype=bool, length=12):
    """Two prompts of 4 and 5 tokens, padded to ``length``."""
    tok = np.zeros((2, length), np.int32)
    mask = np.zeros((2, length), bool)
    tok[0, :4], tok[1, :5] = [5, 6, 7, 8], [9, 10, 11, 12, 13]
    mask[0, :4] = mask[1, :5] = True
    inputs = {"token_ids": tok, "padding_mask": mask.astype(mask_dtype)}
    if kind == "gemma3":  # (text only: keras' generate concatenates the "images" it returns)
        inputs["images"] = np.zeros((2, 0, 1, 1, 3), np.float32)
    return inputs


def sampler_of(name):
    return {"greedy": "greedy", "top_k": keras_hub.samplers.TopKSampler(k=5, seed=3),
            "top_p": keras_hub.samplers.TopPSampler(p=0.9, seed=3)}[name]


def check_generate(kind, sampler, fmt="mlpackage", mask_dtype=bool):
    """rlxjax's program of keras-hub's generate equals Keras' own ``generate`` (its jitted
    generate function) token for token, draw for draw; returns the program, the state
    and the inputs."""
    if fmt == "aimodel":
        pytest.importorskip("coreai")
    lm = causal_lm(kind, layers=1)
    lm.compile(sampler=sampler_of(sampler))
    inputs = prompt(kind, mask_dtype)
    fn, state = rk.generate(lm)  # the sampler's seed state before Keras' generate draws
    keras_out = lm.generate(inputs, max_length=12, stop_token_ids=None)["token_ids"]
    f = rlxjax.coreml_jit(fn, random=None if sampler == "greedy" else "inputs", format=fmt)
    got = f(inputs, state)
    np.testing.assert_array_equal(got["token_ids"], keras_out)
    assert np.all(got["token_ids"][:, :4] == inputs["token_ids"][:, :4])
    if sampler != "greedy":  # the draws matter: another seed state, other tokens
        assert not np.array_equal(keras_out, lm.generate(inputs, max_length=12,
                                                         stop_token_ids=None)["token_ids"])
    return f, state, inputs


@pytest.mark.slow  # the default run keeps top-k (Core ML) and top-p (Core AI) generation
def test_gpt2_lora_steps_and_greedy_generate():
    check_lora("gpt2", steps=3)
    check_generate("gpt2", "greedy")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2", "gemma", "llama"])
@pytest.mark.parametrize("compress", [None, "int8"])
def test_lora_ten_steps_equal_optax(kind, compress):
    check_lora(kind, compress)


def test_top_k_on_an_int32_mask_and_a_mask_outside_the_assumed_bound():
    """An int32 mask has no known range: keras' loop is bounded assuming its sum is >= 0
    (max_length steps) and checked on each call; a mask summing below 0 would make the
    loop run more steps than max_length, and that call is refused."""
    f, state, inputs = check_generate("qwen", "top_k", "mlpackage", np.int32)
    bad = dict(inputs, padding_mask=-inputs["padding_mask"])
    with pytest.raises(rlxjax.ArgumentError, match="may run 17 steps.*at most 12"):
        f(bad, state)


def test_top_p_on_core_ai():
    check_generate("phi3", "top_p", "aimodel")


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("kind", FAMILIES)
def test_generate_equals_keras(kind, sampler, fmt):
    check_generate(kind, sampler, fmt)


@pytest.mark.slow
@pytest.mark.parametrize("kind,mask_dtype", [
    (k, d) for k in FAMILIES for d in (np.int32, np.float32)
    # keras-hub's Gemma 3 inverts the mask (~padding_mask): Keras' own generate refuses a
    # float32 one ("not does not accept dtype float32")
    if (k, d) != ("gemma3", np.float32)])
def test_generate_on_a_numeric_mask_equals_keras(kind, mask_dtype):
    check_generate(kind, "top_p", "mlpackage", mask_dtype)


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
