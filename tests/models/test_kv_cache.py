"""A flax causal LM generating with its KV cache in device state (coreml_jit(fn, state=...),
rlxjax.save_functions, step.save(functions=...)), against JAX's own decode loop.

The model is written as flax writes a decoder with a cache: ``nn.MultiHeadDotProductAttention(decode=True)``
keeps ``cached_key`` / ``cached_value`` / ``cache_index`` in the ``cache`` collection, and the
position embedding its own ``index`` (flax's lm1b ``AddPositionEmbs`` with ``decode``);
``prefill`` runs the prompt through the one-token step in a ``lax.scan``, ``decode`` is that
step. Greedy generation of 16 tokens from the saved package (the cache never leaves the
device state) equals JAX's token for token, its logits within fp32 tolerance."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlxjax
from rlxjax import lora
from models import KV_LM_VOCAB, KVLM, kv_lm_decode, kv_lm_init, kv_lm_prefill

N_NEW = 16
ATOL = 1e-5                        # logits: fp32 evaluation order, ~1e-6 measured
PROMPT = np.array([[3, 7, 1, 4]], np.int32)
V = KV_LM_VOCAB
MODEL, DECODER = KVLM(), KVLM(decode=True)


@functools.lru_cache(maxsize=None)
def _init():
    return kv_lm_init(MODEL, DECODER)


def decode(params, cache, tok):
    return kv_lm_decode(DECODER, params, cache, tok)


def prefill(params, cache, prompt):
    return kv_lm_prefill(DECODER, params, cache, prompt)


@functools.lru_cache(maxsize=None)
def _jax_generate_base():
    return jax_generate(*_init())


def jax_generate(params, cache, n=N_NEW):
    """JAX's own greedy loop: tokens and the logits each token was taken from."""
    logits, cache = jax.jit(prefill)(params, cache, PROMPT)
    toks, seen = [], []
    for _ in range(n):
        t = jnp.argmax(logits, -1).astype(jnp.int32)
        toks.append(int(t[0]))
        seen.append(np.asarray(logits))
        logits, cache = jax.jit(decode)(params, cache, t[:, None])
    return toks, np.stack(seen), cache


def generate(prefill_fn, decode_fn, n=N_NEW):
    """Greedy generation through compiled / loaded functions sharing one state."""
    logits = prefill_fn(PROMPT)
    toks, seen = [], []
    for _ in range(n):
        t = np.argmax(logits, -1).astype(np.int32)
        toks.append(int(t[0]))
        seen.append(np.asarray(logits))
        logits = decode_fn(t[:, None])
    return toks, np.stack(seen)


def _tok():
    return np.zeros((1, 1), np.int32)


# ~8.5 s; tests/models/test_llm_asset.py runs a prefill + decode package on both formats by default
@pytest.mark.slow
def test_prefill_decode_package_generates_as_jax(tmp_path):
    params, cache = _init()
    want, want_logits, want_cache = _jax_generate_base()
    # weights closed over: constants of both functions, stored once in the package
    pre = rlxjax.coreml_jit(lambda c, prompt: prefill(params, c, prompt), state=0)
    dec = rlxjax.coreml_jit(lambda c, tok: decode(params, c, tok), state=0)
    pc = pre.lower(cache, PROMPT).compile()
    dc = dec.lower(cache, _tok()).compile()
    path = rlxjax.save_functions(tmp_path / "lm.mlpackage", {"prefill": pc, "decode": dc},
                                 default="decode")
    m = rlxjax.load(path, flat=True)
    assert m.functions == ("prefill", "decode")
    d, p = m.function("decode"), m.function("prefill")
    # the done-when: decode with the cache in state needs no cache input or output
    assert d.input_names == ("tok",) and d.output_names == ("out",)
    assert p.input_names == ("prompt",)
    st = m.make_state()  # zero states: the empty cache, index 0
    got, got_logits = generate(lambda q: p(q, state=st)["out"],
                               lambda t: d(t, state=st)["out"])
    assert got == want
    np.testing.assert_allclose(got_logits, want_logits, rtol=0, atol=ATOL)
    back = st.read()  # leaf name -> the cache as the device holds it, decoded
    flat = {rlxjax.frontend.path_name("c", k): v for k, v in
            jax.tree_util.tree_flatten_with_path(want_cache)[0]}
    assert sorted(back) == sorted(flat)
    for k, v in flat.items():
        np.testing.assert_allclose(back[k], np.asarray(v), rtol=0, atol=ATOL, err_msg=k)
    # the weights once: the package's weight file is no larger than one function's
    wbin = "Data/com.apple.CoreML/weights/weight.bin"
    one = dc.save(tmp_path / "decode.mlpackage")
    assert (path_size(path, wbin) <= path_size(one, wbin))


def path_size(pkg, rel):
    import os

    return os.path.getsize(os.path.join(pkg, rel))


def test_state_is_the_io_program_bit_for_bit():
    """The exact codec: the stateful program computes what the same function with the cache
    as input and output computes, bits included, and its state reads back that cache."""
    params, cache = _init()
    io = rlxjax.coreml_jit(decode, target="iOS18")
    sf = rlxjax.coreml_jit(decode, state="cache").lower(params, cache, _tok()).compile()
    st = sf.make_state(cache)
    c = cache
    for t in (5, 9, 2):
        tok = np.array([[t]], np.int32)
        want, c = io(params, c, tok)
        got = sf(params, tok, state=st)
        np.testing.assert_array_equal(got, want)
    for a, b in zip(jax.tree_util.tree_leaves(st.read()), jax.tree_util.tree_leaves(c)):
        np.testing.assert_array_equal(a, np.asarray(b))


@pytest.mark.slow
def test_fp16_cache_states_opt_in():
    """state_precision="fp16": one rounded fp16 state instead of the exact three; the cost
    is measured here against JAX (docs/stateful.md quotes it)."""
    params, cache = _init()
    want, want_logits, _ = _jax_generate_base()
    kw = dict(state="cache", state_precision="fp16")
    pc = rlxjax.coreml_jit(prefill, **kw).lower(params, cache, PROMPT).compile()
    dc = rlxjax.coreml_jit(decode, **kw).lower(params, cache, _tok()).compile()
    assert pc.state_names == ("cache_f32_f16", "cache_i32_hi", "cache_i32_mid", "cache_i32_lo")
    st = pc.make_state()
    got, got_logits = generate(lambda q: pc(params, q, state=st),
                               lambda t: dc(params, t, state=st))
    err = np.abs(got_logits - want_logits).max()
    assert got == want            # this model's greedy choice survives the rounding
    assert 1e-5 < err < 5e-3      # measured 5.6e-4: ~500x the exact states' error


@pytest.mark.slow  # the default run has tests/models/test_llm_asset.py: the same asset kind
def test_lora_train_prefill_decode_package_equals_jax(tmp_path):
    """One package, train_step + prefill + decode over one set of weights and adapters:
    LoRA steps through the package, then generation with the weights they wrote, against
    JAX + optax on the same batches."""
    params, cache = _init()
    tree = lora.add_adapters(params, rank=4, key=jax.random.key(1),
                             select=lambda path, leaf: path[-1].key == "kernel" and leaf.ndim == 2)

    def loss(t, x, y):
        logits = MODEL.apply({"params": lora.merge(t)}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    data = np.random.default_rng(0).integers(0, V, (4, 2, 9)).astype(np.int32)
    batches = [(b[:, :-1], b[:, 1:]) for b in data]
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", trainable=lora.TRAINABLE)
    st = step.init(tree, *batches[0])
    st, compiled_losses = step.fit(st, batches[:2], steps=2, progress=False)
    path = step.save(tmp_path / "lm.mlpackage", functions={
        "prefill": (lambda t, c, prompt: prefill(lora.merge(t), c, prompt), cache, PROMPT),
        "decode": (lambda t, c, tok: decode(lora.merge(t), c, tok), cache, _tok())})
    m = rlxjax.load(path, flat=True)
    assert m.functions == ("train_step", "prefill", "decode")
    state = m.make_state(step.export_state(st, tmp_path / "init"))  # cache states: zero
    pkg_losses = [float(m(x=x, y=y, state=state)["out"]) for x, y in batches[2:]]

    adapters, o = tree["lora"], opt.init(tree["lora"])

    @jax.jit
    def jstep(a, o, x, y):
        lv, g = jax.value_and_grad(lambda a: loss({"base": tree["base"], "lora": a}, x, y))(a)
        u, o = opt.update(g, o, a)
        return optax.apply_updates(a, u), o, lv

    jax_losses = []
    for x, y in batches:
        adapters, o, lv = jstep(adapters, o, x, y)
        jax_losses.append(float(lv))
    np.testing.assert_allclose(compiled_losses + pkg_losses, jax_losses, rtol=1e-4)
    merged = lora.merge({"base": tree["base"], "lora": adapters})
    want, want_logits, _ = jax_generate(merged, cache)
    p, d = m.function("prefill"), m.function("decode")
    assert d.input_names == ("tok",) and d.output_names == ("out",)
    got, got_logits = generate(lambda q: p(q, state=state)["out"],
                               lambda t: d(t, state=state)["out"])
    assert got == want
    np.testing.assert_allclose(got_logits, want_logits, rtol=0, atol=ATOL)


@pytest.mark.slow
def test_io_train_step_package_decodes_with_fed_params(tmp_path):
    """state="io": prefill / decode take the parameters as inputs under the step's feature
    names (the new_param outputs of its latest call) and keep only the cache in state."""
    params, cache = _init()

    def loss(p, x, y):
        logits = MODEL.apply({"params": p}, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    data = np.random.default_rng(1).integers(0, V, (2, 9)).astype(np.int32)
    step = rlxjax.coreml_train_step(loss, optax.sgd(1e-1), target="iOS18")
    st = step.init(params, data[:, :-1], data[:, 1:])
    st, _ = step(st, data[:, :-1], data[:, 1:])
    path = step.save(tmp_path / "io.mlpackage", functions={
        "prefill": (prefill, cache, PROMPT), "decode": (decode, cache, _tok())})
    m = rlxjax.load(path, flat=True)
    names = [f.feature for f in step._latest.layout.inputs if f.role == "param"]
    feeds = dict(zip(names, jax.tree_util.tree_leaves(st.params)))
    p, d = m.function("prefill"), m.function("decode")
    assert d.input_names == tuple(names) + ("tok",) and d.output_names == ("out",)
    state = d.make_state()
    got, got_logits = generate(lambda q: p(**feeds, prompt=q, state=state)["out"],
                               lambda t: d(**feeds, tok=t, state=state)["out"])
    want, want_logits, _ = jax_generate(jax.tree_util.tree_map(jnp.asarray, st.params), cache)
    assert got == want
    np.testing.assert_allclose(got_logits, want_logits, rtol=0, atol=ATOL)
