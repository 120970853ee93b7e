"""Source of notebooks/04_dit_block.ipynb: build with python tools/build_notebooks.py."""

# %% [markdown]
# # A DiT block, trained as a denoiser
#
# Diffusion transformers (DiT) condition every block on the noise level through **adaLN-Zero**:
# a small network maps the conditioning to a shift, a scale and a gate per sub-layer; the
# activations are normalised and modulated, `norm(x)·(1 + scale) + shift`, and each sub-layer's
# output joins the residual stream through its gate, `x + gate·y`. The modulation layer starts
# at zero, so every block starts as the identity.
#
# `rlxjax.nn.ada_layer_norm` and `rlxjax.nn.gated_residual` are these two operations as JAX
# primitives, with fused backward ops in Core ML. This notebook trains a two-block DiT on a toy
# denoising task, through its compiled training program, next to the same training in JAX.

# %%
import jax, jax.numpy as jnp, numpy as np, optax
import flax.linen as nn
import matplotlib.pyplot as plt
import rlxjax
import rlxjax.nn as rnn

# %% [markdown]
# ## The task
#
# Signals of 64 samples, sums of two sinusoids with random frequencies, phases and amplitudes,
# cut into 8 tokens of 8 samples. A noise level `σ` in (0.1, 1) is drawn per signal, the
# model sees `x + σ·ε` and the sinusoidal embedding of `σ`, and predicts the noise `ε`
# (mean squared error), as a diffusion model's denoiser does.

# %%
T, P, D, N_BATCHES, BATCH = 8, 8, 16, 16, 16
rng = np.random.default_rng(0)


def signals(n):
    t = np.linspace(0, 1, T * P, endpoint=False)
    freq = rng.uniform(1, 4, (n, 2, 1))
    phase = rng.uniform(0, 2 * np.pi, (n, 2, 1))
    amp = rng.uniform(0.3, 1.0, (n, 2, 1))
    return (amp * np.sin(2 * np.pi * freq * t + phase)).sum(1).astype(np.float32)


def sigma_embedding(sigma, dim=16):
    freqs = np.exp(np.linspace(0, np.log(100), dim // 2))
    ang = np.log(sigma)[:, None] * freqs
    return np.concatenate([np.sin(ang), np.cos(ang)], -1).astype(np.float32)


def make_batch(n):
    clean = signals(n)
    sigma = rng.uniform(0.1, 1.0, n).astype(np.float32)
    noise = rng.standard_normal(clean.shape).astype(np.float32)
    noisy = clean + sigma[:, None] * noise
    return noisy.reshape(n, T, P), sigma_embedding(sigma), noise.reshape(n, T, P)


batches = [make_batch(BATCH) for _ in range(N_BATCHES)]
x0 = signals(3)
fig, ax = plt.subplots(figsize=(8, 2.5))
for s in x0:
    ax.plot(s)
ax.set_title("clean signals")
plt.show()

# %% [markdown]
# ## The model
#
# A DiT block: adaLN-Zero modulation from the conditioning, a token-mixing MLP (across the 8
# tokens) and a channel MLP, each behind `ada_layer_norm` and a `gated_residual`. The
# modulation `Dense` is zero-initialised (the "Zero"), as is the final projection.

# %%
class DiTBlock(nn.Module):
    d: int = D

    @nn.compact
    def __call__(self, x, c):
        mod = nn.Dense(6 * self.d, kernel_init=nn.initializers.zeros)(jax.nn.silu(c))
        shift1, scale1, gate1, shift2, scale2, gate2 = jnp.split(mod[:, None, :], 6, axis=-1)
        h = rnn.ada_layer_norm(x, scale1, shift1, kind="layer")
        h = nn.Dense(T)(nn.gelu(nn.Dense(2 * T)(h.transpose(0, 2, 1)))).transpose(0, 2, 1)
        x = rnn.gated_residual(x, h, gate1)                      # tokens mixed
        h = rnn.ada_layer_norm(x, scale2, shift2, kind="rms")
        h = nn.Dense(self.d)(nn.gelu(nn.Dense(2 * self.d)(h)))
        return rnn.gated_residual(x, h, gate2)                   # channels mixed


class Denoiser(nn.Module):
    @nn.compact
    def __call__(self, noisy, emb):
        c = nn.Dense(D)(jax.nn.silu(nn.Dense(D)(emb)))
        pos = self.param("pos", nn.initializers.normal(0.02), (T, D))
        x = nn.Dense(D)(noisy) + pos
        for _ in range(2):
            x = DiTBlock()(x, c)
        shift, scale = jnp.split(nn.Dense(2 * D, kernel_init=nn.initializers.zeros)(c)[:, None],
                                 2, axis=-1)
        x = rnn.ada_layer_norm(x, scale, shift)
        return nn.Dense(P, kernel_init=nn.initializers.zeros)(x)


model = Denoiser()
params = jax.jit(model.init)(jax.random.PRNGKey(0), *batches[0][:2])
print("parameters:", sum(np.size(a) for a in jax.tree_util.tree_leaves(params)))


def loss(params, noisy, emb, noise):
    return jnp.mean((model.apply(params, noisy, emb) - noise) ** 2)


# %% [markdown]
# ## Training through the compiled program

# %%
STEPS = 300
opt = optax.adamw(3e-3, weight_decay=1e-4)
step = rlxjax.coreml_train_step(loss, opt)
state = step.init(params)
state, rlx_loss = step.fit(state, batches, steps=STEPS)      # progress bar, loss history
print(f"final loss {rlx_loss[-1]:.4f} (a model predicting zero noise scores 1.0)")

# %% [markdown]
# The same steps in JAX + optax:

# %%
@jax.jit
def jax_step(p, s, *batch):
    l, g = jax.value_and_grad(loss)(p, *batch)
    updates, s = opt.update(g, s, p)
    return optax.apply_updates(p, updates), s, l


p, s, jax_loss = params, opt.init(params), []
for i in range(STEPS):
    p, s, l = jax_step(p, s, *batches[i % N_BATCHES])
    jax_loss.append(float(l))
print(f"final loss: rlxjax {rlx_loss[-1]:.6f}   JAX {jax_loss[-1]:.6f}   relative difference "
      f"{abs(rlx_loss[-1] - jax_loss[-1]) / jax_loss[-1]:.1e}")

# %%
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(jax_loss, label="JAX + optax", linewidth=4, alpha=0.4)
ax.plot(rlx_loss, label="rlxjax ML Program", linewidth=1)
ax.set(xlabel="step", ylabel="noise-prediction MSE", yscale="log", title="DiT denoiser")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Denoising a fresh signal
#
# The trained denoiser, exported for inference with its weights baked in, removes most of the
# noise from a signal it has not seen (`clean ≈ noisy − σ·predicted noise`):

# %%
sigma = 0.6
clean_signal = signals(1)
noise = rng.standard_normal(clean_signal.shape).astype(np.float32)
noisy = (clean_signal + sigma * noise).reshape(1, T, P)
emb = sigma_embedding(np.array([sigma]))
denoise = rlxjax.export_inference(model.apply, step.params(state), noisy, emb)
pred = denoise(noisy, emb)
print("max |rlxjax - jax| of the prediction:",
      float(np.max(np.abs(pred - jax.jit(model.apply)(step.params(state), noisy, emb)))))
estimate = (noisy - sigma * pred).reshape(-1)
fig, ax = plt.subplots(figsize=(8, 2.8))
ax.plot(noisy.reshape(-1), ".", color="0.6", label=f"noisy (σ = {sigma})")
ax.plot(clean_signal[0], linewidth=3, alpha=0.4, label="clean")
ax.plot(estimate, label="denoised by the DiT")
ax.legend(fontsize=8)
plt.show()
print(f"MSE to the clean signal: noisy {np.mean((noisy.reshape(-1) - clean_signal[0]) ** 2):.3f}"
      f", denoised {np.mean((estimate - clean_signal[0]) ** 2):.3f}")

# %% [markdown]
# ## The program
#
# The training program's MIL ops: the norms' forward and fused backward passes are composed of
# `reduce_mean`, `sub`, `mul`, `rsqrt` and `add` (MIL's own `layer_norm` needs constant
# parameters, which a training program never has):

# %%
program = step.lower(state.params, state.opt_state, *batches[0]).compile()
cost = program.cost_analysis()
print(f"{cost['mil_ops']} MIL ops")
print(program.op_histogram())
