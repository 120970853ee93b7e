"""Source of notebooks/05_finetune.ipynb: build with python tools/build_notebooks.py."""

# %% [markdown]
# # Fine-tuning LoRA adapters on a frozen int8 base
#
# Personalising a pretrained model on a device: the base stays frozen and compressed, a small
# set of low-rank adapters (LoRA) is trained on the user's data, and the same package that
# trains also predicts.
#
# Here: a tiny transformer language model is pretrained in JAX + optax, then its LoRA adapters
# are fine-tuned on a *shifted* data set through `rlxjax.coreml_train_step` with
# `trainable={"base": False, "lora": True}` and `compress="int8"` (the frozen base is stored as
# Core ML int8 `constexpr` weights); the compiled losses are checked against JAX + optax on the
# dequantised base; and one multifunction package with `train_step` and `predict` is saved,
# loaded, trained and asked for predictions with one shared state.

# %%
import os, json
import jax, jax.numpy as jnp, numpy as np, optax
import flax.linen as nn
from flax.traverse_util import flatten_dict, unflatten_dict
import matplotlib.pyplot as plt
import rlxjax

# %% [markdown]
# ## Data: counting, then counting in twos
#
# Sequences of `T` tokens over a vocabulary of `V` letters. The pretraining corpus counts
# (`c d e f ...`, wrapping around, from a random start); the fine-tuning corpus, the shifted
# data set, counts in twos (`c e g i ...`). A model that learnt the first gets the second
# wrong at every position after the first.

# %%
V, T, BATCH = 16, 12, 16
LETTERS = "abcdefghijklmnop"
rng = np.random.default_rng(0)


def corpus(n, stride):
    start = rng.integers(0, V, (n, 1))
    return ((start + stride * np.arange(T + 1)) % V).astype(np.int32)  # inputs + next token


def text(tokens):
    return " ".join(LETTERS[t] for t in tokens)


pretrain = [corpus(BATCH, 1) for _ in range(8)]
shifted = [corpus(BATCH, 2) for _ in range(8)]
shifted_eval = corpus(64, 2)
print("pretraining:", text(pretrain[0][0]))
print("shifted:    ", text(shifted[0][0]))

# %% [markdown]
# ## A small transformer LM (flax)
#
# Token and position embeddings, two pre-norm blocks of causal self-attention and an MLP,
# width 32: about 30 000 parameters. Attention uses one fused `qkv` kernel, so the kernels
# LoRA adapts are plain 2-D matrices.

# %%
D, HEADS, LAYERS = 32, 2, 2


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        t = x.shape[1]
        h = nn.LayerNorm()(x)
        q, k, v = jnp.split(nn.Dense(3 * D, name="qkv")(h).reshape(-1, t, 3 * HEADS, D // HEADS),
                            3, axis=2)
        att = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(D // HEADS)
        att = jnp.where(np.tril(np.ones((t, t), bool)), att, -1e9)
        y = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(att, -1), v).reshape(-1, t, D)
        x = x + nn.Dense(D, name="out")(y)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(D, name="fc2")(nn.gelu(nn.Dense(4 * D, name="fc1")(h)))


class LM(nn.Module):
    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(V, D)(tokens) + self.param("pos", nn.initializers.normal(0.02), (T, D))
        for i in range(LAYERS):
            x = Block(name=f"block{i}")(x)
        return nn.Dense(V, name="head")(nn.LayerNorm()(x))


model = LM()
params = model.init(jax.random.PRNGKey(0), pretrain[0][:, :-1])


def lm_loss(p, seq):
    logits = model.apply(p, seq[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, seq[:, 1:]).mean()


print("parameters:", sum(x.size for x in jax.tree.leaves(params)))

# %% [markdown]
# ## Pretraining in JAX + optax

# %%
opt = optax.adam(3e-3)


@jax.jit
def jax_step(p, s, seq):
    l, g = jax.value_and_grad(lm_loss)(p, seq)
    u, s = opt.update(g, s, p)
    return optax.apply_updates(p, u), s, l


s = opt.init(params)
pretrain_loss = []
for i in range(200):
    params, s, l = jax_step(params, s, pretrain[i % len(pretrain)])
    pretrain_loss.append(float(l))
print(f"pretraining loss {pretrain_loss[0]:.3f} -> {pretrain_loss[-1]:.4f}")
print(f"pretrained model on the shifted data: loss {float(lm_loss(params, shifted_eval)):.3f}")

# %% [markdown]
# ## LoRA adapters, in plain JAX
#
# The adapters are their own subtree: `{"base": params, "lora": {...}}`. For each adapted
# kernel `W` (d_in x d_out) there is `A` (d_in x r), small random, and `B` (r x d_out), zero, so
# training starts from the pretrained model; the loss computes with `W + (alpha/r)·A·B`. Here
# rank 4 on the attention (`qkv`, `out`) and MLP (`fc1`, `fc2`) kernels of both blocks.

# %%
RANK, ALPHA = 4, 8.0
ADAPTED = ("qkv", "out", "fc1", "fc2")


def lora_init(base, rank, key):
    lora = {}
    for path, w in flatten_dict(base["params"]).items():
        if path[-1] == "kernel" and path[-2] in ADAPTED:
            key, sub = jax.random.split(key)
            lora["_".join(path[:-1])] = {
                "a": np.asarray(jax.random.normal(sub, (w.shape[0], rank)) / np.sqrt(w.shape[0])),
                "b": np.zeros((rank, w.shape[1]), np.float32)}
    return lora


def merged(p):
    """The base with W + (alpha/r)·A·B for every adapted kernel."""
    flat = flatten_dict(p["base"]["params"])
    for path in flat:
        name = "_".join(path[:-1])
        if path[-1] == "kernel" and name in p["lora"]:
            ab = p["lora"][name]
            flat[path] = flat[path] + (ALPHA / RANK) * ab["a"] @ ab["b"]
    return {"params": unflatten_dict(flat)}


def lora_loss(p, seq):
    return lm_loss(merged(p), seq)


full = {"base": jax.tree.map(np.asarray, params), "lora": lora_init(params, RANK,
                                                                    jax.random.PRNGKey(1))}
print("adapted kernels:", sorted(full["lora"]))
print("trainable parameters:", sum(x.size for x in jax.tree.leaves(full["lora"])),
      "of", sum(x.size for x in jax.tree.leaves(full)))

# %% [markdown]
# ## Fine-tuning through the compiled step, on an int8 base
#
# `trainable={"base": False, "lora": True}` makes the base program weights (no inputs, no
# optimizer state, no weight gradients), and `compress="int8"` stores its matrices as int8
# per-channel (Core ML `constexpr_blockwise_shift_scale`). The program computes with the
# dequantised base; `step.params(state)` returns the tree as the program sees it.
#
# `state="mlstate"` keeps the adapters and the optimizer state in the program's states, and
# `target="iOS18"` allows the multifunction package below.

# %%
STEPS = 40
ft_opt = optax.adam(1e-2)
step = rlxjax.coreml_train_step(lora_loss, ft_opt, trainable={"base": False, "lora": True},
                                compress="int8", state="mlstate", target="iOS18")
state = step.init(full, shifted[0])
dequantised = jax.tree.map(np.asarray, step.params(state))   # the int8 base as the program sees it
state, ft_loss = step.fit(state, shifted, steps=STEPS, progress=False)
print(f"fine-tuning loss {ft_loss[0]:.3f} -> {ft_loss[-1]:.4f}")
print("MIL ops of the step:", sum(step.last_compiled.op_histogram().values()),
      " int8 weights:", step.last_compiled.op_histogram().get("constexpr_blockwise_shift_scale"))
rep = step.compression
print(f"frozen weights: {rep.stored_bytes} bytes stored (fp32: {rep.fp32_bytes}), "
      f"largest |w_int8 - w| = {rep.max_abs_error:.2e}")

# %% [markdown]
# ### Parity: the same fine-tune in JAX + optax on the dequantised base
#
# Same initial adapters, same batches, the base fixed at the dequantised int8 values the
# program uses:

# %%
base_dq = dequantised["base"]


@jax.jit
def jax_lora_step(lora, s, seq):
    l, g = jax.value_and_grad(lambda a: lora_loss({"base": base_dq, "lora": a}, seq))(lora)
    u, s = ft_opt.update(g, s, lora)
    return optax.apply_updates(lora, u), s, l


lora, s = full["lora"], ft_opt.init(full["lora"])
jax_ft_loss = []
for i in range(STEPS):
    lora, s, l = jax_lora_step(lora, s, shifted[i % len(shifted)])
    jax_ft_loss.append(float(l))
rel = np.max(np.abs(np.array(ft_loss) - jax_ft_loss) / np.array(jax_ft_loss))
print(f"{STEPS} losses, largest relative difference compiled vs JAX + optax: {rel:.1e}")
np.testing.assert_allclose(ft_loss, jax_ft_loss, rtol=1e-4)

# %% [markdown]
# ### Base against fine-tuned

# %%
tuned = jax.tree.map(np.asarray, step.params(state))
eval_base = float(lm_loss(params, shifted_eval))
eval_int8 = float(lora_loss(dequantised, shifted_eval))
eval_tuned = float(lora_loss(tuned, shifted_eval))
print(f"held-out loss on the shifted data: pretrained fp32 {eval_base:.3f}, "
      f"int8 base {eval_int8:.3f}, fine-tuned (int8 base + LoRA) {eval_tuned:.4f}")

fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
ax1.plot(pretrain_loss, label="pretraining (JAX)")
ax1.set(xlabel="step", ylabel="cross-entropy", yscale="log", title="pretraining, counting")
ax2.plot(jax_ft_loss, label="JAX + optax, dequantised base", linewidth=4, alpha=0.4)
ax2.plot(ft_loss, label="rlxjax program, int8 base", linewidth=1)
ax2.axhline(eval_base, color="gray", linestyle="--", label="pretrained base (held out)")
ax2.axhline(eval_tuned, color="green", linestyle=":", label="fine-tuned (held out)")
ax2.set(xlabel="step", ylabel="cross-entropy", yscale="log",
        title="LoRA fine-tuning, counting in twos")
for ax in (ax1, ax2):
    ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Package sizes per compression scheme
#
# `export_inference(..., compress=)` writes an inference package of the pretrained model with
# its matrices compressed (vectors, such as biases and norm scales, stay fp32). The size of
# the weights file per scheme, and the largest error of the dequantised weights:

# %%
def weight_bytes(package):
    return os.path.getsize(os.path.join(package, "Data", "com.apple.CoreML", "weights",
                                        "weight.bin"))


os.makedirs("out", exist_ok=True)
x_query = shifted_eval[:1, :-1]
rows = []
for scheme in (None, "fp16", "int8", "int4", "palettize8", "palettize4"):
    path = f"out/lm_{scheme or 'fp32'}.mlpackage"
    c = rlxjax.export_inference(model.apply, params, x_query, path=path, target="iOS18",
                                compress=scheme)
    err = 0.0 if scheme is None else c.compression.max_abs_error
    rows.append((scheme or "fp32", weight_bytes(path), err))
fp32 = rows[0][1]
print(f"{'scheme':12s} {'weight.bin bytes':>17s} {'x fp32':>7s} {'max |w_q - w|':>14s}")
for name, size, err in rows:
    print(f"{name:12s} {size:17d} {size / fp32:7.3f} {err:14.2e}")

# %% [markdown]
# (At this size the fp32 vectors and the per-channel scales weigh relatively more than in a
# large model: see `python bench/finetune.py` for a GPT-2-sized one.)
#
# ## One package that trains and predicts
#
# `step.save(path, predict=(fn, *example_inputs))` writes a multifunction ML Program with the
# functions `train_step` and `predict`; both read the same int8 base (stored once) and the same
# states, so `predict` uses the adapters the last `train_step` wrote. `predict` here returns
# the most likely next token at every position.

# %%
def predict(p, tokens):
    return jnp.argmax(model.apply(merged(p), tokens), -1).astype(jnp.int32)


fresh = step.init(full, shifted[0])    # the untrained adapters
path = step.save("out/lm_lora.mlpackage", predict=(predict, x_query))
folder = step.export_state(fresh, "out/initial_state")   # the files an app ships
m = rlxjax.load(path, flat=True)
print(m.functions, "default:", m.function_name)

shared = m.make_state()                 # one state for both functions
for row in json.load(open(os.path.join(folder, "state.json")))["states"]:
    shared.write_state(row["name"],
                       np.fromfile(os.path.join(folder, row["name"] + ".f16"), "<f2"))

predictor = m.function("predict")
print("query:               ", text(x_query[0]))
print("predicted, untrained:", text(predictor(x_query, state=shared)["out"][0]))
pkg_loss = [float(m(seq, state=shared)["out"]) for seq in shifted[:8] * 3]   # 24 train steps
print(f"24 steps through the loaded package: loss {pkg_loss[0]:.3f} -> {pkg_loss[-1]:.4f}")
print("predicted, trained:  ", text(predictor(x_query, state=shared)["out"][0]))
print("wanted:              ", text(shifted_eval[0, 1:]))
np.testing.assert_allclose(pkg_loss, ft_loss[:24], rtol=1e-4)   # the same steps as step.fit

# %% [markdown]
# The loaded package's `train_step` repeats `step.fit`'s first 24 losses (checked above), and
# its `predict` reads the adapters those steps wrote from the shared state. On a device the
# same two functions run from one `MLState` (Swift: README, "One package that trains and
# predicts"). `step.export_params(state, "adapters.safetensors")` writes the whole tree (the
# base as the program sees it and the trained adapters, named by their pytree paths) for JAX
# or other tools:

# %%
step.export_params(state, "out/adapters.safetensors")
from safetensors.numpy import load_file

saved = load_file("out/adapters.safetensors")
print(len(saved), "tensors; the adapters:")
for k, v in sorted(saved.items()):
    if k.startswith("lora/"):
        print(f"  {k:22s} {v.shape}")

# %% [markdown]
# ## The same fine-tune on Apple's Core AI runtime
#
# `format="aimodel"` compiles the same step to a Core AI program (iOS / macOS 27) and runs it
# on Apple's Core AI runtime, which `coreai-core` ships for Linux too (`pip install
# "rlxjax[coreai]"`; docs/coreai.md). Core AI's states are fp32: the adapters and the adam
# state live in them as they are (no fp16 codec), and the int8 base is dequantised by Core AI's
# `blockwise_shift_scale`, to the same values. The losses are the JAX + optax ones above, and
# one `.aimodel` holds `train_step` and `predict` over one set of states.

# %%
import importlib.util

if importlib.util.find_spec("coreai") is None:
    print('Core AI section skipped: pip install "rlxjax[coreai]" to run it')
else:
    ai_step = rlxjax.coreml_train_step(lora_loss, ft_opt, trainable={"base": False, "lora": True},
                                       compress="int8", state="mlstate", format="aimodel")
    ai_state = ai_step.init(full, shifted[0])
    ai_state, ai_loss = ai_step.fit(ai_state, shifted, steps=STEPS, progress=False)
    ai_rel = np.max(np.abs(np.array(ai_loss) - jax_ft_loss) / np.array(jax_ft_loss))
    print(f"Core AI runtime: loss {ai_loss[0]:.3f} -> {ai_loss[-1]:.4f}; largest relative "
          f"difference from JAX + optax {ai_rel:.1e}")
    np.testing.assert_allclose(ai_loss, jax_ft_loss, rtol=1e-4)
    ops = ai_step.last_compiled.executable.operations()
    print("Core AI ops of the step:", sum(o.type != "constant" for o in ops),
          " int8 weights:", sum(o.type == "blockwise_shift_scale" for o in ops))
    ai_path = ai_step.save("out/lm_lora.aimodel", predict=(predict, x_query))
    ai_folder = ai_step.export_state(ai_state, "out/lm_lora.aimodel.state")
    app = rlxjax.load(ai_path, flat=True)
    print(app.functions, "states:", app.state_names)
    ai_pred = app.run("predict", x_query, state=app.make_state(ai_folder))["out"]
    print("predicted on Core AI:", text(ai_pred[0]))
    want_pred = np.asarray(predict(ai_step.params(ai_state), x_query))
    assert np.array_equal(ai_pred, want_pred), (ai_pred, want_pred)
