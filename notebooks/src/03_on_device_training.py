"""Source of notebooks/03_on_device_training.ipynb: build with python tools/build_notebooks.py."""

# %% [markdown]
# # On-device training
#
# `rlxjax.coreml_train_step(loss, optimizer)` compiles one whole training step (forward,
# backward and the optax update) into a single Core ML ML Program. Its inputs are the
# parameters, the optimizer state and a batch; its outputs are the loss, the new parameters and
# the new optimizer state. An app calls it in a loop, feeding the new values back in, and so
# trains the model on the device.
#
# Here: a digits classifier, trained through its compiled program next to the same training in
# JAX + optax, then exported. Off macOS the program runs on the reference backend (rlxjax's
# numpy interpreter of MIL); on a Mac it runs on Core ML. Both run the *same* program an app
# would run.

# %%
import os, json
import jax, jax.numpy as jnp, numpy as np, optax
import flax.linen as nn
import matplotlib.pyplot as plt
import rlxjax
from rlxjax.demo import make_digits   # the data set of `rlxjax demo`

# %% [markdown]
# ## Data
#
# 8×8 "digits" the code makes itself (no download, no scikit-learn): ten stroke templates,
# each sample shifted by up to a pixel, with random stroke intensity and pixel noise.

# %%
images, labels = make_digits(1000, seed=0)
onehot = np.eye(10, dtype=np.float32)[labels]
x_train, y_train = images[:800], onehot[:800]
x_test, label_test = images[800:], labels[800:]
BATCH = 100
batches = [(x_train[i:i + BATCH], y_train[i:i + BATCH]) for i in range(0, 800, BATCH)]

fig, axes = plt.subplots(1, 10, figsize=(10, 1.4))
for ax, img, lab in zip(axes, images, labels):
    ax.imshow(img.reshape(8, 8), cmap="gray_r")
    ax.set_title(str(lab))
    ax.axis("off")
plt.show()

# %% [markdown]
# ## Model and loss
#
# Any JAX loss works: flax, equinox or `jax.numpy`. The flax `LayerNorm` is recognised and
# gets rlxjax's fused backward op.

# %%
class Classifier(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.LayerNorm()(x)
        x = nn.gelu(nn.Dense(32)(x))
        return nn.Dense(10)(x)


model = Classifier()
params = jax.jit(model.init)(jax.random.PRNGKey(0), x_train[:1])


def loss(params, x, y):
    return optax.softmax_cross_entropy(model.apply(params, x), y).mean()


# %% [markdown]
# ## The training program
#
# `coreml_train_step` returns a function like a JAX training step: `init` makes the
# `TrainState` (parameters and optimizer state, numpy arrays), and `step(state, x, y)` runs one
# step through the compiled ML Program. It compiles on the first call, once per batch shape.
#
# Held-out accuracy is measured with a second compiled program, the classifier itself, which
# takes the current parameters as an input.

# %%
STEPS, EVAL_EVERY = 200, 10
opt = optax.adam(1e-2)
step = rlxjax.coreml_train_step(loss, opt)
accuracy_program = rlxjax.coreml_jit(lambda p, x: jnp.argmax(model.apply(p, x), -1))


def accuracy(predicted):
    return float(np.mean(np.asarray(predicted) == label_test))


def progress(i, n, loss, acc):
    bar = "#" * (30 * i // n)
    print(f"\r[{bar:.<30}] {i}/{n}  loss {loss:.4f}  held-out accuracy {acc:.1%}", end="")


state = step.init(params)
rlx_loss, rlx_acc = [], []
for i in range(STEPS):
    state, l = step(state, *batches[i % len(batches)])
    rlx_loss.append(float(l))
    if (i + 1) % EVAL_EVERY == 0:
        rlx_acc.append(accuracy(accuracy_program(state.params, x_test)))
        progress(i + 1, STEPS, rlx_loss[-1], rlx_acc[-1])
print()

# %% [markdown]
# The same training in JAX + optax, from the same initial parameters and the same batches:

# %%
@jax.jit
def jax_step(p, s, x, y):
    l, g = jax.value_and_grad(loss)(p, x, y)
    updates, s = opt.update(g, s, p)
    return optax.apply_updates(p, updates), s, l


jax_predict = jax.jit(lambda p, x: jnp.argmax(model.apply(p, x), -1))
p, s = params, opt.init(params)
jax_loss, jax_acc = [], []
for i in range(STEPS):
    p, s, l = jax_step(p, s, *batches[i % len(batches)])
    jax_loss.append(float(l))
    if (i + 1) % EVAL_EVERY == 0:
        jax_acc.append(accuracy(jax_predict(p, x_test)))

print(f"final loss: rlxjax {rlx_loss[-1]:.6f}   JAX {jax_loss[-1]:.6f}   "
      f"relative difference {abs(rlx_loss[-1] - jax_loss[-1]) / jax_loss[-1]:.1e}")
print(f"held-out accuracy: rlxjax {rlx_acc[-1]:.1%}   JAX {jax_acc[-1]:.1%}")
print("max |param difference| after training:", max(jax.tree_util.tree_leaves(
    jax.tree_util.tree_map(lambda a, b: float(np.max(np.abs(a - b))), state.params, p))))

# %% [markdown]
# Both runs compute in float32, in a different order of operations, so the parameters drift
# apart by rounding (adam divides by the square root of small second moments, which
# amplifies it), while the losses and the accuracy agree:

# %%
evals = np.arange(EVAL_EVERY, STEPS + 1, EVAL_EVERY)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.5))
ax1.plot(jax_loss, label="JAX + optax", linewidth=4, alpha=0.4)
ax1.plot(rlx_loss, label="rlxjax ML Program", linewidth=1)
ax1.set(xlabel="step", ylabel="cross-entropy", yscale="log", title="training loss")
ax2.plot(evals, jax_acc, label="JAX + optax", linewidth=4, alpha=0.4)
ax2.plot(evals, rlx_acc, label="rlxjax ML Program", linewidth=1, marker=".")
ax2.set(xlabel="step", ylabel="accuracy", title="held-out accuracy")
for ax in (ax1, ax2):
    ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Export
#
# `step.save` writes the training program an app runs; `export_inference` compiles the
# classifier with the trained parameters baked in as weights. `state.save` writes a checkpoint
# (atomically). `rlxjax inspect` describes a package: features and their roles, target, MIL ops.

# %%
os.makedirs("out", exist_ok=True)
train_path = step.save("out/train_step.mlpackage")
state.save("out/checkpoint.npz")
trained = step.params(state)
rlxjax.export_inference(lambda p, x: jax.nn.softmax(model.apply(p, x)), trained, x_test[:1],
                        path="out/digits.mlpackage")
print(sorted(os.listdir("out")))

# %%
from rlxjax.cli import main as rlxjax_command   # what the `rlxjax` command runs

rlxjax_command(["inspect", "out/digits.mlpackage"]);

# %% [markdown]
# The exported package runs anywhere rlxjax or Core ML runs; `rlxjax.load` reads it back:

# %%
digits = rlxjax.load("out/digits.mlpackage", flat=True)
print(digits)
probs = np.concatenate([digits(x_test[i:i + 1])["out"] for i in range(10)])
fig, axes = plt.subplots(1, 10, figsize=(10, 1.4))
for ax, img, pr in zip(axes, x_test, probs):
    ax.imshow(img.reshape(8, 8), cmap="gray_r")
    ax.set_title(f"{pr.argmax()} ({pr.max():.0%})", fontsize=9)
    ax.axis("off")
plt.show()

# %% [markdown]
# ## Running the training program on a device
#
# The training package's metadata key `rlxjax.train` lists every feature with its shape and
# role (`param`, `opt_state`, `batch`, `loss`, `new_param`, `new_opt_state`) and, for each
# `new_*` output, the input it `feeds` on the next call:

# %%
meta = json.loads(rlxjax.load(train_path, flat=True).spec.description.metadata.userDefined["rlxjax.train"])
rows = meta["inputs"] + meta["outputs"]
for role in ("param", "opt_state", "batch", "loss", "new_param", "new_opt_state"):
    print(f"{role:14s} {sum(r['role'] == role for r in rows):3d} features")
show = [r for r in rows if r["role"] in ("batch", "loss")] + \
    [r for r in meta["outputs"] if r["role"] == "new_param"][:2]
for r in show:
    feeds = f"  feeds {r['feeds']}" if "feeds" in r else ""
    print(f"  {r['feature']:32s} {r['dtype']}{r['shape']}  {r['role']} ({r['name']}){feeds}")

# %% [markdown]
# An app runs the saved step in a loop (Swift, Core ML, iOS 17 / macOS 14), with the feature
# names from that metadata; for this program:

# %%
from IPython.display import Markdown

batch_features = [r["feature"] for r in meta["inputs"] if r["role"] == "batch"]
loss_feature = next(r["feature"] for r in meta["outputs"] if r["role"] == "loss")
swift = f"""```swift
import CoreML

let model = try MLModel(contentsOf: compiledURL)      // MLModel.compileModel(at: .mlpackage)
var state: [String: MLMultiArray] = initialState       // params + optimizer state, by feature name
for (x, y) in batches {{
    var feeds = state
    feeds["{batch_features[0]}"] = x; feeds["{batch_features[1]}"] = y   // the batch features
    let out = try model.prediction(from: MLDictionaryFeatureProvider(dictionary: feeds))
    let loss = out.featureValue(for: "{loss_feature}")!.multiArrayValue![0].floatValue
    for (output, input) in feedsBack {{                  // from metadata "rlxjax.train"
        state[input] = out.featureValue(for: output)!.multiArrayValue!
    }}
}}
// export: the `param` features of `state` are the trained weights (names are pytree paths
// in each feature's description), e.g. to write them back into an inference model.
```"""
Markdown(swift)

# %% [markdown]
# `feedsBack` is the `output -> input` map of the metadata's `feeds` entries, and
# `initialState` holds the `param` and `opt_state` inputs, e.g. the arrays of
# `step.init(params)` or of a checkpoint. The README's "On-device training" section describes
# the convention.
