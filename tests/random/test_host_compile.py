"""The ``random="inputs"`` host part as rlxjax compiles it (frontend/random/host_compile.py:
integer half batched and compiled quickly, float half as ``jax.jit`` compiles it) gives
the draws bit for bit as one ``jax.jit`` of the same equations does - for every key
implementation, distribution and shape mix - and batches what it may."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

import rlxjax
from rlxjax import _jax_compat as jc
from rlxjax.frontend.random import host_compile

from helpers import examples

SHAPES = [(3,), (2, 5), (4, 1, 3)]
DISTS = {
    "uniform": lambda k, s: jax.random.uniform(k, s, minval=-3.0, maxval=7.0),
    "normal": lambda k, s: jax.random.normal(k, s),
    "bernoulli": lambda k, s: jax.random.bernoulli(k, 0.3, s).astype(jnp.float32),
    "truncated_normal": lambda k, s: jax.random.truncated_normal(k, -2.0, 1.5, s),
    "exponential": lambda k, s: jax.random.exponential(k, s),
    "randint": lambda k, s: jax.random.randint(k, s, -5, 9).astype(jnp.float32),
    "bits8": lambda k, s: jax.random.bits(k, s, jnp.uint8).astype(jnp.float32),
}


def _host(f, args):
    host = rlxjax.coreml_jit(f, random="inputs").lower(*args)._traced.host
    leaves = jax.tree_util.tree_leaves(args)
    return host.parts, [leaves[i] for i in host.leaves]


def _one_jit(p, leaves):
    """The host part as one jax.jit of its equations in program order (JAX's numbers)."""
    outs = p.needed + p.host_outs

    def fn(*leaves):
        env = dict(zip(p.fj.constvars, p.consts))
        env.update(zip(p.host_vars, leaves))
        for e in p.in_order:
            vals = [v.val if isinstance(v, jc.Literal) else env[v] for v in e.invars]
            env.update(zip(e.outvars, jc.eval_equation(e, vals)))
        return [env[v] for v in outs]

    return jax.jit(fn)(*leaves)


def _bytes(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.atleast_1d(np.asarray(x)).view(np.uint8)


def _staged(p):
    return host_compile.Staged(p.fj, p.consts, p.host_vars, p.in_order,
                               p.needed + p.host_outs)


def _assert_same(got, want):
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bytes(g), _bytes(w))


KEYS = st.sampled_from(["threefry2x32", "rbg", "unsafe_rbg", "legacy"])
DRAWS = st.lists(st.tuples(st.sampled_from(sorted(DISTS)), st.sampled_from(SHAPES)),
                 min_size=2, max_size=6)


def _check_draws(seed, impl, draws):
    """Draws of mixed distributions and shapes from split and folded keys: the batched,
    two-stage host part equals one jax.jit of it, bit for bit."""
    key = jax.random.PRNGKey(seed) if impl == "legacy" else jax.random.key(seed, impl=impl)

    def f(key, x):
        ks = jax.random.split(key, len(draws))
        return [x + DISTS[d](jax.random.fold_in(k, i), s)
                for i, (k, (d, s)) in enumerate(zip(ks, draws))]

    p, leaves = _host(f, (key, np.float32(0.5)))
    staged = _staged(p)
    _assert_same(staged(*leaves), _one_jit(p, leaves))
    # threefry keys: stage 1 by numpy (host_numpy.py); rbg keys: by XLA
    assert staged.numpy == (impl in ("threefry2x32", "legacy"))
    xla = _staged(p)
    xla.numpy = False  # the batched XLA stage 1, which numpy's stands in for
    _assert_same(xla(*leaves), _one_jit(p, leaves))


def test_long_runs_switch_to_the_compiled_stage(monkeypatch):
    """After NUMPY_CALLS calls of one signature the compiled stage 1 takes over from
    numpy's, feeding the same stage 2 the same bits."""
    monkeypatch.setattr(host_compile, "NUMPY_CALLS", 2)

    def f(key, x):
        k1, k2 = jax.random.split(key)
        return x + jax.random.normal(k1, (3,)) + jax.random.bernoulli(k2, 0.4, (3,))

    p, leaves = _host(f, (jax.random.key(9), np.float32(1.0)))
    staged, want = _staged(p), _one_jit(p, leaves)
    for _ in range(4):
        _assert_same(staged(*leaves), want)
    (entry,) = staged._compiled.values()
    assert staged.numpy and entry[0] is not None and entry[2] == 3


@settings(max_examples=examples(3), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), impl=KEYS, draws=DRAWS)
def test_staged_equals_one_jit_bit_for_bit(seed, impl, draws):
    _check_draws(seed, impl, draws)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), impl=KEYS, draws=DRAWS)
def test_staged_equals_one_jit_bit_for_bit_many(seed, impl, draws):
    _check_draws(seed, impl, draws)


@pytest.mark.parametrize("numpy", [True, False])
def test_float_draws_equal_one_jit_bit_for_bit(numpy):
    """Float draws whose last bits depend on how XLA compiles them (normal's erf_inv, a
    uniform's scaling, ...), with stage 1 by numpy or by XLA."""
    def f(key, x):
        ks = jax.random.split(key, 4)
        return (x + jax.random.normal(ks[0], (64,)), x * jax.random.truncated_normal(
            ks[1], -2.0, 3.0, (64,)), x + jax.random.exponential(ks[2], (64,)),
            x + jax.random.uniform(ks[3], (64,), minval=-3.0, maxval=7.0))

    p, leaves = _host(f, (jax.random.key(11), np.float32(0.5)))
    staged = _staged(p)
    staged.numpy = staged.numpy and numpy
    assert staged.numpy == numpy
    got = staged(*leaves)
    assert len(got) >= 4
    _assert_same(got, _one_jit(p, leaves))


def test_dropout_layers_batch_into_one_threefry_per_shape():
    """Eight dropout-like draws of two shapes: one fold_in step and one random_bits step
    per shape, instead of one per draw; the results still JAX's."""
    shapes = [(2, 8), (2, 8), (2, 4), (2, 8), (2, 4), (2, 8), (2, 4), (2, 8)]

    def f(key, x):
        for i, s in enumerate(shapes):
            keep = jax.random.bernoulli(jax.random.fold_in(key, i), 0.9, s)
            x = x + jnp.where(keep, 1.0, 0.0).sum()
        return x

    p, leaves = _host(f, (jax.random.key(5), np.float32(1.0)))
    staged = _staged(p)
    staged.numpy = False  # (the XLA stage 1: numpy's does not batch)
    batched = {(st_[0].primitive.name, len(st_)) for st_ in staged.steps if len(st_) > 1}
    assert ("random_fold_in", 8) in batched
    assert ("random_bits", 5) in batched and ("random_bits", 3) in batched
    assert len(staged.steps) < len(staged.first) / 3
    _assert_same(staged(*leaves), _one_jit(p, leaves))


def test_rbg_keys_are_not_batched():
    """vmap of XLA's rng_bit_generator draws other bits than one call per key: an rbg
    key's draws stay one equation each (and equal JAX's)."""
    def f(key, x):
        ks = jax.random.split(key, 3)
        return [x + jax.random.uniform(k, (4,)) for k in ks]

    p, leaves = _host(f, (jax.random.key(2, impl="rbg"), np.float32(0.0)))
    staged = _staged(p)
    assert not any(e.primitive.name == "random_bits" for st_ in staged.steps if len(st_) > 1
                   for e in st_)
    _assert_same(staged(*leaves), _one_jit(p, leaves))


def test_gradient_and_training_step_share_one_host_part(monkeypatch):
    """coreml_grad and coreml_train_step of one loss compile their host part once."""
    compiles = []
    real = host_compile.Staged._compile
    monkeypatch.setattr(host_compile.Staged, "_compile",
                        lambda self, leaves: compiles.append(1) or real(self, leaves))

    def loss(w, x, key):  # (shapes no other test uses: its host part is not shared yet)
        keep = jax.random.bernoulli(key, 0.8, x.shape)
        return jnp.mean((jnp.where(keep, x, 0.0) @ w) ** 2)

    w, x = np.ones((7, 2), np.float32), np.ones((5, 7), np.float32)
    key = jax.random.key(0)
    grad = rlxjax.coreml_grad(loss, random="inputs")
    np.testing.assert_allclose(np.asarray(grad(w, x, key)), jax.grad(loss)(w, x, key),
                               rtol=1e-5)
    assert len(compiles) == 1
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), random="inputs")
    step(step.init(w), x, key)
    assert len(compiles) == 1
