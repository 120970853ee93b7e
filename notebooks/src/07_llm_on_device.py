"""Source of notebooks/07_llm_on_device.ipynb: build with python tools/build_notebooks.py."""

# %% [markdown]
# # A language model fine-tuned and generating on the device
#
# The on-device job people ask for most: personalise a small language model with LoRA
# adapters trained on the user's text, then generate with the adapted weights - from one
# package. Here a small flax causal LM (written as flax writes a decoder with a KV cache:
# `nn.MultiHeadDotProductAttention(decode=True)` keeps `cached_key`, `cached_value` and
# `cache_index` in the `cache` collection) is
#
# 1. LoRA fine-tuned on a toy corpus through the compiled training step (`state="mlstate"`:
#    the adapters and Adam's moments live in Core ML states), checked against JAX + optax;
# 2. saved as **one package** with three functions over one set of weights: `train_step`,
#    `prefill` (the prompt into the cache) and `decode` (one token), the KV cache in device
#    state - `decode` takes a token and returns logits, no cache goes in or out;
# 3. asked for a greedy continuation, token for token what JAX generates on the same weights;
#    and the decode step's tokens/s measured on the reference backend.

# %%
import os, time
import jax, jax.numpy as jnp, numpy as np, optax
import flax.linen as nn
import matplotlib.pyplot as plt
import rlxjax
from rlxjax import lora

# %% [markdown]
# ## A toy corpus: counting in threes
#
# Sequences over a 16-letter vocabulary that count in threes from a random start, wrapping
# around (`a d g j m p c f ...`). The model has to learn the step from what it has seen.

# %%
V, T, BATCH, MAX_LEN = 16, 12, 16, 32
LETTERS = "abcdefghijklmnop"
rng = np.random.default_rng(0)


def corpus(n):
    start = rng.integers(0, V, (n, 1))
    return ((start + 3 * np.arange(T + 1)) % V).astype(np.int32)   # inputs + next token


def text(tokens):
    return " ".join(LETTERS[t] for t in np.ravel(tokens))


batches = [(b[:, :-1], b[:, 1:]) for b in (corpus(BATCH) for _ in range(8))]
print("a training sequence:", text(batches[0][0][0]))

# %% [markdown]
# ## The model, as flax writes a decoder with a cache
#
# Pre-norm blocks of causal self-attention and an MLP. With `decode=True` every attention
# layer appends the new token's key and value to its cache and attends over what it holds;
# the position embedding keeps its own `index` in the cache (flax's lm1b `AddPositionEmbs`).
# The same parameters serve both modes.

# %%
D, HEADS, LAYERS = 32, 2, 2


class PosEmb(nn.Module):
    decode: bool = False

    @nn.compact
    def __call__(self, x):
        pe = self.param("pos", nn.initializers.normal(0.02), (MAX_LEN, x.shape[-1]))
        if not self.decode:
            return x + pe[None, :x.shape[1]]
        is_init = self.has_variable("cache", "index")
        idx = self.variable("cache", "index", lambda: jnp.array(0, jnp.int32))
        if not is_init:
            return x + pe[None, :x.shape[1]]
        i = idx.value
        idx.value = i + x.shape[1]
        return x + jax.lax.dynamic_slice_in_dim(pe, i, x.shape[1])[None]


class Block(nn.Module):
    decode: bool = False

    @nn.compact
    def __call__(self, x):
        mask = None if self.decode else nn.make_causal_mask(jnp.ones(x.shape[:2]))
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=HEADS, decode=self.decode)(h, mask=mask)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(D)(nn.gelu(nn.Dense(4 * D)(h)))


class LM(nn.Module):
    decode: bool = False

    @nn.compact
    def __call__(self, tokens):
        x = PosEmb(self.decode)(nn.Embed(V, D)(tokens))
        for _ in range(LAYERS):
            x = Block(self.decode)(x)
        return nn.Dense(V)(nn.LayerNorm()(x))


model, decoder = LM(), LM(decode=True)
params = model.init(jax.random.key(0), jnp.zeros((1, MAX_LEN), jnp.int32))["params"]
cache = decoder.init(jax.random.key(0), jnp.zeros((1, MAX_LEN), jnp.int32))["cache"]
print("parameters:", sum(x.size for x in jax.tree.leaves(params)))
print("cache:", {"/".join(k.key for k in p): v.shape
                 for p, v in jax.tree_util.tree_flatten_with_path(cache)[0]})

# %% [markdown]
# ## LoRA fine-tuning through the compiled step
#
# `rlxjax.lora.add_adapters` puts rank-8 adapters on every 2-D kernel; the step trains only
# them (`trainable=lora.TRAINABLE`), the base is baked into the program as weights. JAX +
# optax run the same steps beside it.

# %%
tree = lora.add_adapters(params, rank=8, key=jax.random.key(1),
                         select=lambda path, leaf: path[-1].key == "kernel" and leaf.ndim == 2)


def loss(t, x, y):
    logits = model.apply({"params": lora.merge(t)}, x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


STEPS = 40
opt = optax.adam(3e-2)
step = rlxjax.coreml_train_step(loss, opt, state="mlstate", trainable=lora.TRAINABLE)
t0 = time.perf_counter()
state = step.init(tree, *batches[0])
state, losses = step.fit(state, batches, steps=STEPS, progress=False)
print(f"compile + {STEPS} steps: {time.perf_counter() - t0:.1f} s; "
      f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")


@jax.jit
def jax_step(a, o, x, y):
    lv, g = jax.value_and_grad(lambda a: loss({"base": tree["base"], "lora": a}, x, y))(a)
    u, o = opt.update(g, o, a)
    return optax.apply_updates(a, u), o, lv


adapters, o, jax_losses = tree["lora"], opt.init(tree["lora"]), []
for i in range(STEPS):
    adapters, o, lv = jax_step(adapters, o, *batches[i % len(batches)])
    jax_losses.append(float(lv))
rel = np.max(np.abs(np.array(losses) - jax_losses) / np.array(jax_losses))
print(f"largest relative loss difference, compiled vs JAX + optax: {rel:.1e}")
np.testing.assert_allclose(losses, jax_losses, rtol=1e-4)

# %% [markdown]
# ## One package: `train_step`, `prefill`, `decode`
#
# Each inference function is `fn(params, cache, *inputs) -> (out, new_cache)`, as flax's
# `apply(..., mutable=["cache"])` returns it; `step.save(path, functions=...)` compiles them
# beside the training step. The cache becomes Core ML states: fp16 tensors, so each fp32
# value is stored exactly as three fp16 pieces (the same codec that keeps the adapters in
# state) - the decode step reads and writes it in place. `prefill` runs the prompt through
# the one-token step in a `lax.scan` (a MIL `while_loop`). In mlstate mode both read the
# adapters from the training states: they generate with the weights the latest step wrote.

# %%
def step_fn(p, cache, tok):
    logits, v = decoder.apply({"params": p, "cache": cache}, tok, mutable=["cache"])
    return logits[:, -1], v["cache"]


def prefill(t, cache, prompt):
    p = lora.merge(t)

    def body(c, tok):
        logits, c = step_fn(p, c, tok.reshape(1, 1))
        return c, logits

    cache, logits = jax.lax.scan(body, cache, prompt[0])
    return logits[-1], cache


def decode(t, cache, tok):
    return step_fn(lora.merge(t), cache, tok)


prompt = np.array([[0, 3, 6]], np.int32)              # "a d g"
tok = np.zeros((1, 1), np.int32)
os.makedirs("out", exist_ok=True)
t0 = time.perf_counter()
path = step.save("out/lm.mlpackage", functions={"prefill": (prefill, cache, prompt),
                                                "decode": (decode, cache, tok)})
print(f"saved in {time.perf_counter() - t0:.1f} s")
m = rlxjax.load(path, flat=True)
for name in m.functions:
    f = m.function(name)
    print(f"{name:10s} inputs {list(f.input_names)}  outputs {list(f.output_names)}")
print("states:", list(m.state_names))

# %% [markdown]
# ## Generation from the package, against JAX
#
# One state for the whole package, filled with the trained adapters (`step.export_state`,
# what an app loads into its `MLState`; the cache states start at zero: an empty cache).
# `prefill` takes the prompt, then `decode` one token at a time, greedy. JAX generates with
# the same weights (the JAX-trained adapters) by its own loop.

# %%
shared = m.make_state(step.export_state(state, "out/init_state"))
pre, dec = m.function("prefill"), m.function("decode")
N_NEW = 16

logits = pre(prompt, state=shared)["out"]
generated, times = [], []
for _ in range(N_NEW):
    t = np.argmax(logits, -1).astype(np.int32)
    generated.append(int(t[0]))
    t0 = time.perf_counter()
    logits = dec(t[:, None], state=shared)["out"]
    times.append(time.perf_counter() - t0)

jax_params = lora.merge({"base": tree["base"], "lora": adapters})
logits, c = jax.jit(prefill)({"base": tree["base"], "lora": adapters}, cache, prompt)
jax_generated = []
for _ in range(N_NEW):
    t = jnp.argmax(logits, -1).astype(jnp.int32)
    jax_generated.append(int(t[0]))
    logits, c = jax.jit(decode)({"base": tree["base"], "lora": adapters}, c, t[:, None])

print("prompt:        ", text(prompt))
print("package:       ", text(generated))
print("JAX:           ", text(jax_generated))
print("counting by 3: ", text((prompt[0, -1] + 3 * np.arange(1, N_NEW + 1)) % V))
assert generated == jax_generated
print(f"decode step on the reference backend: {1 / np.median(times):.0f} tokens/s "
      f"(median of {N_NEW})")

# %% [markdown]
# The reference backend is a numpy interpreter of the MIL program (the oracle the tests
# trust, not a fast runtime); `backend="reference-fast"` runs the same program with
# identical bits. On a Mac, `backend="coreml"` runs it on Core ML itself.

# %%
fast = rlxjax.load(path, backend="reference-fast", flat=True)
st_fast = fast.make_state(step.export_state(state, "out/init_state"))
logits = fast.function("prefill")(prompt, state=st_fast)["out"]
fast_times, fast_generated = [], []
for _ in range(N_NEW):
    t = np.argmax(logits, -1).astype(np.int32)
    fast_generated.append(int(t[0]))
    t0 = time.perf_counter()
    logits = fast.function("decode")(t[:, None], state=st_fast)["out"]
    fast_times.append(time.perf_counter() - t0)
assert fast_generated == generated
print(f"decode step on reference-fast: {1 / np.median(fast_times):.0f} tokens/s")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
ax1.plot(losses, label="compiled step (rlxjax)")
ax1.plot(jax_losses, "--", label="JAX + optax")
ax1.set_xlabel("step"); ax1.set_ylabel("loss"); ax1.set_title("LoRA fine-tuning")
ax1.legend()
ax2.plot(1e3 * np.array(times), "o-", label="reference")
ax2.plot(1e3 * np.array(fast_times), "s-", label="reference-fast")
ax2.set_xlabel("generated token"); ax2.set_ylabel("decode step (ms)")
ax2.set_title("decode with the KV cache in state"); ax2.legend()
plt.tight_layout()
plt.show()

# %% [markdown]
# On the device (Swift, iOS 18 / macOS 15; not run here): one `MLState` from any function's
# model, filled from `out/init_state`, serves all three.
#
# ```swift
# func load(_ function: String) throws -> MLModel {
#     let config = MLModelConfiguration()
#     config.functionName = function           // "train_step", "prefill" or "decode"
#     return try MLModel(contentsOf: compiledURL, configuration: config)
# }
# let train = try load("train_step"), prefill = try load("prefill"), decode = try load("decode")
# let state = train.makeState()                // fill the state_* buffers from init_state
# _ = try train.prediction(from: batch, using: state)              // a LoRA step
# var out = try prefill.prediction(from: ["prompt": prompt], using: state)
# for _ in 0..<16 {                            // the cache_* states grow in place
#     let next = argmax(out.featureValue(for: "out")!.multiArrayValue!)
#     out = try decode.prediction(from: ["tok": next], using: state)
# }
# ```
#
# A new conversation starts from an empty cache: zero the `cache_*` buffers (or make a state
# and copy the `state_*` buffers in).
