"""fp16 values on Core AI: carried as fp32 and rounded to fp16 after every op that may leave
the fp16 values (rlxjax/ir/halfcarry.py), as XLA:CPU computes f16.

The exact ops are bit for bit against ``jax.jit`` in fp16 (runtime operands: XLA rewrites a
division by a *constant* into a product with the fp16-rounded reciprocal, docs/coreai.md);
the rest are the fp16 rounding of an fp32 computation, checked against float64: the result
is the nearest fp16 value of the float64 truth unless that truth lies within the fp32
computation's own error of a rounding boundary.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlxjax

pytest.importorskip("coreai")

F16 = np.float16
EPS32 = float(np.finfo(np.float32).eps)
_rng = np.random.default_rng(7)
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 65504, -65504, 6e-8, -6e-8, 6.1e-5,
                    -3e-6, 1e-4, 0.5, 1.5, 2.5, -2.5, 300, 1000, 2049, 0.333], F16)
A = np.concatenate([(_rng.standard_normal(44) * 8).astype(F16), SPECIAL]).reshape(8, 8)
B = np.concatenate([(_rng.standard_normal(44) * 3).astype(F16), SPECIAL[::-1]]).reshape(8, 8)


def _bits_equal(got, want):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind != "f":
        np.testing.assert_array_equal(got, want)
        return
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_array_equal(got[ok], want[ok])
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


W = (np.arange(64, dtype=np.float32).reshape(8, 8) / 7).astype(F16)  # a closure constant


def _exact(a, b):
    i = a.astype(jnp.int32)
    return (a + b, a - b, a * b, a / b, jnp.sqrt(a), jnp.sqrt(jnp.abs(a)), -a, jnp.abs(a),
            jnp.floor(a), jnp.ceil(a), jnp.round(a), jnp.sign(a), jnp.maximum(a, b),
            jnp.minimum(a, b), lax.rem(a, b), jnp.clip(a, -2.0, 3.0), a * a, a ** 3,
            lax.integer_pow(a, -2), a > b, a <= b, a == b, jnp.where(a > b, a, b), i,
            i.astype(jnp.float16) * 33, a.astype(jnp.float32), a.astype(jnp.int8),
            (a.astype(jnp.float32) * 1.0001).astype(jnp.float16),
            (a.astype(jnp.float32) * 3000.5).astype(jnp.float16), jnp.max(a, 1),
            jnp.argmax(a, 0), jnp.transpose(a)[::2] * b[:4], jnp.concatenate([a, b]) + 1,
            a * W, a + jnp.asarray(W, jnp.float32).astype(jnp.float16))


def test_exact_fp16_ops_match_jax_bit_for_bit():
    got = rlxjax.coreml_jit(_exact, format="aimodel")(A, B)
    for g, w in zip(got, jax.jit(_exact)(A, B)):
        _bits_equal(g, w)


def _check_rounded(got, truth, slack):
    """``got`` (fp16) is the fp16 rounding of a value within ``slack`` of ``truth``
    (float64): it is fp16(truth), or the other neighbour when ``truth`` is within
    ``slack`` of their midpoint."""
    g = np.asarray(got)
    assert g.dtype == np.float16
    t = np.asarray(truth, np.float64)
    slack = np.broadcast_to(np.asarray(slack, np.float64), t.shape)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(t))
    ok = ~np.isnan(t)
    g64, t, slack = g[ok].astype(np.float64), t[ok], slack[ok]
    with np.errstate(invalid="ignore", over="ignore"):
        r = t.astype(F16).astype(np.float64)
        err = np.where(g64 == r, 0.0, np.abs(g64 - t) - np.abs(r - t))
        # an overflow: fp32's error may decide whether a value near 65520 rounds to inf
        near_max = np.isinf(g64) & (np.abs(t) + slack >= 65520) & (np.sign(g64) == np.sign(t))
    bad = ~((err <= 2 * slack) | near_max)
    assert not bad.any(), (g[ok][bad][:5], t[bad][:5], slack[bad][:5])
    return bool((g64 == r).all())


def _f64(fun, *args):
    with jax.enable_x64(True):
        return jax.tree.leaves(jax.jit(fun)(*[np.asarray(a, np.float64) for a in args]))


#: fp32 transcendentals: within 4 fp32 ulp of the truth (Core AI's measured worst is 2.12,
#: docs/coreai.md); the argument is an fp16 value, exact in fp32
def _elementwise(a, b):
    return (jnp.exp(b), jnp.log(jnp.abs(a)), jnp.tanh(a), lax.logistic(a), jnp.sin(a),
            jnp.cos(b), lax.erf(b), jnp.expm1(b), jnp.log1p(jnp.abs(a)), jnp.abs(a) ** b,
            jnp.exp2(b), lax.rsqrt(jnp.abs(a)))


def _accumulating(a, b):  # sums of exact fp32 terms (fp16 products are exact in fp32)
    return (lax.reduce(a, F16(0), lax.add, (1,)), a @ b, jnp.cumsum(a, 1),
            lax.dot_general(a, b, (((0,), (0,)), ((), ()))))


def test_rounded_fp16_ops_against_float64():
    fin = lambda x: np.where(np.isfinite(x), x, F16(1.5))  # noqa: E731
    args = (A, np.clip(B, -9, 9).astype(F16), fin(A), fin(B))
    both = lambda a, b, c, d: (_elementwise(a, b), _accumulating(c, d))  # noqa: E731
    got_e, got_a = rlxjax.coreml_jit(both, format="aimodel")(*args)  # one compile
    for g, t in zip(got_e, _f64(_elementwise, *args[:2])):
        _check_rounded(g, t, 4 * EPS32 * np.abs(t))
    sizes = _f64(lambda x, y: _accumulating(jnp.abs(x), jnp.abs(y)), *args[2:])
    for g, t, s in zip(got_a, _f64(_accumulating, *args[2:]), sizes):
        _check_rounded(g, t, 8 * EPS32 * s)  # <= 8 terms: (n - 1) eps/2 · Σ|terms|


# -- property tests over shapes and every kind of fp16 value (slow: a compile per example) --
def _hypothesis():
    hyp = pytest.importorskip("hypothesis")
    hnp = pytest.importorskip("hypothesis.extra.numpy")
    return hyp, hyp.strategies, hnp


hyp, st, hnp = _hypothesis()
#: a compile per example: no shrinking (minutes); the failing example is printed as drawn
_SETTINGS = dict(deadline=None, phases=[hyp.Phase.explicit, hyp.Phase.generate])
_F16S = st.floats(width=16, allow_nan=True, allow_infinity=True, allow_subnormal=True)


def _pair(draw_shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3,
                                                         max_side=5)):
    return draw_shapes.flatmap(lambda s: st.tuples(
        hnp.arrays(np.float16, s.input_shapes[0], elements=_F16S),
        hnp.arrays(np.float16, s.input_shapes[1], elements=_F16S)))


def _chain(a, b, np=jnp):  # chains of exact ops, each result rounded to fp16
    f32 = np.float32
    return (a + b, a * b - a, (a - b) / (b * b + a), np.sqrt(np.abs(a * b)) * F16(3) + b,
            np.abs(a) * F16(1000) - b,
            (a.astype(f32) * b.astype(f32) * f32(3.1)).astype(np.float16) + a)


@pytest.mark.slow
@hyp.settings(max_examples=40, **_SETTINGS)
@hyp.given(_pair())
def test_exact_fp16_chains_bit_for_bit_property(ab):
    # against numpy's fp16, which rounds every op's result (IEEE). jax.jit is not the
    # reference for chains: XLA:CPU's fused loops may keep a product unrounded into the add
    # that follows (measured: sqrt(|a·b|)·3 + b at a = 0.1111, b = 0.01088), and fold
    # constant factors together
    a, b = ab
    got = rlxjax.coreml_jit(_chain, format="aimodel")(a, b)
    with np.errstate(all="ignore"):
        want = _chain(a, b, np=np)
    for g, w in zip(got, want):
        _bits_equal(g, np.asarray(w, np.float16))


@pytest.mark.slow
@hyp.settings(max_examples=8, **_SETTINGS)
@hyp.given(hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=40).flatmap(
    lambda s: hnp.arrays(np.float16, s, elements=st.floats(-300, 300, width=16))))
def test_fp16_sums_and_matmul_against_float64_property(a):
    fun = lambda x: (lax.reduce(x, F16(0), lax.add, (0,)), x.T @ x,  # noqa: E731
                     jnp.cumsum(x, 0), jnp.exp(x / 64), jnp.tanh(x))
    got = rlxjax.coreml_jit(fun, format="aimodel")(a)
    n = a.shape[0]
    sizes = _f64(lambda x: fun(jnp.abs(x)), a)
    for k, (g, t) in enumerate(zip(got, _f64(fun, a))):
        slack = n * EPS32 * np.asarray(sizes[k]) if k < 3 else 4 * EPS32 * np.abs(t)
        _check_rounded(g, t, slack)


def test_fp16_gradient_against_float64():
    # rlxjax differentiates the RLX graph itself, so its fp16 cotangents need not round as
    # jax.grad's do. On positive values every op keeps the sign (no cancellation): each of
    # the <= 6 fp16 roundings on a path (u = 2**-11) moves the result by <= u relative
    def loss(w, x):
        y = (x * w + x * x) * (w + 2) / 3 + jnp.sqrt(w)
        return jnp.sum(y.astype(jnp.float32) ** 2)

    r = np.random.default_rng(3)
    w, x = (r.uniform(0.5, 4, (4, 8)).astype(F16) for _ in range(2))
    got = rlxjax.coreml_grad(loss, argnums=(0, 1), format="aimodel")(w, x)
    with jax.enable_x64(True):
        truth = jax.grad(loss, argnums=(0, 1))(w.astype(np.float64), x.astype(np.float64))
    xla = jax.jit(jax.grad(loss, argnums=(0, 1)))(w, x)
    for g, t, j in zip(got, truth, xla):
        assert np.asarray(g).dtype == np.float16
        t = np.asarray(t)
        bound = 8 * 2.0 ** -11 * np.abs(t)
        assert (np.abs(np.asarray(j, np.float64) - t) <= bound).all()  # XLA's fp16 too
        assert (np.abs(np.asarray(g, np.float64) - t) <= bound).all()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_reduce_precision_bit_for_bit(dtype):
    # every fp16 value / fp32's edge binades (subnormals, flush and overflow bounds), against
    # the constant folder's port of XLA's integer algorithm (itself checked against XLA in
    # tests/frontend/test_reduce_precision.py) and against JAX for the formats JAX runs
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "frontend"))
    from test_reduce_precision import (EDGE_EXPONENTS, FORMATS, SPECIAL, _binades,
                                       _bits_equal as bits_equal)

    from rlxjax.transforms.fold.bitwise import reduce_precision as folded

    if dtype == "float16":
        x = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(F16)
    else:
        x = np.concatenate([_binades(EDGE_EXPONENTS), SPECIAL])
    fun = lambda v: tuple(lax.reduce_precision(v, e, m) for e, m in FORMATS)  # noqa: E731
    got = rlxjax.coreml_jit(fun, format="aimodel")(x)
    for (e, m), g in zip(FORMATS, got):
        bits_equal(g, folded(x, e, m))
    for g, w in zip(got[:3], jax.jit(lambda v: fun(v)[:3])(x)):
        bits_equal(g, w)
