"""Source of notebooks/01_quickstart.ipynb: build with python tools/build_notebooks.py."""

# %% [markdown]
# # rlxjax quickstart
#
# Compile a JAX function into a Core ML ML Program, look at the RLX graph and the MIL program,
# save the `.mlpackage`, and compare the result with JAX. Off macOS the program runs on
# rlxjax's reference backend (a numpy interpreter of MIL).

# %%
import jax, jax.numpy as jnp, numpy as np
import rlxjax

def f(x, w):
    return jax.nn.gelu(x @ w).sum(axis=-1)

x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
w = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
cf = rlxjax.coreml_jit(f)
print(cf(x, w))
print(np.asarray(jax.jit(f)(x, w)))

# %% [markdown]
# `lower` gives the RLX graph, rlxjax's own IR:

# %%
lowered = cf.lower(x, w)
print(lowered.graph)

# %% [markdown]
# `compile` lowers it to Core ML. `validate` loads the program back through coremltools' MIL
# loader, which re-runs type inference; `as_text` prints the MIL:

# %%
compiled = lowered.compile()
compiled.validate()
print(compiled.op_histogram())
print(compiled.as_text())

# %% [markdown]
# A flax model works the same way; its parameters become program inputs named by pytree path:

# %%
import flax.linen as nn

class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.LayerNorm()(x)
        x = nn.gelu(nn.Dense(16)(x))
        return nn.Dense(2)(x)

model = MLP()
params = model.init(jax.random.PRNGKey(0), x)
mlp = rlxjax.coreml_jit(model.apply).lower(params, x).compile()
print([s.name for s in mlp.input_specs])
print('max |rlxjax - jax| =', np.abs(mlp(params, x) - model.apply(params, x)).max())

# %% [markdown]
# Gradients are compiled the same way. `coreml_grad` builds the backward pass on the RLX graph
# itself (the flax LayerNorm above was recognised as one `layer_norm` node, so its gradient is
# one fused `layer_norm_grad` op):

# %%
def loss(params, x):
    return jnp.mean(model.apply(params, x) ** 2)

grad_fn = rlxjax.coreml_grad(loss)
g = grad_fn(params, x)
g_jax = jax.grad(loss)(params, x)
print(jax.tree_util.tree_map(lambda a, b: float(np.abs(a - b).max()), g, g_jax))
print(grad_fn.lower(params, x).graph.op_histogram())

# %%
import tempfile, os
path = mlp.save(os.path.join(tempfile.mkdtemp(), 'mlp.mlpackage'))
print(sorted(os.listdir(path)))
