"""``random="device"`` (issue 17, deliverable 3): jax.random draws become Core ML's random ops.

The numbers are Core ML's (here: the reference backend's numpy generator, made reproducible
with ``seed_fresh_draws``), never JAX's, so the oracles are distributions: a two-sample KS
test against ``jax.random``'s own draws and a one-sample KS test against scipy's
distribution, moments, Bernoulli / categorical frequencies within 5 binomial sigmas;
two calls draw different numbers; gradients reuse the forward's draw (checked through
identities that hold for every draw, e.g. ``value == sum(grad)`` for dropout of ones);
training with dropout tracks JAX + optax's loss curve within the spread of JAX runs with
different keys. Every program is loaded back by coremltools' MIL loader.
"""
from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from scipy import stats

import rlxjax
from helpers import TEST_BACKEND, assert_tracks_noise_band, loss_windows
from rlxjax.errors import ArgumentError, UnsupportedPrimitiveError
from rlxjax.coreml.interpreter import seed_fresh_draws

F32 = np.float32
N = 20000
P_MIN = 1e-3  # KS p-values below this fail (the streams are seeded: no flaky failures)


@pytest.fixture(autouse=True)
def _seeded():
    seed_fresh_draws(1717)
    yield
    seed_fresh_draws(None)


def _jit(f, **kw):
    return rlxjax.coreml_jit(f, backend=TEST_BACKEND, random="device", **kw)


def _ks(got, jax_draw, dist):
    """Same distribution as JAX's draws and as scipy's ``dist``."""
    assert stats.ks_2samp(got.ravel(), np.asarray(jax_draw).ravel()).pvalue > P_MIN
    assert stats.kstest(got.ravel(), dist.cdf).pvalue > P_MIN


# -- distributions -----------------------------------------------------------------------------
def test_continuous_draws_have_jaxs_distributions_and_use_core_ml_random_ops():
    def f(k):
        k1, k2, k3, k4 = jax.random.split(k, 4)
        return (jax.random.normal(k1, (N,)), jax.random.uniform(k2, (N,), minval=-1.0,
                                                                 maxval=3.0),
                jax.random.truncated_normal(k3, -1.0, 1.5, (N,)),
                2.0 * jax.random.normal(k4, (N,)) + 1.0)

    key = jax.random.key(3)
    compiled = _jit(f).lower(key).compile()
    compiled.validate()  # coremltools' MIL loader
    hist = compiled.op_histogram()
    assert hist["random_normal"] == 2 and hist["random_uniform"] == 2  # (truncated: uniform)
    assert not compiled.input_specs  # the key is no program input
    want = f(jax.random.key(4))
    got = compiled(key)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
    _ks(got[0], want[0], stats.norm())
    _ks(got[1], want[1], stats.uniform(-1.0, 4.0))
    _ks(got[2], want[2], stats.truncnorm(-1.0, 1.5))
    _ks(got[3], want[3], stats.norm(1.0, 2.0))
    assert got[1].min() >= -1.0 and got[1].max() < 3.0
    assert got[2].min() > -1.0 and got[2].max() < 1.5
    # fresh numbers on every call, whatever the key
    again = compiled(key)
    assert all((a != b).mean() > 0.99 for a, b in zip(got, again))
    meta = json.loads(compiled.spec.description.metadata.userDefined["rlxjax.random"])
    assert meta["mode"] == "device" and meta["inputs"] == []
    assert [(d["made_by"], d["op"]) for d in meta["draws"]] == [
        ("jax.random.normal", "random_normal"), ("jax.random.uniform", "random_uniform"),
        ("jax.random.truncated_normal", "random_uniform"),
        ("jax.random.normal", "random_normal")]
    assert meta["draws"][1]["params"] == {"low": -1.0, "high": 3.0}
    assert all("test_random_device.py" in d["source"] for d in meta["draws"])


def test_bernoulli_and_categorical_frequencies():
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4], F32))

    def f(k, x):
        k1, k2 = jax.random.split(k)
        keep = jax.random.bernoulli(k1, 0.3, (N,))
        return jnp.where(keep, x, 0.0), jax.random.categorical(k2, x[:4, None] * 0 + logits,
                                                             shape=(N, 4))

    x = np.ones(N, F32)
    compiled = _jit(f).lower(jax.random.key(0), x).compile()
    compiled.validate()
    assert compiled.op_histogram()["random_bernoulli"] == 1
    kept, cat = compiled(jax.random.key(0), x)
    sigma = np.sqrt(0.3 * 0.7 / N)
    assert abs(kept.mean() - 0.3) < 5 * sigma and set(np.unique(kept)) <= {0.0, 1.0}
    freq = np.bincount(cat.ravel(), minlength=4) / cat.size
    np.testing.assert_array_less(np.abs(freq - np.exp(logits)),
                                 5 * np.sqrt(np.exp(logits) * (1 - np.exp(logits)) / cat.size))
    k2 = jax.random.split(jax.random.key(1))[1]
    jax_cat = np.asarray(jax.random.categorical(k2, jnp.broadcast_to(logits, (4, 4)),
                                                shape=(N, 4)))
    chi = stats.chi2_contingency([np.bincount(cat.ravel(), minlength=4),
                                  np.bincount(jax_cat.ravel(), minlength=4)])
    assert chi.pvalue > P_MIN


@settings(max_examples=8, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple),
       dtype=st.sampled_from([np.float32, np.float16]),
       which=st.sampled_from(["normal", "uniform", "bernoulli", "exponential"]))
def test_draws_have_jaxs_shapes_dtypes_and_support(shape, dtype, which):
    draw = {"normal": lambda k: jax.random.normal(k, shape, dtype),
            "uniform": lambda k: jax.random.uniform(k, shape, dtype, minval=2.0, maxval=5.0),
            "bernoulli": lambda k: jax.random.bernoulli(k, 0.25, shape),
            "exponential": lambda k: jax.random.exponential(k, shape, dtype)}[which]
    f = lambda k, x: (draw(k), x + 1)  # noqa: E731
    x = np.zeros((2,), F32)
    got = _jit(f)(jax.random.key(0), x)[0]
    want = jax.eval_shape(draw, jax.random.key(0))
    assert got.shape == want.shape and got.dtype == want.dtype
    if which == "uniform":
        assert (got >= 2.0).all() and (got < 5.0).all()
    if which == "exponential":  # -log1p(-u) of a device uniform: JAX's formula replayed
        assert (got >= 0).all()


def test_the_key_is_checked_and_its_value_ignored():
    f = lambda x, k: x + jax.random.normal(k, x.shape)  # noqa: E731
    x = np.zeros((4,), F32)
    fn = _jit(f)
    fn(x, jax.random.key(0))
    compiled = next(iter(fn._cache.values()))
    assert [s.name for s in compiled.input_specs] == ["x"]
    with pytest.raises(ArgumentError, match="'k'"):
        compiled(x, jax.random.split(jax.random.key(0), 2))


def test_a_new_key_returned_comes_from_the_host():
    def f(x, k):
        k, sub = jax.random.split(k)
        return x + jax.random.normal(sub, x.shape), k

    x = np.zeros((4,), F32)
    y, k = _jit(f)(x, jax.random.key(7))
    assert y.shape == (4,)
    np.testing.assert_array_equal(jax.random.key_data(k),
                                  jax.random.key_data(f(x, jax.random.key(7))[1]))


def test_draws_core_ml_cannot_make_name_the_function_and_the_way_out():
    x = np.zeros((4,), F32)
    for f, name in [(lambda x, k: x + jax.random.randint(k, x.shape, 0, 5), "randint"),
                    (lambda x, k: x[jax.random.permutation(k, 4)], "permutation"),
                    (lambda x, k: x + jax.random.bits(k, x.shape).astype(F32), "bits"),
                    (lambda x, k: x + jax.random.gamma(k, 2.0, x.shape), "gamma"),
                    (lambda x, k: jax.random.poisson(k, 3.0, x.shape).astype(F32), "poisson")]:
        with pytest.raises(UnsupportedPrimitiveError,
                           match=rf"random='device': jax\.random\.{name} .*random='inputs'"):
            _jit(f)(x, jax.random.key(0))


# -- gradients: a draw is a constant of the differentiation ------------------------------
def test_gradients_reuse_the_forward_draw():
    def reparam(mu, sigma, k):  # VAE-style: N(0, 1) scaled; d/dsigma = sum(eps)
        return jnp.sum(mu + sigma * jax.random.normal(k, (64,)))

    mu, sigma = F32(0.5), F32(2.0)
    vg = rlxjax.coreml_value_and_grad(reparam, argnums=(0, 1), backend=TEST_BACKEND,
                                      random="device")
    v, (g_mu, g_sigma) = vg(mu, sigma, jax.random.key(0))
    assert g_mu == 64.0  # JAX's too: d/dmu does not depend on the draw
    np.testing.assert_allclose(v, 64 * mu + sigma * g_sigma, rtol=1e-5)
    assert abs(g_sigma) < 5 * 8.0  # sum of 64 N(0, 1): sd 8

    def dropout_sum(x, k):
        return jnp.sum(jnp.where(jax.random.bernoulli(k, 0.6, x.shape), x / 0.6, 0.0))

    x = np.ones((256,), F32)
    v, g = rlxjax.coreml_value_and_grad(dropout_sum, backend=TEST_BACKEND,
                                        random="device")(x, jax.random.key(1))
    np.testing.assert_allclose(v, g.sum(), rtol=1e-5)  # the same mask forward and back
    assert set(np.unique(g).tolist()) == {0.0, float(F32(1) / F32(0.6))}


# -- training ------------------------------------------------------------------------------
def _tracks_jax(loss, params, batch, n_steps=60, runs=4):
    optax = pytest.importorskip("optax")
    opt = optax.adam(1e-2)

    @jax.jit
    def jax_step(p, s, key):
        v, g = jax.value_and_grad(loss)(p, *batch, key)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, v

    def jax_curve(seed):
        p, s, out = params, opt.init(params), []
        for key in jax.random.split(jax.random.key(seed), n_steps):
            p, s, v = jax_step(p, s, key)
            out.append(float(v))
        return loss_windows(out, 10)

    step = rlxjax.coreml_train_step(loss, opt, backend=TEST_BACKEND, random="device")
    ours = []
    for r in range(runs):
        seed_fresh_draws(r)
        state, out = step.init(params), []
        for key in jax.random.split(jax.random.key(r), n_steps):
            state, v = step(state, *batch, key)
            out.append(float(v))
        ours.append(loss_windows(out, 10))
    assert_tracks_noise_band(ours, [jax_curve(100 + r) for r in range(runs)])
    assert "random_bernoulli" in step.last_compiled.op_histogram()


def _regression(n=32, d=8):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, d)).astype(F32)
    return x, np.tanh(x @ rng.normal(size=(d, 3))).astype(F32)


@pytest.mark.slow
def test_linen_dropout_trains_like_jax():
    import flax.linen as nn

    class DropoutMLP(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool):
            x = nn.relu(nn.Dense(32)(x))
            x = nn.Dropout(0.3, deterministic=not train)(x)
            return nn.Dense(3)(x)

    model = DropoutMLP()
    x, y = _regression()
    params = model.init(jax.random.key(0), x, False)

    def loss(params, x, y, rng):
        return jnp.mean((model.apply(params, x, True, rngs={"dropout": rng}) - y) ** 2)

    _tracks_jax(loss, params, (x, y))


@pytest.mark.slow
def test_equinox_dropout_trains_like_jax():
    eqx = pytest.importorskip("equinox")
    x, y = _regression()
    k1, k2 = jax.random.split(jax.random.key(0))
    params = {"w1": jax.random.normal(k1, (8, 32)) / np.sqrt(8),
              "w2": jax.random.normal(k2, (32, 3)) / np.sqrt(32)}
    drop = eqx.nn.Dropout(0.3)

    def loss(p, x, y, key):
        h = drop(jax.nn.relu(x @ p["w1"]), key=key)
        return jnp.mean((h @ p["w2"] - y) ** 2)

    _tracks_jax(loss, params, (x, y))


def test_reference_seeding_is_reproducible_and_advances():
    f = lambda x, k: x + jax.random.uniform(k, x.shape)  # noqa: E731
    x = np.zeros((8,), F32)
    compiled = _jit(f).lower(x, jax.random.key(0)).compile()
    seed_fresh_draws(5)
    a, b = compiled(x, jax.random.key(0)), compiled(x, jax.random.key(0))
    seed_fresh_draws(5)
    np.testing.assert_array_equal(compiled(x, jax.random.key(0)), a)
    assert (a != b).all()


def test_draws_inside_a_scan_are_one_stacked_device_draw():
    def loop(x, k):  # a key carried and split each step (nn.RNN's dropout)
        def body(c, _):
            x, k = c
            k, sub = jax.random.split(k)
            return (x + jax.random.normal(sub, x.shape), k), None
        return jax.lax.scan(body, (x, k), None, length=3)[0][0]

    x = np.zeros((N,), F32)
    compiled = _jit(loop).lower(x, jax.random.key(0)).compile()
    compiled.validate()
    hist = compiled.op_histogram()
    assert hist["random_normal"] == 1 and hist["while_loop"] == 1  # [3, N] before the loop
    meta = json.loads(compiled.spec.description.metadata.userDefined["rlxjax.random"])
    assert [(d["op"], d["shape"]) for d in meta["draws"]] == [("random_normal", [3, N])]
    _ks(compiled(x, jax.random.key(0)), loop(x, jax.random.key(1)), stats.norm(0, np.sqrt(3)))

    def keys_as_xs(x, k):  # keys split before the loop, drawn from inside it
        return x + jax.lax.scan(lambda c, k: (c, jax.random.normal(k, (500,))), 0,
                                jax.random.split(k, 20), reverse=True)[1]

    x = np.zeros((20, 500), F32)
    got = _jit(keys_as_xs)(x, jax.random.key(0))
    _ks(got, keys_as_xs(x, jax.random.key(1)), stats.norm())
    assert abs(np.corrcoef(got[:-1].ravel(), got[1:].ravel())[0, 1]) < 5 / np.sqrt(got.size)


def test_a_scan_carrying_draws_is_refused_and_vmapped_draws_are_made():
    def walk(x, k):  # a random walk: its steps' draws are needed in order
        k1, k2 = jax.random.split(k)
        body = lambda c, k: (c + jax.random.normal(k, c.shape), c)  # noqa: E731
        return x + jax.lax.scan(body, jax.random.normal(k1, (3,)), jax.random.split(k2, 4))[1]

    with pytest.raises(UnsupportedPrimitiveError, match=r"^random='device': jax\.random\."
                       r"normal at .*test_random_device.*inside 'scan' and carries a value "
                       r"computed from draws.*random='inputs'"):
        _jit(walk).lower(np.zeros((4, 3), F32), jax.random.key(0))

    def vmapped(x, k):
        return x + jax.vmap(lambda k: jax.random.normal(k, (50,)))(jax.random.split(k, 400))

    x = np.zeros((400, 50), F32)
    got = _jit(vmapped)(x, jax.random.key(0))
    _ks(got, vmapped(x, jax.random.key(1)), stats.norm())


def test_nnx_dropout_with_rngs_made_from_a_key_argument():
    from flax import nnx

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(4, 4, rngs=rngs)
            self.drop = nnx.Dropout(0.5)

        def __call__(self, x, key):
            return self.drop(self.lin(x), rngs=nnx.Rngs(dropout=key))

    model = Model(nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    f = lambda state, x, key: nnx.merge(graphdef, state)(x, key)  # noqa: E731
    x = np.ones((256, 4), F32)
    compiled = _jit(f).lower(state, x, jax.random.key(1)).compile()
    assert compiled.op_histogram()["random_bernoulli"] == 1
    got = compiled(state, x, jax.random.key(1))
    dense = np.asarray(nnx.merge(graphdef, state).lin(x)) / 0.5  # JAX's kept values
    kept = got != 0  # the mask is Core ML's
    np.testing.assert_allclose(got[kept], dense[kept], rtol=1e-5)
    assert abs(kept.mean() - 0.5) < 5 * np.sqrt(0.25 / kept.size)


def test_nnx_rng_state_advances_on_the_host_while_the_mask_is_drawn_on_the_device():
    from flax import nnx

    class Model(nnx.Module):
        def __init__(self, rngs):
            self.lin = nnx.Linear(8, 16, rngs=rngs)
            self.drop = nnx.Dropout(0.5, rngs=rngs)

        def __call__(self, x):
            return self.drop(self.lin(x))

    model = Model(nnx.Rngs(0))
    model.train()
    graphdef, state = nnx.split(model)

    def f(state, x):
        m = nnx.merge(graphdef, state)
        return m(x), nnx.state(m)

    x = np.ones((4, 8), F32)
    fn = _jit(f)
    y, new = fn(state, x)
    _, want = jax.jit(f)(state, x)
    count = lambda s: int(s["drop"]["rngs"]["count"].value)  # noqa: E731
    assert count(new) == count(want) == count(state) + 1
    compiled = next(iter(fn._cache.values()))
    assert [s.name for s in compiled.input_specs][-1] == "x"  # no key, no counter input
    assert compiled.op_histogram()["random_bernoulli"] == 1
    assert set(np.unique(y == 0)) == {False, True}


def test_the_saved_package_holds_core_ml_random_ops_and_runs(tmp_path):
    import os

    from rlxjax.coreml.mil import function_block, operations
    from rlxjax.coreml.validate import validate_model
    import coremltools as ct

    def f(x, k):
        k1, k2 = jax.random.split(k)
        keep = jax.random.bernoulli(k1, 0.5, x.shape)
        return jnp.where(keep, x / 0.5, 0.0) + 0.1 * jax.random.normal(k2, x.shape)

    x = np.ones((512,), F32)
    path = _jit(f).lower(x, jax.random.key(0)).compile().save(tmp_path / "r.mlpackage")
    spec = ct.utils.load_spec(path)
    ops = {op.type for op in operations(function_block(spec, "main"))}
    assert {"random_bernoulli", "random_normal"} <= ops
    validate_model(spec, os.path.join(path, "Data", "com.apple.CoreML", "weights"))
    meta = json.loads(spec.description.metadata.userDefined["rlxjax.random"])
    assert [d["op"] for d in meta["draws"]] == ["random_bernoulli", "random_normal"]
    loaded = rlxjax.load(path, backend=TEST_BACKEND, flat=True)
    a, b = (next(iter(loaded(x=x).values())) for _ in range(2))
    assert (a != b).any() and abs((np.abs(a) > 1).mean() - 0.5) < 5 * np.sqrt(0.25 / 512)
