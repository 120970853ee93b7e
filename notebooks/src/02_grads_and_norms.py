"""Source of notebooks/02_grads_and_norms.ipynb: build with python tools/build_notebooks.py."""

# %% [markdown]
# # Gradients and norms
#
# Core ML has no automatic differentiation: an ML Program computes what it was given. To
# train on a device, the backward pass has to be *in* the program. `rlxjax.coreml_grad` builds
# it on rlxjax's own graph (the RLX graph): one VJP rule per op, and every normalisation layer
# paired with a **fused backward op** whose MIL is written by hand.
#
# This notebook builds a small model that uses every norm kind of `rlxjax.nn`, compiles its
# gradient with `coreml_grad`, checks it against `jax.grad`, and compares the size of the
# program with the baseline `coreml_jit(jax.grad(loss))` (JAX differentiates op by op, rlxjax
# compiles what JAX emits). Off macOS the programs run on the reference backend (rlxjax's numpy
# interpreter of MIL); on a Mac they run on Core ML.

# %%
import jax, jax.numpy as jnp, numpy as np
import matplotlib.pyplot as plt
import rlxjax
import rlxjax.nn as rnn

rng = np.random.default_rng(0)
f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)

# %% [markdown]
# ## A model with every norm kind
#
# `rlxjax.nn` holds the norms as JAX primitives: each is one equation in a jaxpr and works in
# plain JAX (`jit`, `grad`, `vmap`) too. The model below takes an NCHW image and a conditioning
# vector: `group_norm` and `layer_norm2d` on the feature map, then tokens through frozen
# `batch_norm`, `batch_norm_train` (batch statistics), `layer_norm`, `rms_norm`, and a DiT-style
# `ada_layer_norm` whose scale, shift and gate come from the conditioning, closed by a
# `gated_residual`.

# %%
B, C, H, W, D = 4, 8, 4, 4, 16

params = {
    "gn": {"scale": 1 + 0.1 * f32(C), "bias": 0.1 * f32(C)},
    "ln2d": {"scale": 1 + 0.1 * f32(C), "bias": 0.1 * f32(C)},
    "proj": f32(C, D) / np.sqrt(C),
    "bn": {"scale": 1 + 0.1 * f32(D), "bias": 0.1 * f32(D)},
    "bn_train": {"scale": 1 + 0.1 * f32(D), "bias": 0.1 * f32(D)},
    "ln": {"scale": 1 + 0.1 * f32(D), "bias": 0.1 * f32(D)},
    "rms": {"scale": 1 + 0.1 * f32(D)},
    "mlp": f32(D, D) / np.sqrt(D),
    "ada": f32(6, 3 * D) / np.sqrt(6),
}
stats = {"mean": 0.1 * f32(D), "var": np.abs(1 + 0.1 * f32(D))}   # frozen statistics
x = f32(B, C, H, W)
cond = f32(B, 6)


def model(params, x, cond):
    h = rnn.group_norm(x, params["gn"]["scale"], params["gn"]["bias"], num_groups=4)
    h = jax.nn.gelu(rnn.layer_norm2d(h, params["ln2d"]["scale"], params["ln2d"]["bias"]))
    tokens = h.reshape(B, C, H * W).transpose(0, 2, 1) @ params["proj"]          # [B, 16, D]
    h = rnn.batch_norm(tokens, params["bn"]["scale"], params["bn"]["bias"],
                       stats["mean"], stats["var"])
    h, _, _ = rnn.batch_norm_train(h, params["bn_train"]["scale"], params["bn_train"]["bias"],
                                   running_mean=stats["mean"], running_var=stats["var"])
    h = rnn.layer_norm(h, params["ln"]["scale"], params["ln"]["bias"])
    h = jax.nn.silu(rnn.rms_norm(h, params["rms"]["scale"]) @ params["mlp"])
    scale, shift, gate = jnp.split((cond @ params["ada"])[:, None, :], 3, axis=-1)
    h = rnn.ada_layer_norm(h, scale, shift, kind="layer")
    return rnn.gated_residual(tokens, h, gate)


def loss(params, x, cond):
    return jnp.mean(model(params, x, cond) ** 2)


print("loss:", jax.jit(loss)(params, x, cond))

# %% [markdown]
# ## `coreml_grad` against `jax.grad`
#
# `coreml_grad` has `jax.grad`'s signature. Its result is a pytree of numpy arrays with the
# structure of `params`:

# %%
grad_fn = rlxjax.coreml_grad(loss)
g_rlx = grad_fn(params, x, cond)
g_jax = jax.jit(jax.grad(loss))(params, x, cond)

errs = jax.tree_util.tree_map(lambda a, b: float(np.max(np.abs(a - np.asarray(b)))), g_rlx, g_jax)
for path, err in jax.tree_util.tree_flatten_with_path(errs)[0]:
    print(f"{jax.tree_util.keystr(path):28s} max |rlxjax - jax| = {err:.2e}")
assert max(jax.tree_util.tree_leaves(errs)) < 1e-4

# %% [markdown]
# In the RLX graph of the gradient, each norm's backward is one node (`layer_norm_grad`,
# `group_norm_grad`, ...), next to the forward norms whose statistics it reuses:

# %%
lowered = grad_fn.lower(params, x, cond)
hist = lowered.graph.op_histogram()
print({op: n for op, n in hist.items() if "norm" in op or "gated" in op})

# %% [markdown]
# ## Program size: fused backward against JAX's AD
#
# `coreml_jit(jax.grad(loss))` compiles the same gradient from the jaxpr JAX's autodiff emits,
# op by op. Both programs compute the same numbers; the fused one is much smaller, which is
# what matters on a device (fewer ops to dispatch, fewer intermediate tensors in memory):

# %%
fused = lowered.compile()
baseline = rlxjax.coreml_jit(jax.grad(loss)).lower(params, x, cond).compile()
g_base = baseline(params, x, cond)
print("max |fused - baseline| =", max(jax.tree_util.tree_leaves(jax.tree_util.tree_map(
    lambda a, b: float(np.max(np.abs(a - b))), g_rlx, g_base))))
n_fused, n_base = fused.cost_analysis()["mil_ops"], baseline.cost_analysis()["mil_ops"]
print(f"MIL ops (const excluded): coreml_grad {n_fused}, coreml_jit(jax.grad) {n_base} "
      f"({n_base / n_fused:.1f}x)")

# %% [markdown]
# The most frequent MIL ops of each program (`Compiled.op_histogram()`):

# %%
top = lambda h: list(h.items())[:8]
print("coreml_grad          ", top(fused.op_histogram()))
print("coreml_jit(jax.grad) ", top(baseline.op_histogram()))

# %% [markdown]
# ## Op counts per norm
#
# Each norm alone, in a loss `sum(norm(x, a, b) * w)` with a fixed random `w`: the MIL ops of
# the backward pass (gradients with respect to the input and the norm's two parameters) are
# the ops of the value-and-gradient program minus those of the forward program. rlxjax's fused
# backward against JAX's AD compiled op by op:

# %%
xs, xc = f32(4, 8, 16), f32(2, 8, 4, 4)
v16, v8 = f32(16), f32(8)
cases = {
    "layer_norm": (lambda x, g, b: rnn.layer_norm(x, g, b), (xs, v16, v16)),
    "rms_norm": (lambda x, g, b: rnn.rms_norm(x, g, b), (xs, v16, v16)),
    "group_norm": (lambda x, g, b: rnn.group_norm(x, g, b, num_groups=4), (xc, v8, v8)),
    "layer_norm2d": (lambda x, g, b: rnn.layer_norm2d(x, g, b), (xc, v8, v8)),
    "batch_norm": (lambda x, g, b: rnn.batch_norm(x, g, b, v16, np.abs(v16)), (xs, v16, v16)),
    "batch_norm_train": (lambda x, g, b: rnn.batch_norm_train(
        x, g, b, running_mean=v16, running_var=np.abs(v16))[0], (xs, v16, v16)),
    "ada_layer_norm": (lambda x, s, t: rnn.ada_layer_norm(x, s, t), (xs, f32(4, 1, 16), v16)),
    "gated_residual": (lambda x, y, g: rnn.gated_residual(x, y, g), (xs, xs, v16)),
}


def mil_ops(fn, *args):
    f = fn if isinstance(fn, rlxjax.CoreMLFunction) else rlxjax.coreml_jit(fn)
    return f.lower(*args).compile().cost_analysis()["mil_ops"]


rows = []
for name, (norm, args) in cases.items():
    wts = f32(*np.shape(args[0]))                        # a non-trivial output cotangent

    def total(*a, norm=norm, wts=wts):
        return jnp.sum(norm(*a) * wts)
    fwd = mil_ops(total, *args)
    ours = mil_ops(rlxjax.coreml_value_and_grad(total, argnums=(0, 1, 2)), *args) - fwd
    theirs = mil_ops(jax.value_and_grad(total, argnums=(0, 1, 2)), *args) - fwd
    rows.append((name, ours, theirs))
    print(f"{name:18s} fused backward {ours:3d} MIL ops   JAX AD {theirs:3d}")

# %%
names, ours, theirs = zip(*rows)
pos = np.arange(len(names))
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.bar(pos - 0.2, theirs, 0.4, label="coreml_jit(jax.value_and_grad)")
ax.bar(pos + 0.2, ours, 0.4, label="coreml_value_and_grad (fused)")
ax.set_xticks(pos, names, rotation=30, ha="right")
ax.set_ylabel("MIL ops of the backward pass")
ax.set_title("Backward pass of each norm: MIL ops")
ax.set_ylim(0, 1.3 * max(theirs))
ax.legend(loc="upper center", ncols=2)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Norms written by flax
#
# Norms don't have to come from `rlxjax.nn`. Decomposed norms written by flax, equinox or by
# hand are recognised when their pattern is mathematically identical, and get the same fused
# backward:

# %%
import flax.linen as nn


class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.GroupNorm(num_groups=2)(nn.Dense(8)(x))
        x = nn.RMSNorm()(nn.gelu(nn.Dense(8)(x)))
        return nn.Dense(4)(nn.LayerNorm()(x))


net = Net()
xf = f32(2, 4, 4, 3)
fparams = jax.jit(net.init)(jax.random.PRNGKey(0), xf)
floss = lambda p, x: jnp.mean(net.apply(p, x) ** 2)
g_hist = rlxjax.coreml_grad(floss).lower(fparams, xf).graph.op_histogram()
print({op: n for op, n in g_hist.items() if "norm" in op})
g_rlx, g_jax = rlxjax.coreml_grad(floss)(fparams, xf), jax.jit(jax.grad(floss))(fparams, xf)
err = jax.tree_util.tree_map(lambda a, b: float(np.max(np.abs(a - b))), g_rlx, g_jax)
print("max |rlxjax - jax| over all parameters:", max(jax.tree_util.tree_leaves(err)))
