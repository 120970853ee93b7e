"""igamma, igammac, igamma_grad_a and betainc on Core AI (rlxjax/ir/special_incomplete.py,
decomposed by rlxjax/transforms/legalize/special.py): compiled with format="aimodel", run on
Apple's Core AI runtime, against float64 (scipy.special; mpmath for igamma_grad_a) in
tools/math_accuracy.py's error measure (docs/numerics.md), held to the worst error measured
on the full grids (docs/coreai.md) rounded up; JAX's edge values (NaN, 0, 1, ±inf) exactly;
the gradients (dx, and da through igamma_grad_a) against float64 within XLA's own error plus
8·eps·max|value|, both rlxjax's derivative (coreml_grad) and JAX's (jax.grad, traced).

The default suite runs two programs on a subsample; the full grids, broadcast shapes and
hypothesis-drawn values are ``slow``."""
from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

import rlxjax

pytest.importorskip("coreai")
pytest.importorskip("scipy.special")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import math_accuracy  # noqa: E402  (the error measure of docs/numerics.md)

F32 = np.float32
EPS = float(np.finfo(F32).eps)
NAMES = ("igamma", "igammac", "igamma_grad_a", "betainc")
#: name -> the worst "mixed" error (ulps of max(|exact|, 1)) per tools/math_accuracy.py
#: domain, measured on Core AI on the full grids (docs/coreai.md), rounded up
MIXED = {"igamma": (9, 10), "igammac": (9, 10), "igamma_grad_a": (13,), "betainc": (440,)}
#: JAX's edge cases: a, (b,) x
EDGES = {
    "igamma": ([0, 0, 1, -1, 1, np.nan, 2, 1e-3, 50, 3e3, np.inf, 1],
               [0, 1, 0, 1, -1, 1, np.inf, 1e-30, 1e-2, 3e3, 1, np.nan]),
    "betainc": ([0, 1, 0, 2, np.inf, 1, -1, 2, 3, 1e-3, 50, 0.5],
                [1, 0, 0, np.inf, 2, 2, 1, 2, 3, 1e-3, 50, 0.5],
                [0.5, 0.5, 0.5, 0.5, 0.5, 0, 0.5, 1.5, 1, 0.3, 0.5, np.nan]),
}
EDGES["igammac"] = EDGES["igamma"]
EDGES["igamma_grad_a"] = EDGES["igamma"]


def _fn(name):
    return math_accuracy.cases()[name][0]


def _domains(name, every):
    fn, ref, domains = math_accuracy.cases()[name]
    return ref, [[np.asarray(a, F32)[::every] for a in args] for _, args in domains]


def _parts(name, every):
    """The function's domains (subsampled) and then its edges, concatenated: one call."""
    fn, ref, domains = math_accuracy.cases()[name]
    doms = [[np.asarray(a, F32)[::every] for a in args] for _, args in domains]
    doms.append([np.asarray(v, F32) for v in EDGES[name]])
    sizes = [len(d[0]) for d in doms]
    return fn, ref, [np.concatenate(c) for c in zip(*doms)], np.cumsum([0] + sizes)


def _grad_points():
    a, x = np.meshgrid(np.geomspace(0.05, 40, 12), np.geomspace(0.02, 60, 12), indexing="ij")
    return a.ravel().astype(F32), x.ravel().astype(F32)


def _igamma_grad64(a, x):
    """dP/da (a central difference of scipy's float64 P, h = 1e-6·a: error ~1e-10) and
    dP/dx = x^(a-1)·e^-x / Gamma(a), in float64."""
    import scipy.special as sp

    a, x = a.astype(np.float64), x.astype(np.float64)
    h = 1e-6 * a
    da = (sp.gammainc(a + h, x) - sp.gammainc(a - h, x)) / (2 * h)
    return [da, np.exp((a - 1) * np.log(x) - x - sp.gammaln(a))]


def _igamma_sum(a, x):
    return jnp.sum(lax.igamma(a, x))


def _check(names, every, grads=False):
    """One Core AI program evaluating each function on its domains (subsampled) and edges,
    and with ``grads`` jax.grad of igamma in a and x: the mixed error against float64
    within MIXED, the edges equal to jax.jit's; the gradients against float64 (scipy)
    within XLA's fp32 error plus 8·eps·max|value|."""
    parts = [(n,) + _parts(n, every) for n in names]
    flat = [a for p in parts for a in p[3]]
    ga, gx = _grad_points()
    jgrad = jax.grad(_igamma_sum, (0, 1))

    def fun(*xs):
        out, i = [], 0
        for _, fn, _, args, _ in parts:
            out.append(fn(*xs[i:i + len(args)]))
            i += len(args)
        return out + (list(jgrad(*xs[i:])) if grads else [])

    def edges_and_grads(*xs):  # XLA's, in one jax.jit
        out, i = [], 0
        for _, fn, _, args, cut in parts:
            out.append(fn(*[v[cut[-2]:] for v in xs[i:i + len(args)]]))
            i += len(args)
        return out + (list(jgrad(*xs[i:])) if grads else [])

    extra = [ga, gx] if grads else []
    got = rlxjax.coreml_jit(fun, format="aimodel")(*flat, *extra)
    xla = jax.jit(edges_and_grads)(*flat, *extra)
    for (n, _, ref, args, cut), g, want in zip(parts, got, xla):
        g, want = np.asarray(g), np.asarray(want)
        for k in range(len(cut) - 2):
            with np.errstate(all="ignore"):
                exact = ref(*[a[cut[k]:cut[k + 1]].astype(np.float64) for a in args])
            _, m = math_accuracy.errors(g[cut[k]:cut[k + 1]], exact)
            assert m.max() <= MIXED[n][k], (n, k, m.max())
        # JAX's edge values bit for bit (NaN, ±inf, 0, 1)
        edge = g[cut[-2]:]
        np.testing.assert_array_equal(np.isnan(edge), np.isnan(want), err_msg=n)
        special = ~np.isfinite(want) | (want == 0) | (want == 1)
        np.testing.assert_array_equal(edge[special], want[special], err_msg=n)
    if grads:
        _within(got[len(parts):], xla[len(parts):], jgrad, ga, gx, truth=_igamma_grad64(ga, gx))


def test_incomplete_gamma_and_beta_sample_and_gradients_against_float64():
    _check(NAMES, every=97, grads=True)


def _against_float64(fun, *args):
    """fun's results on Core AI against float64 (JAX with x64) within XLA's own fp32 error
    plus 8·eps·max|value| (tests/coreai_format/test_coreai_linalg.py's bound)."""
    got = jax.tree.leaves(rlxjax.coreml_jit(fun, format="aimodel")(*args))
    return _within(got, jax.jit(fun)(*args), fun, *args)


def _within(got, xla, fun, *args, truth=None):
    """``got`` against float64 (``truth``, else JAX in x64) within XLA's fp32 error plus
    8·eps·max|value|."""
    if truth is None:
        with jax.enable_x64(True):
            truth = jax.tree.leaves(jax.jit(fun)(*[np.asarray(a, np.float64) for a in args]))
    got, xla = jax.tree.leaves(got), jax.tree.leaves(xla)
    assert len(got) == len(truth) == len(xla)
    ratios = []
    for g, t, j in zip(got, truth, xla):
        g, t, j = (np.asarray(v, np.float64) for v in (g, t, j))
        np.testing.assert_array_equal(np.isnan(g), np.isnan(t))
        ok = ~np.isnan(t)
        scale = np.max(np.abs(t[ok]))
        bound = np.max(np.abs(j[ok] - t[ok])) + 8 * EPS * scale
        err = np.max(np.abs(g[ok] - t[ok]))
        assert err <= bound, (err, bound)
        ratios.append(err / bound)
    return ratios


def _loss(a, x):
    return (jnp.sum(lax.igamma(a, x) * 2) + jnp.sum(lax.igammac(a, x))
            + jnp.sum(lax.betainc(jnp.full_like(x, 2.5), jnp.full_like(x, 0.7), x / (x + 1))))


@pytest.mark.slow
def test_rlxjax_gradients_against_float64():
    """rlxjax's own derivative (transforms/vjp/special.py), compiled for Core AI."""
    a, x = _grad_points()
    got = rlxjax.coreml_grad(_loss, argnums=(0, 1), format="aimodel")(a, x)
    fun = jax.grad(_loss, (0, 1))
    _within(got, jax.jit(fun)(a, x), fun, a, x)


# -- slow: the full grids, broadcast shapes, drawn values --------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_full_grids_within_the_measured_error(name):
    _check((name,), every=1 if name != "igamma_grad_a" else 3)


@pytest.mark.slow
@pytest.mark.parametrize("shapes", [((), (3,)), ((2, 1), (1, 3)), ((4,), ())], ids=str)
def test_broadcast_and_rank0_operands(shapes):
    rng = np.random.default_rng(len(shapes[0]) * 3 + len(shapes[1]))
    a = rng.uniform(0.1, 8, shapes[0]).astype(F32)
    x = rng.uniform(0.0, 12, shapes[1]).astype(F32)

    def fun(a, x):
        return (lax.igamma(a, x), lax.igammac(a, x), lax.igamma_grad_a(a, x),
                lax.betainc(a, x + 1, x / 12))

    _against_float64(fun, a, x)


@pytest.mark.slow
@settings(max_examples=5, deadline=None)
@given(st.lists(st.tuples(*[st.floats(float(F32(1e-2)), 100, width=32)] * 3,
                          st.floats(0, 1, width=32)),
                min_size=1, max_size=12))
def test_drawn_values_against_float64(vals):
    """Values drawn in the measured domains (a, x, b in [1e-2, 1e2], x in [0, 1])."""
    import scipy.special as sp

    a, x, b, u = (np.array(v, F32) for v in zip(*vals))
    got = rlxjax.coreml_jit(lambda a, x, b, u: (lax.igamma(a, x), lax.igammac(a, x),
                                                lax.betainc(a, b, u)), format="aimodel")(a, x, b, u)
    a64, x64, b64, u64 = (v.astype(np.float64) for v in (a, x, b, u))
    for g, exact, bound in ((got[0], sp.gammainc(a64, x64), MIXED["igamma"][0]),
                            (got[1], sp.gammaincc(a64, x64), MIXED["igammac"][0]),
                            (got[2], sp.betainc(a64, b64, u64), MIXED["betainc"][0])):
        assert math_accuracy.errors(g, exact)[1].max() <= bound


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_fp16_values_bit_for_bit_with_jax(precision):
    """fp16 operands are computed in fp32 and rounded once, as XLA does: carried fp16
    values (precision="fp32") and Core AI fp16 ones (precision="fp16") alike."""
    rng = np.random.default_rng(5)
    a, x, u = (rng.uniform(lo, hi, 300).astype(np.float16)
               for lo, hi in ((0.1, 20), (0, 30), (0, 1)))

    def fun(a, x, u):
        return (lax.igamma(a, x), lax.igammac(a, x), lax.igamma_grad_a(a, x),
                lax.betainc(a, x + np.float16(0.5), u))

    got = rlxjax.coreml_jit(fun, format="aimodel", precision=precision)(a, x, u)
    for g, w in zip(got, jax.jit(fun)(a, x, u)):
        assert np.asarray(g).dtype == np.float16
        np.testing.assert_array_equal(np.asarray(g).view(np.int16), np.asarray(w).view(np.int16))


@pytest.mark.slow
def test_inside_a_scan():
    """The loops nested in a scan's Core AI while (the carry feeds the operands)."""
    a, x = np.array([0.5, 2, 5, 10], F32), np.array([0.3, 1, 7, 12], F32)

    def fun(a, x):
        def body(c, _):
            return c + lax.igamma(a, x + c), lax.betainc(a, a, c / (c + 4))

        return lax.scan(body, x * 0, None, length=3)

    _against_float64(fun, a, x)
