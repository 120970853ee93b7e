"""Randomness: jax.random is refused with a clear error; rlxjax.nn.dropout draws on the device.

Oracles: ``deterministic=True`` dropout against jax.jit (exact); the on-device path cannot be
compared value for value with JAX (Core ML's generator is its own, the reference backend's
is numpy's), so it is checked by its defining properties on the reference backend: the
fraction of dropped elements lies within a 5-sigma binomial bound, kept values are
``x * scale`` exactly (scale = fp32(1 / (1 - rate))), and the gradient reuses the forward's
mask. Every compiled program is validated by coremltools' loader.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
from helpers import check_against_jax
from rlxjax.errors import UnsupportedDTypeError, UnsupportedPrimitiveError
from rlxjax.frontend import RULES
from rlxjax.frontend.rules.random import RANDOM_DETAIL, RANDOM_PRIMITIVES
from rlxjax.nn import dropout
from rlxjax.nn.dropout import dropout_scale
from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS

F32, F16, I32 = np.float32, np.float16, np.int32
RNG = np.random.default_rng(0)

# -- jax.random: refused -----------------------------------------------------------------
DRAWS = {
    "normal": lambda k, x: x + jax.random.normal(k, x.shape),
    "uniform": lambda k, x: x * jax.random.uniform(k, x.shape),
    "bernoulli": lambda k, x: jnp.where(jax.random.bernoulli(k, 0.5, x.shape), x, 0.0),
    "split": lambda k, x: x + jax.random.normal(jax.random.split(k)[1], x.shape),
    "fold_in": lambda k, x: x + jax.random.uniform(jax.random.fold_in(k, 3), x.shape),
}
KEYS = {"key": jax.random.key, "PRNGKey": jax.random.PRNGKey}


def _primitives(fun, *args):
    names = set()

    def walk(jaxpr):
        for e in jaxpr.eqns:
            names.add(e.primitive.name)
            for p in e.params.values():
                sub = getattr(p, "jaxpr", None)
                if sub is not None:
                    walk(getattr(sub, "jaxpr", sub))

    walk(jax.make_jaxpr(fun)(*args).jaxpr)
    return names


@pytest.mark.parametrize("make_key", sorted(KEYS))
@pytest.mark.parametrize("draw", sorted(DRAWS))
def test_jax_random_inside_is_refused_with_the_choices(draw, make_key):
    x = np.ones((3,), F32)

    def f(x):
        return DRAWS[draw](KEYS[make_key](7), x)

    with pytest.raises(UnsupportedPrimitiveError) as e:
        rlxjax.coreml_jit(f, backend="reference").lower(x)
    assert e.value.primitive in RANDOM_PRIMITIVES
    assert RANDOM_DETAIL in str(e.value)
    assert "test_random.py" in (e.value.source or "")  # the user's line is named


@pytest.mark.parametrize("make_key", sorted(KEYS))
@pytest.mark.parametrize("draw", sorted(DRAWS))
def test_every_primitive_of_jax_random_has_a_refusing_rule(draw, make_key):
    """What jax.random emits with a key argument (JAX 0.10): all random_* / threefry
    primitives are refused by our rules; the rest is ordinary arithmetic."""
    names = _primitives(DRAWS[draw], KEYS[make_key](0), np.ones((3,), F32))
    randomish = {n for n in names if n.startswith("random_") or "threefry" in n}
    assert randomish and randomish <= set(RANDOM_PRIMITIVES)
    assert all(RULES[n].__name__ == "_jax_random" for n in RANDOM_PRIMITIVES)


def test_live_draw_from_a_key_argument_or_constant_names_the_draw_and_the_argument():
    x = np.ones((3,), F32)
    with pytest.raises(UnsupportedPrimitiveError,
                       match=r"jax\.random\.normal \(JAX primitive 'random_bits'\) at "
                             r".*test_random\.py:\d+.*from argument 'k'"):
        rlxjax.coreml_jit(DRAWS["normal"], backend="reference").lower(jax.random.key(0), x)
    key = jax.random.key(1)
    with pytest.raises(UnsupportedPrimitiveError, match=r"jax\.random\.uniform .*threefry"):
        rlxjax.coreml_jit(lambda x: DRAWS["uniform"](key, x), backend="reference").lower(x)


def test_a_key_argument_used_without_a_draw_is_named():
    x = np.ones((3,), F32)
    with pytest.raises(UnsupportedDTypeError, match=r"argument 'k\.b\.0' is a JAX PRNG key"):
        rlxjax.coreml_jit(lambda x, k: (x, k), backend="reference").lower(
            x, {"a": x, "b": [jax.random.key(0)]})


# -- dropout in plain JAX ----------------------------------------------------------------
def test_dropout_in_jax_is_a_fixed_mask_of_the_seed():
    x = RNG.normal(size=(4, 50)).astype(F32)
    y = dropout(x, 0.3, deterministic=False, seed=5)
    keep = jax.random.bernoulli(jax.random.key(5), 0.7, x.shape)
    want = x * (np.asarray(keep, F32) * dropout_scale(0.3, F32))
    np.testing.assert_array_equal(np.asarray(y), want)
    np.testing.assert_array_equal(np.asarray(jax.jit(
        lambda x: dropout(x, 0.3, deterministic=False, seed=5))(x)), want)
    # linear with the same mask: d sum(y) / dx = mask * scale, and grad's jaxpr holds no
    # jax.random primitive (only rlx_dropout), so coreml_jit(jax.grad(...)) can compile it.
    loss = lambda x: dropout(x, 0.3, deterministic=False, seed=5).sum()  # noqa: E731
    np.testing.assert_array_equal(np.asarray(jax.grad(loss)(x)),
                                  np.asarray(keep, F32) * dropout_scale(0.3, F32))
    assert not {n for n in _primitives(jax.grad(loss), x) if n.startswith("random_")}


def test_dropout_arguments():
    x = np.ones((3,), F32)
    assert dropout(x, 0.0, deterministic=False) is not None
    np.testing.assert_array_equal(np.asarray(dropout(x, 1.0, deterministic=False)), 0 * x)
    with pytest.raises(ValueError, match="rate"):
        dropout(x, 1.5, deterministic=False)
    with pytest.raises(ValueError, match="seed"):
        dropout(x, 0.5, deterministic=False, seed=-2)
    with pytest.raises(TypeError, match="deterministic"):
        dropout(x, 0.5, deterministic=None)
    with pytest.raises(TypeError, match="float"):
        dropout(np.ones((3,), I32), 0.5, deterministic=False)


# -- dropout compiled ----------------------------------------------------------------------
@pytest.mark.parametrize("rate", [0.0, 0.5])
def test_deterministic_dropout_is_the_identity_exactly(rate):
    x = RNG.normal(size=(3, 5)).astype(F32)
    # x * 2 is exact, so XLA fusing the add into an fma changes nothing: compare bits
    f = lambda x: dropout(x * 2.0, rate, deterministic=True, seed=3) + 1.0  # noqa: E731
    compiled = check_against_jax(f, x, rtol=0, atol=0)
    assert "random_bernoulli" not in compiled.op_histogram()
    assert not any(n.op == "bernoulli" for n in rlxjax.coreml_jit(f).lower(x).graph.nodes)


def _compile(f, *args, **kw):
    compiled = rlxjax.coreml_jit(f, backend="reference", **kw).lower(*args).compile()
    compiled.validate()
    return compiled


def _check_drop_statistics(x, y, rate):
    """Dropped: y == 0 (x has no zeros); kept: y == x * scale to the bit; 5-sigma count."""
    n = x.size
    dropped = y == 0
    k = int(dropped.sum())
    assert abs(k - n * rate) <= 5 * np.sqrt(n * rate * (1 - rate)), (k, n, rate)
    scale = dropout_scale(rate, x.dtype)
    np.testing.assert_array_equal(y[~dropped], x[~dropped] * scale)
    return ~dropped


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.8])
def test_device_dropout_statistics(rate):
    x = (RNG.uniform(0.5, 2.0, size=(100, 100)) * RNG.choice([-1, 1], (100, 100))).astype(F32)
    f = lambda x: dropout(x, rate, deterministic=False, seed=11)  # noqa: E731
    compiled = _compile(f, x)
    assert compiled.op_histogram().get("random_bernoulli") == 1
    y1, y2 = compiled(x), compiled(x)
    _check_drop_statistics(x, y1, rate)
    np.testing.assert_array_equal(y1, y2)  # seed >= 0: reproducible on this backend


def test_device_dropout_seed_minus_one_draws_fresh_masks():
    x = np.ones((10_000,), F32)
    compiled = _compile(lambda x: dropout(x, 0.5, deterministic=False, seed=-1), x)
    y1, y2 = compiled(x), compiled(x)
    _check_drop_statistics(x, y1, 0.5)
    _check_drop_statistics(x, y2, 0.5)
    assert not np.array_equal(y1, y2)


def test_device_dropout_fp16_iOS15_and_scalar():
    x = RNG.uniform(1.0, 2.0, size=(10_000,)).astype(F32)
    f = lambda x: dropout(x, 0.25, deterministic=False, seed=2)  # noqa: E731
    compiled = _compile(f, x, precision="fp16", target="iOS15")
    # fp16 program: x is rounded to fp16, scaled by fp16(4/3), rounded, returned as fp32
    y = compiled(x)
    x16 = x.astype(F16)
    kept = _check_drop_statistics(x16, y.astype(F16), 0.25)
    assert kept.any()
    s = _compile(lambda x: dropout(x, 0.5, deterministic=False, seed=-1), np.float32(3.0))
    assert s(np.float32(3.0)) in (0.0, 6.0)


def test_same_seed_shares_a_mask_different_seeds_do_not():
    x = np.ones((2000,), F32)

    def f(x):
        return (dropout(x, 0.5, deterministic=False, seed=1),
                dropout(2 * x, 0.5, deterministic=False, seed=1),
                dropout(x, 0.5, deterministic=False, seed=2))

    compiled = _compile(f, x)
    assert compiled.op_histogram()["random_bernoulli"] == 2
    a, b, c = compiled(x)
    np.testing.assert_array_equal(b, 2 * a)  # same (seed, rate, shape): JAX's semantics
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("seed", [-1, 4])
def test_gradient_reuses_the_forward_mask(seed):
    """In ONE program (so that even seed=-1, a fresh mask per call, must be shared):
    grad of sum(w * dropout(x)) is w * scale where the forward kept x and 0 where it dropped."""
    rate = 0.4
    x = RNG.uniform(0.5, 2.0, size=(50, 40)).astype(F32)
    w = RNG.uniform(0.5, 2.0, size=(50, 40)).astype(F32)
    scale = dropout_scale(rate, F32)

    def loss(x, w):
        y = dropout(x, rate, deterministic=False, seed=seed)
        return (w * y).sum(), y

    # rlxjax's own reverse mode
    g_fn = rlxjax.coreml_grad(loss, has_aux=True, backend="reference")
    compiled = g_fn.lower(x, w).compile()
    compiled.validate()
    g, y = g_fn(x, w)
    kept = _check_drop_statistics(x, y, rate)
    np.testing.assert_array_equal(g, np.where(kept, w * scale, 0))

    # JAX's AD (a second rlx_dropout on the cotangent) compiled by coreml_jit
    both = _compile(lambda x, w: jax.grad(loss, has_aux=True)(x, w), x, w)
    g, y = both(x, w)
    kept = _check_drop_statistics(x, y, rate)
    np.testing.assert_array_equal(g, np.where(kept, w * scale, 0))


# -- the reference interpreter's random_bernoulli -------------------------------------------
def test_reference_random_bernoulli():
    op = MIL_OP_IMPLS["random_bernoulli"]
    shape = np.array([30, 40], I32)
    (d,) = op({"shape": shape})  # coremltools' defaults: prob 0.5 fp32, seed -1
    assert d.dtype == F32 and d.shape == (30, 40) and set(np.unique(d)) <= {0, 1}
    (z,) = op({"shape": shape, "prob": F16(0), "seed": I32(3)})
    (o,) = op({"shape": shape, "prob": F16(1), "seed": I32(3)})
    assert z.dtype == F16 and not z.any() and o.all()
    (a,), (b,) = (op({"shape": shape, "prob": F32(0.3), "seed": I32(9)}) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError):
        op({"shape": np.array([0, 2], I32)})
