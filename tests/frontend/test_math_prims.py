"""Elementwise math (rlxjax/ir/special.py): inverse trigonometric and hyperbolic functions,
cbrt, atan2, nextafter, the gamma family, incomplete gamma and beta, Bessel i0e/i1e and
erf_inv, against float64 (scipy / numpy) on grids, against jax.jit on hypothesis-drawn
shapes and values (special values included), and their gradients against jax.grad.

The accuracy bounds are the measured errors of docs/numerics.md ("Elementwise math",
reproduced by tools/math_accuracy.py on denser grids); comparisons with JAX use
rtol 1e-5 / atol 1e-6 except where a row names XLA's own measured error that needs more.
"""
from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special as sp
from hypothesis import given, settings, strategies as st
from jax import lax

import rlxjax
from helpers import assert_tree_close, check_against_jax, examples, TEST_BACKEND
from primitive_strategies import F32, arrays, bshapes, float_elements, shapes

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import math_accuracy  # noqa: E402  (the error measure of docs/numerics.md)

FEW = settings(max_examples=examples(4), deadline=None)


def _run(fn, *args, precision="fp32"):
    return np.asarray(rlxjax.coreml_jit(fn, backend="reference", precision=precision)(*args))


_FLAT = 128  # >= every broadcast size the strategies draw (5 x 5 x 5)
_JITTED = {}


def _jax_flat(fn, *args):
    """jax.jit(fn) on the operands broadcast, flattened and padded to one length, so JAX
    compiles each function once (its while loops take seconds to compile) however many
    shapes hypothesis draws."""
    args = [np.asarray(a) for a in args]
    shape = np.broadcast_shapes(*(a.shape for a in args))
    n = int(np.prod(shape))
    flat = [np.pad(np.broadcast_to(a, shape).ravel(), (0, _FLAT - n), constant_values=1)
            for a in args]
    jitted = _JITTED.setdefault(fn, jax.jit(fn))
    return np.asarray(jitted(*flat))[:n].reshape(shape)


def _check_shapes(fn, *args, rtol=1e-5, atol=1e-6):
    """rlxjax (compiled for these shapes, on the reference backend) against JAX."""
    got = rlxjax.coreml_jit(fn, backend="reference")(*args)
    assert_tree_close(got, _jax_flat(fn, *args), rtol=rtol, atol=atol)


# -- accuracy against float64 -----------------------------------------------------------
# name -> (max ulp, max mixed) on tools/math_accuracy.py's domains (every domain of the
# function): docs/numerics.md's measured errors plus about one ulp, because the natively
# lowered ops (and the log / atan / exp inside the compositions) run numpy's float32 kernels
# on the reference backend, and those differ by platform (SVML on AVX-512 machines: tan is
# 2.6 ulps there). The grids here are coarser (every 7th / 13th point).
BOUNDS = {
    "tan": (4, 4), "asin": (4, 4), "acos": (4, 4), "atan": (4, 4), "sinh": (4, 4),
    "cosh": (4, 4), "atanh": (4, 4), "asinh": (4.5, 3), "acosh": (6, 3.5), "cbrt": (1.5, 1.5),
    "atan2": (3, 2.5), "erf_inv": (4.5, 4), "bessel_i0e": (8, 4.5), "bessel_i1e": (10.5, 2),
    "nextafter": (0, 0),
}
GAMMA_BOUNDS = {  # (domain index, max ulp or None (not bounded: roots), max mixed)
    "lgamma": [(0, 5.5, 3.5), (1, 4.5, 3), (2, None, 17)],
    "digamma": [(0, 4, 3.5), (1, 3.5, 3), (2, None, 9)],
    "polygamma": [(0, 7, 6), (1, 4.5, 4.5)],
    "zeta": [(0, 11, 5)],
    "igamma": [(0, None, 10), (1, None, 11)],
    "igammac": [(0, None, 10), (1, None, 11)],
}


def _subsample(args, every=7):
    return [np.asarray(a)[::every] for a in args]


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_accuracy_against_float64(name):
    fn, ref, domains = math_accuracy.cases()[name]
    max_ulp, max_mixed = BOUNDS[name]
    for label, args in domains:
        args = _subsample(args)
        with np.errstate(all="ignore"):
            exact = ref(*[a.astype(np.float64) for a in args])
        e, m = math_accuracy.errors(_run(fn, *args), exact)
        assert e.max() <= max_ulp and m.max() <= max_mixed, (label, e.max(), m.max())


@pytest.mark.parametrize("name", sorted(GAMMA_BOUNDS))
def test_special_function_accuracy_against_float64(name):
    fn, ref, domains = math_accuracy.cases()[name]
    for k, max_ulp, max_mixed in GAMMA_BOUNDS[name]:
        label, args = domains[k]
        args = _subsample(args, 13)
        with np.errstate(all="ignore"):
            exact = ref(*[a.astype(np.float64) for a in args])
        e, m = math_accuracy.errors(_run(fn, *args), exact)
        assert m.max() <= max_mixed, (label, m.max())
        assert max_ulp is None or e.max() <= max_ulp, (label, e.max())


def test_igamma_is_accurate_where_jax_loses_digits():
    # P(a, x) and Q(a, x) near x = a for large a (Poisson / gamma CDFs): JAX's exponent
    # a·log x - x - lgamma(a) carries an ulp of a·log x (measured: 6e-3 off at a = 1e4)
    a = np.array([100.0, 1000.0, 1e4, 1e4, 3e4], F32)
    x = np.array([101.0, 990.0, 1e4 + 50, 9900.0, 3e4], F32)
    exact = sp.gammainc(a.astype(float), x.astype(float))
    np.testing.assert_allclose(_run(lax.igamma, a, x), exact, rtol=0, atol=2e-6)
    np.testing.assert_allclose(_run(lax.igammac, a, x), 1 - exact, rtol=0, atol=2e-6)


def _igamma_grad_a64(a, x, h=1e-6):
    """dP/da by a central difference of scipy's float64 P (error ~1e-9 here)."""
    a, x = a.astype(np.float64), x.astype(np.float64)
    return (sp.gammainc(a + h, x) - sp.gammainc(a - h, x)) / (2 * h)


@FEW
@given(data=st.data())
def test_igamma_family_with_broadcasting_against_float64(data):
    s0, s1 = data.draw(bshapes()).input_shapes
    a = data.draw(arrays(F32, s0, float_elements(0.05, 20)))
    x = data.draw(arrays(F32, s1, float_elements(0.05, 30)))
    a64, x64 = np.broadcast_arrays(a.astype(np.float64), x.astype(np.float64))

    def bcast(fn):
        return lambda u, v: fn(*jnp.broadcast_arrays(u, v))

    # mixed errors measured <= 9 ulps of 1 (docs/numerics.md): 1.1e-6; dP/da <= 13 ulps
    np.testing.assert_allclose(_run(bcast(lax.igamma), a, x), sp.gammainc(a64, x64), atol=2e-6,
                               rtol=0)
    np.testing.assert_allclose(_run(bcast(lax.igammac), a, x), sp.gammaincc(a64, x64),
                               atol=2e-6, rtol=0)
    np.testing.assert_allclose(_run(bcast(lax.igamma_grad_a), a, x), _igamma_grad_a64(a64, x64),
                               atol=3e-6, rtol=1e-5)


def test_igamma_gradients_against_float64():
    a = np.linspace(0.2, 9, 17).astype(F32)
    x = np.linspace(0.1, 12, 17).astype(F32)
    w = np.linspace(0.5, 1.5, 17).astype(F32)
    for fn, sign in ((lax.igamma, 1.0), (lax.igammac, -1.0)):
        da, dx = rlxjax.coreml_grad(lambda u, v: jnp.sum(fn(u, v) * w), argnums=(0, 1),
                                    backend="reference")(a, x)
        a64, x64 = a.astype(np.float64), x.astype(np.float64)
        dx64 = np.exp(-x64 + (a64 - 1) * np.log(x64) - sp.gammaln(a64))
        np.testing.assert_allclose(dx, sign * w * dx64, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(da, sign * w * _igamma_grad_a64(a, x), rtol=2e-5, atol=2e-6)
    xb = np.linspace(0.05, 0.95, 17).astype(F32)
    got = rlxjax.coreml_grad(lambda v: jnp.sum(lax.betainc(F32(2.5), F32(0.7), v)),
                             backend="reference")(xb)
    xb64 = xb.astype(np.float64)
    want = xb64 ** 1.5 * (1 - xb64) ** -0.3 / sp.beta(2.5, 0.7)
    np.testing.assert_allclose(got, want, rtol=2e-5)


def test_betainc_against_float64():
    rng = np.random.default_rng(0)
    a, b = (rng.uniform(0.05, 20, 400).astype(F32) for _ in range(2))
    x = rng.uniform(0, 1, 400).astype(F32)
    exact = sp.betainc(a.astype(float), b.astype(float), x.astype(float))
    # measured 7e-6 at worst on this draw (XLA: 6e-6): the prefix exp(a log x + b log(1-x)
    # - log B(a, b)) carries an ulp of its largest term, as in JAX's algorithm
    np.testing.assert_allclose(_run(lax.betainc, a, b, x), exact, rtol=0, atol=2e-5)


# -- special values and shapes against JAX --------------------------------------------
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, -3.0, 1e-30, -1e-30, 1e30,
                    -1e30, np.inf, -np.inf, np.nan, 0.9999999, -0.9999999, 1.0000001], F32)
UNARY = {
    "tan": lax.tan, "asin": lax.asin, "acos": lax.acos, "atan": lax.atan, "sinh": lax.sinh,
    "cosh": lax.cosh, "asinh": lax.asinh, "acosh": lax.acosh, "atanh": lax.atanh,
    "cbrt": lax.cbrt, "erf_inv": lax.erf_inv, "lgamma": lax.lgamma, "digamma": lax.digamma,
    "bessel_i0e": lax.bessel_i0e, "bessel_i1e": lax.bessel_i1e,
}
# domains where XLA is within 1e-5 of float64 and values do not swing on an ulp of input
DOMAINS = {
    "tan": (-1.4, 1.4), "asin": (-1, 1), "acos": (-1, 1), "atan": (-50, 50), "sinh": (-20, 20),
    "cosh": (-20, 20), "asinh": (-1e4, 1e4), "acosh": (1, 1e4), "atanh": (-0.99, 0.99),
    "cbrt": (-1e6, 1e6), "erf_inv": (-0.999, 0.999), "lgamma": (0.01, 50),
    "digamma": (0.01, 50), "bessel_i0e": (-50, 50), "bessel_i1e": (-50, 50),
}


def _all_unary(xs):
    """Every unary function, each on its own operand, in one program (one compilation)."""
    names = sorted(UNARY)
    return names, lambda *vs: [UNARY[n](v) for n, v in zip(names, vs)]


def test_unary_special_values_match_jax():
    names, fn = _all_unary(None)
    got = rlxjax.coreml_jit(fn, backend="reference")(*[SPECIAL] * len(names))
    want = jax.jit(fn)(*[SPECIAL] * len(names))
    for n, g, w in zip(names, got, want):
        assert_tree_close(g, np.asarray(w), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(UNARY))
@FEW
@given(data=st.data())
def test_unary_matches_jax(name, data):  # 4 examples: each draws a new shape to compile
    lo, hi = DOMAINS[name]
    x = data.draw(arrays(F32, shapes(), float_elements(lo, hi)))
    # XLA's lgamma / digamma are off by up to 2.9e-6 / 1.3e-6 near their roots (x = 1, 2;
    # 1.46): tools/math_accuracy.py, docs/numerics.md
    _check_shapes(UNARY[name], x, atol=3e-6 if name in ("lgamma", "digamma") else 1e-6)


def test_gamma_family_on_the_negative_axis_matches_jax():
    # reflection: absolute errors near the negative roots (XLA: 2.7e-6 for lgamma, measured
    # on tools/math_accuracy.py's grid; rlxjax 9.5e-7), poles are inf / NaN as in JAX
    x = np.concatenate([np.linspace(-9.9, -0.05, 397), -np.arange(1, 10)]).astype(F32)
    check_against_jax(lax.lgamma, x, rtol=1e-5, atol=5e-6)
    check_against_jax(lax.digamma, x, rtol=1e-5, atol=5e-6)


BINARY = {"atan2": lax.atan2, "nextafter": lax.nextafter, "igamma": lax.igamma,
          "igammac": lax.igammac, "igamma_grad_a": lax.igamma_grad_a, "zeta": lax.zeta,
          "polygamma": lambda m, x: lax.polygamma(jnp.floor(jnp.abs(m)) % 4, x)}
# lax's binary primitives take equal shapes: jnp broadcasts first
_BROADCASTING = {n: (lambda u, v, fn=fn: fn(*jnp.broadcast_arrays(u, v)))
                 for n, fn in BINARY.items()}
BINARY_DOMAINS = {"atan2": ((-10, 10), (-10, 10)), "nextafter": ((-10, 10), (-10, 10)),
                  "igamma": ((0.05, 20), (0.05, 30)), "igammac": ((0.05, 20), (0.05, 30)),
                  "igamma_grad_a": ((0.1, 20), (0.05, 30)), "zeta": ((1.5, 12), (0.2, 20)),
                  "polygamma": ((0, 4), (0.2, 20))}


#: JAX takes ~3 s to compile each of these (while loops): compared with JAX under -m slow,
#: with float64 (scipy) in the default run
SLOW_JAX = ("igamma", "igammac", "igamma_grad_a")


def _binary_params():
    return [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_JAX else n
            for n in sorted(BINARY)]


@pytest.mark.parametrize("name", _binary_params())
@FEW
@given(data=st.data())
def test_binary_matches_jax_with_broadcasting(name, data):
    (lo0, hi0), (lo1, hi1) = BINARY_DOMAINS[name]
    s0, s1 = data.draw(bshapes()).input_shapes
    a = data.draw(arrays(F32, s0, float_elements(lo0, hi0)))
    b = data.draw(arrays(F32, s1, float_elements(lo1, hi1)))
    _check_shapes(_BROADCASTING[name], a, b, rtol=2e-5 if name == "igamma_grad_a" else 1e-5)


EDGES = np.array([0.0, -0.0, 1.0, -1.0, 2.5, np.inf, -np.inf, np.nan, 1e-30, 100.0], F32)


@pytest.mark.parametrize("name", _binary_params())
def test_binary_edges_match_jax(name):
    a, b = (v.ravel() for v in np.meshgrid(EDGES, EDGES, indexing="ij"))
    _check_shapes(_BROADCASTING[name], a, b)


@pytest.mark.slow
def test_betainc_matches_jax_and_its_edges():
    e = np.array([0.0, 0.5, 1.0, 3.0, -1.0, np.inf, np.nan], F32)
    a, b, x = (v.ravel() for v in np.meshgrid(e, e, np.array([0, 0.3, 1, 2, -0.5, np.nan], F32),
                                              indexing="ij"))
    check_against_jax(lax.betainc, a, b, x)
    rng = np.random.default_rng(1)
    a, b = (rng.uniform(0.1, 10, (3, 5)).astype(F32) for _ in range(2))
    check_against_jax(lax.betainc, a, b[:1], rng.uniform(0, 1, (3, 1)).astype(F32))


def test_zero_size_and_rank_zero_operands():
    got = _run(lambda a, x: lax.igamma(a, x) + lax.betainc(a, a, x / 4), F32(2.0),
               np.full((2, 3), 1.5, F32))
    want = sp.gammainc(2.0, 1.5) + sp.betainc(2.0, 2.0, np.float32(1.5) / 4)
    np.testing.assert_allclose(got, np.full((2, 3), want), rtol=1e-5)
    check_against_jax(lambda a, x: lax.polygamma(a, x) + lax.atan2(a, x), F32(1.0), F32(1.5))

    def empty(x):  # zero-size values inside the program
        e = x[:0]
        return x + jnp.sum(lax.zeta(e, e)) + jnp.sum(lax.lgamma(e)) + jnp.sum(lax.atan2(e, e))

    check_against_jax(empty, np.ones((2, 3), F32))


# -- nextafter is exact -----------------------------------------------------------------
def test_nextafter_is_exact_on_every_float16():
    x = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    fn = rlxjax.coreml_jit(lax.nextafter, backend="reference")
    for target in (np.inf, -np.inf, 0.0, 1.0):
        y = np.full_like(x, target)
        got, want = np.asarray(fn(x, y)), np.asarray(jax.jit(lax.nextafter)(x, y))
        assert np.array_equal(got.view(np.uint16)[~np.isnan(want)],
                              want.view(np.uint16)[~np.isnan(want)]), target
        assert np.array_equal(np.isnan(got), np.isnan(want))


def test_nextafter_is_exact_on_float32_bit_patterns():
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2 ** 32, 200_000, dtype=np.uint64).astype(np.uint32)
    edges = np.array([(e << 23) + d for e in range(256) for d in (0, 1, 0x7FFFFF)], np.uint32)
    bits = np.concatenate([bits, edges, edges | np.uint32(1 << 31)])
    x = bits.view(np.float32)
    fn = rlxjax.coreml_jit(lax.nextafter, backend="reference")
    normal = np.abs(x) >= np.finfo(F32).tiny * 2  # XLA on CPU flushes subnormals to 0
    for target in (np.inf, -np.inf, 0.0, -0.0):
        y = np.full_like(x, target)
        got = np.asarray(fn(x, y))
        for want, where in ((np.nextafter(x, y), slice(None)),  # C's, bit for bit
                            (np.asarray(jax.jit(lax.nextafter)(x, y)), normal)):
            g, w = got[where], want[where]
            same = (g.view(np.uint32) == w.view(np.uint32)) | (np.isnan(g) & np.isnan(w))
            assert same.all(), (target, x[where][~same][:4], g[~same][:4], w[~same][:4])


def test_nextafter_refuses_an_fp16_program_of_float32():
    x = np.ones(3, F32)
    with pytest.raises(rlxjax.UnsupportedPrimitiveError, match="nextafter.*precision='fp32'"):
        rlxjax.coreml_jit(lambda a, b: lax.nextafter(a, b), backend="reference",
                          precision="fp16")(x, x)
    with pytest.raises(rlxjax.UnsupportedPrimitiveError, match="nextafter"):  # constants too
        rlxjax.coreml_jit(lambda: lax.nextafter(jnp.float32(1), jnp.float32(2)),
                          backend="reference", precision="fp16")()
    got = rlxjax.coreml_jit(lambda: lax.nextafter(jnp.float16(1), jnp.float16(2)),
                            backend="reference", precision="fp16")()
    assert got == np.nextafter(np.float16(1), np.float16(2))


# -- gradients against jax.grad ------------------------------------------------------------
GRADS = {  # name -> (function of float32 arrays, inputs)
    "tan": (lax.tan, [np.linspace(-1.4, 1.4, 17)]),
    "asin": (lax.asin, [np.linspace(-0.99, 0.99, 17)]),
    "acos": (lax.acos, [np.linspace(-0.99, 0.99, 17)]),
    "atan": (lax.atan, [np.linspace(-30, 30, 17)]),
    "sinh": (lax.sinh, [np.linspace(-8, 8, 17)]),
    "cosh": (lax.cosh, [np.linspace(-8, 8, 17)]),
    "asinh": (lax.asinh, [np.linspace(-30, 30, 17)]),
    "acosh": (lax.acosh, [np.linspace(1.01, 30, 17)]),
    "atanh": (lax.atanh, [np.linspace(-0.99, 0.99, 17)]),
    "cbrt": (lax.cbrt, [np.linspace(-30, 30, 16)]),
    "erf_inv": (lax.erf_inv, [np.linspace(-0.99, 0.99, 17)]),
    "lgamma": (lax.lgamma, [np.linspace(-7.7, 9.3, 17)]),
    "digamma": (lax.digamma, [np.linspace(-5.7, 9.3, 17)]),
    "bessel_i0e": (lax.bessel_i0e, [np.linspace(-12, 12, 17)]),
    "bessel_i1e": (lax.bessel_i1e, [np.concatenate([np.linspace(-12, 12, 17), [0.0, 1e-9]])]),
    "atan2": (lax.atan2, [np.linspace(-3, 3, 17), np.linspace(2, -4, 17)]),
    "igamma": (lax.igamma, [np.linspace(0.2, 9, 17), np.linspace(0.1, 12, 17)]),
    "igammac": (lax.igammac, [np.linspace(0.2, 9, 17), np.linspace(12, 0.1, 17)]),
    "polygamma": (lambda x: lax.polygamma(np.float32(2), x), [np.linspace(0.3, 9, 17)]),
    "betainc_x": (lambda x: lax.betainc(np.float32(2.5), np.float32(0.7), x),
                  [np.linspace(0.05, 0.95, 17)]),
}


_SLOW_GRADS = ("igamma", "igammac", "betainc_x")  # JAX compiles their loops for seconds


def _grad_check(names):
    """coreml_grad against jax.grad of one loss summing every function in ``names`` on its
    own inputs (one program and one JAX compilation for all of them)."""
    inputs = {n: [np.asarray(v, F32) for v in GRADS[n][1]] for n in names}
    flat = [v for n in names for v in inputs[n]]

    def loss(*vs):
        total, k = 0.0, 0
        for n in names:
            m = len(inputs[n])
            out = GRADS[n][0](*vs[k:k + m])
            total = total + jnp.sum(out * jnp.linspace(0.5, 1.5, out.size).reshape(out.shape))
            k += m
        return total

    argnums = tuple(range(len(flat)))
    got = rlxjax.coreml_grad(loss, argnums=argnums, backend="reference")(*flat)
    want = jax.jit(jax.grad(loss, argnums=argnums))(*flat)
    k = 0
    for n in names:
        for _ in inputs[n]:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=n)
            k += 1


def test_gradients_match_jax():
    _grad_check([n for n in sorted(GRADS) if n not in _SLOW_GRADS])


SINGULAR = {  # the derivative's poles, zeros and limits: inf / NaN exactly where JAX has them
    "asin": (lax.asin, [[-1, 1, 0, -0.0]]), "acos": (lax.acos, [[-1, 1, 0]]),
    "atanh": (lax.atanh, [[-1, 1, 0]]), "acosh": (lax.acosh, [[1, 2, np.inf]]),
    "asinh": (lax.asinh, [[0, -0.0, np.inf, -np.inf, 1e30]]),
    "tan": (lax.tan, [[0, 1.5707964, -1.5707964]]), "cbrt": (lax.cbrt, [[0, -0.0, 8, np.inf]]),
    "atan2": (lax.atan2, [[0, 0, 1, -0.0, np.inf], [0, -0.0, 0, 0, np.inf]]),
    "erf_inv": (lax.erf_inv, [[-1, 1, 0]]),
    "lgamma": (lax.lgamma, [[0, -1, -2.5, 1, 2, np.inf]]),
    "digamma": (lax.digamma, [[0, -1, -2.5, 1, 2, np.inf]]),
    "bessel_i0e": (lax.bessel_i0e, [[0, -0.0, np.inf, 1e-9]]),
    "bessel_i1e": (lax.bessel_i1e, [[0, -0.0, np.inf, 1e-9, -1e-9, 1.19e-7, 1.2e-7]]),
    "sinh_cosh": (lambda x: lax.sinh(x) + lax.cosh(x), [[0, 89, -89]]),
}


def test_gradients_at_singular_points_match_jax():
    names = sorted(SINGULAR)
    inputs = [np.asarray(v, F32) for n in names for v in SINGULAR[n][1]]

    def loss(*vs):
        total, k = 0.0, 0
        for n in names:
            fn, xs = SINGULAR[n]
            total = total + jnp.sum(fn(*vs[k:k + len(xs)]))
            k += len(xs)
        return total

    argnums = tuple(range(len(inputs)))
    got = rlxjax.coreml_grad(loss, argnums=argnums, backend="reference")(*inputs)
    want = jax.grad(loss, argnums=argnums)(*inputs)
    assert_tree_close(list(got), [np.asarray(w) for w in want], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("name", _SLOW_GRADS)
def test_igamma_and_betainc_gradients_match_jax(name):
    _grad_check([name])


@pytest.mark.parametrize("fn,what", [
    (lambda x: lax.nextafter(x, x + 1), "nextafter"),
    (lambda x: lax.igamma_grad_a(x, x), "igamma_grad_a"),
    (lambda x: lax.zeta(x + 2, x), "zeta"),
    (lambda x: lax.polygamma(x, x), "order m"),
    (lambda x: lax.betainc(x, x, x / 2), "in a and b"),
])
def test_derivatives_jax_does_not_define_are_refused(fn, what):
    x = np.linspace(0.5, 2, 4).astype(F32)
    with pytest.raises(rlxjax.UnsupportedPrimitiveError, match=what) as info:
        rlxjax.coreml_grad(lambda v: jnp.sum(fn(v)), backend="reference")(x)
    assert "test_math_prims.py" in str(info.value)
    with pytest.raises(Exception):
        jax.grad(lambda v: jnp.sum(fn(v)))(x)


# -- fp16 -----------------------------------------------------------------------------------
def test_float16_operands_match_jax():
    names, fn = _all_unary(None)
    xs = [np.linspace(max(DOMAINS[n][0], -8), min(DOMAINS[n][1], 8), 41).astype(np.float16)
          for n in names]
    got = rlxjax.coreml_jit(fn, backend="reference")(*xs)
    want = jax.jit(fn)(*xs)
    for n, g, w in zip(names, got, want):
        assert g.dtype == np.float16, n
        np.testing.assert_allclose(g.astype(F32), np.asarray(w, F32), rtol=1e-2, atol=1e-2,
                                   err_msg=n)


def test_fp16_programs_compute_the_special_functions_in_fp32():
    # the inputs round to fp16 (a relative change of up to 4.9e-4) and so does the result;
    # computed in fp16 itself, lgamma's Lanczos-like sums would have no digit left
    x = np.linspace(0.1, 6, 31).astype(F32)
    x16 = x.astype(np.float16).astype(np.float64)
    for fn, ref in ((lax.lgamma, sp.gammaln), (lax.digamma, sp.psi),
                    (lambda v: lax.igamma(v, v[::-1]), lambda v: sp.gammainc(v, v[::-1]))):
        got = _run(fn, x, precision="fp16")
        np.testing.assert_allclose(got, ref(x16), rtol=2e-3, atol=2e-3)


# -- folding ---------------------------------------------------------------------------------
FOLDS = {  # name -> (function of constants, float64 reference or None: jax.jit)
    "tan": (lambda: lax.tan(jnp.float32(0.7)), None),
    "atan2": (lambda: lax.atan2(jnp.float32(-1.0), jnp.float32(-0.0)), None),
    "cbrt": (lambda: lax.cbrt(jnp.float32(-27.0)), None),
    "erf_inv": (lambda: lax.erf_inv(jnp.float32(0.3)), None),
    "lgamma": (lambda: lax.lgamma(jnp.array([-2.0, -2.5, 0.5, 7.0], F32)), None),
    "digamma": (lambda: lax.digamma(jnp.array([-2.0, -2.5, 0.5, 7.0], F32)), None),
    "i0e_i1e": (lambda: lax.bessel_i0e(jnp.float32(3.0)) + lax.bessel_i1e(jnp.float32(-2.0)),
                None),
    "zeta_polygamma": (lambda: lax.zeta(jnp.float32(3.0), jnp.float32(2.0)) + lax.polygamma(
        jnp.float32(1.0), jnp.float32(2.5)), None),
    "nextafter": (lambda: lax.nextafter(jnp.array([-0.0, 1.0], F32), jnp.array([0.0, 2.0], F32)),
                  None),
    "igamma": (lambda: lax.igamma(jnp.float32(2.0), jnp.array([0.0, 1.5, np.inf], F32)),
               lambda: sp.gammainc(2.0, np.array([0.0, 1.5, np.inf]))),
    "igammac": (lambda: lax.igammac(jnp.float32(2.0), jnp.float32(1.5)),
                lambda: sp.gammaincc(2.0, 1.5)),
    "betainc": (lambda: lax.betainc(jnp.float32(2.0), jnp.float32(3.0), jnp.float32(0.4)),
                lambda: sp.betainc(2.0, 3.0, np.float64(np.float32(0.4)))),
}


@pytest.mark.parametrize("name", sorted(FOLDS))
def test_constant_operands_fold_to_reference_values(name):
    fn, ref = FOLDS[name]
    compiled = rlxjax.coreml_jit(fn, backend="reference").lower().compile()
    assert {n.op for n in compiled.graph.nodes} <= {"constant"}
    got = compiled()
    if ref is not None:  # the fold is float64 rounded once
        np.testing.assert_allclose(got, np.asarray(ref(), F32), rtol=1e-7, atol=0)
        return
    want = np.asarray(jax.jit(fn)())
    # JAX's own error is up to 4 ulps on these points (the fold's is half an ulp)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=0)
    if name == "nextafter":
        assert np.array_equal(np.asarray(got).view(np.uint32), want.view(np.uint32))


@pytest.mark.skipif(TEST_BACKEND != "reference", reason="reads the reference program's ops")
def test_native_mil_ops_are_used_where_mil_has_them():
    x = np.linspace(-0.9, 0.9, 5).astype(F32)
    for fn, op in ((lax.tan, "tan"), (lax.asin, "asin"), (lax.acos, "acos"), (lax.atan, "atan"),
                   (lax.sinh, "sinh"), (lax.cosh, "cosh"), (lax.atanh, "atanh")):
        hist = rlxjax.coreml_jit(fn, backend="reference").lower(x).compile().op_histogram()
        assert set(hist) == {op}, hist
