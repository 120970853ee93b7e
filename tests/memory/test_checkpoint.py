"""``jax.checkpoint`` in ``coreml_grad`` / ``coreml_train_step``: gradients equal
``jax.grad`` for JAX's policies, the backward pass recomputes (more ops, fewer live bytes),
offloading policies are refused, flax / nnx / equinox checkpoints work as written."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.ad_checkpoint import checkpoint_name

import rlxjax
from rlxjax.errors import UnsupportedPrimitiveError

cp = jax.checkpoint_policies
RNG = np.random.default_rng(0)
PARAMS = [(RNG.normal(size=(16, 32)) * 0.3).astype(np.float32) for _ in range(4)]
X = RNG.normal(size=(64, 16)).astype(np.float32)


def block(w, x):
    h = jnp.tanh(checkpoint_name(x @ w, "pre"))
    return jnp.sin(h @ w.T) + x


def chain(policy, checkpointed=True):
    blk = jax.checkpoint(block, policy=policy) if checkpointed else block

    def loss(params, x):
        for w in params:
            x = blk(w, x)
        return jnp.mean(x ** 2)

    return loss


def close(got, want):
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


POLICIES = {
    "default": None, "nothing_saveable": cp.nothing_saveable,
    "everything_saveable": cp.everything_saveable, "dots_saveable": cp.dots_saveable,
    "checkpoint_dots": cp.checkpoint_dots,
    "dots_with_no_batch_dims_saveable": cp.dots_with_no_batch_dims_saveable,
    "save_only_these_names": cp.save_only_these_names("pre"),
    "save_any_names_but_these": cp.save_any_names_but_these("other"),
}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_gradients_equal_jax_grad(name):
    loss = chain(POLICIES[name])
    close(rlxjax.coreml_grad(loss)(PARAMS, X), jax.grad(loss)(PARAMS, X))


def test_backward_recomputes_and_holds_less():
    plain = rlxjax.coreml_grad(chain(None, checkpointed=False)).lower(PARAMS, X).compile()
    remat = rlxjax.coreml_grad(chain(cp.nothing_saveable)).lower(PARAMS, X).compile()
    names = rlxjax.coreml_grad(chain(cp.save_only_these_names("pre"))).lower(PARAMS, X).compile()
    n = lambda c: sum(c.op_histogram().values())  # noqa: E731
    assert n(remat) > n(names) > n(plain)  # tanh(x @ w) recomputed; then only the tanh
    assert remat.cost_analysis()["flops"] > plain.cost_analysis()["flops"]
    assert remat.memory_analysis().temp_size_in_bytes < plain.memory_analysis().temp_size_in_bytes
    # everything_saveable: nothing to recompute, the program of no checkpoint
    every = rlxjax.coreml_grad(chain(cp.everything_saveable)).lower(PARAMS, X).compile()
    assert every.memory_analysis() == plain.memory_analysis()


def test_offloading_policy_is_refused():
    pol = cp.offload_dot_with_no_batch_dims("device", "pinned_host")
    with pytest.raises(UnsupportedPrimitiveError, match="offloads 'dot_general' to host"):
        rlxjax.coreml_grad(chain(pol)).lower(PARAMS, X)


def test_forward_only_and_checkpoint_name_alone():
    f = jax.checkpoint(lambda x: jnp.sum(jnp.tanh(checkpoint_name(x * 2, "a"))))
    np.testing.assert_allclose(rlxjax.coreml_jit(f)(X), f(X), rtol=1e-6)
    g = lambda x: jnp.sum(checkpoint_name(jnp.sin(x), "b") ** 2)  # noqa: E731
    close(rlxjax.coreml_grad(g)(X), jax.grad(g)(X))


def _linen_net(layernorm: bool):
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x) if layernorm else x
            return x + nn.Dense(16)(nn.gelu(nn.Dense(32)(h)))

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x):
            for _ in range(2):
                x = nn.remat(Block)()(x)
            return x

    return Net()


def test_flax_linen_remat_grad():
    net = _linen_net(layernorm=False)
    p = net.init(jax.random.PRNGKey(0), X[:8])
    loss = lambda p, x: jnp.mean(net.apply(p, x) ** 2)  # noqa: E731
    close(rlxjax.coreml_grad(loss)(p, X[:8]), jax.grad(loss)(p, X[:8]))


@pytest.mark.slow
def test_flax_remat_train_step_equals_jax_optax():
    net = _linen_net(layernorm=True)
    p = net.init(jax.random.PRNGKey(0), X[:8])
    loss = lambda p, x: jnp.mean(net.apply(p, x) ** 2)  # noqa: E731
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt)
    st, value = step(step.init(p), X[:8])
    g = jax.grad(loss)(p, X[:8])
    u, _ = opt.update(g, opt.init(p), p)
    close(st.params, optax.apply_updates(p, u))
    np.testing.assert_allclose(value, loss(p, X[:8]), rtol=1e-5)


def test_nnx_remat_and_equinox_checkpointed_scan():
    from flax import nnx
    import equinox as eqx

    class Block(nnx.Module):
        def __init__(self, rngs):
            self.a = nnx.Linear(16, 32, rngs=rngs)
            self.b = nnx.Linear(32, 16, rngs=rngs)

        def __call__(self, x):
            return x + self.b(jnp.tanh(self.a(x)))

    blocks = [Block(nnx.Rngs(i)) for i in range(2)]
    split = [nnx.split(b) for b in blocks]

    def nloss(states, x):
        for (gdef, _), s in zip(split, states):
            x = nnx.remat(lambda m, x: m(x))(nnx.merge(gdef, s), x)
        return jnp.mean(x ** 2)

    states = [s for _, s in split]
    close(rlxjax.coreml_grad(nloss)(states, X), jax.grad(nloss)(states, X))

    ws = (RNG.normal(size=(5, 16, 16)) * 0.3).astype(np.float32)

    def eloss(ws, x):
        out, _ = jax.lax.scan(eqx.filter_checkpoint(lambda c, w: (jnp.tanh(c @ w), None)),
                              x, ws)
        return jnp.mean(out ** 2)

    close(rlxjax.coreml_grad(eloss)(ws, X), jax.grad(eloss)(ws, X))


def test_a_format_without_the_barrier_still_compiles_the_gradient():
    """Core AI has no lowering of remat_barrier: the barriers are dropped before it lowers
    (Format.lowers_remat_barrier)."""
    pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core")
    c = rlxjax.coreml_grad(chain(None), format="aimodel").lower(PARAMS, X).compile()
    assert "remat_barrier" not in c.graph.op_histogram()


@pytest.mark.slow
def test_a_format_without_the_barrier_computes_the_same_gradient():
    pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core")
    loss = chain(None)
    close(rlxjax.coreml_grad(loss, format="aimodel", backend="coreai")(PARAMS, X),
          jax.grad(loss)(PARAMS, X))
