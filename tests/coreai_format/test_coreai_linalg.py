"""The linalg family, integer dot_general / conv and the special functions on Core AI
(rlxjax/transforms/legalize/linalg*.py, ops_int.py, legalize/special.py): compiled with format="aimodel",
run on Apple's Core AI runtime and compared with float64 (JAX with x64) within XLA's own
fp32 error plus a measured margin, integer ops bit for bit with jax.jit, the special
functions in ulps of float64 (the measured worst, rounded up: docs/coreai.md).

The default suite runs one program per family; the rest (gradients, batches, tall / wide
shapes, hypothesis-drawn sizes) is ``slow``."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

import rlxjax

pytest.importorskip("coreai")
scipy_special = pytest.importorskip("scipy.special")

EPS = float(np.finfo(np.float32).eps)
#: Core AI's fp32 error against float64 is held to XLA's own plus 8·eps·max|value| (the
#: measured worst was 0.33 of that bound, on this file's tests)


def _against_float64(fun, *args):
    got = jax.tree.leaves(rlxjax.coreml_jit(fun, format="aimodel")(*args))
    with jax.enable_x64(True):
        truth = jax.tree.leaves(jax.jit(fun)(*[np.asarray(a, np.float64) if a.dtype.kind == "f"
                                                else a for a in args]))
    xla = jax.tree.leaves(jax.jit(fun)(*args))
    assert len(got) == len(truth)
    for g, t, j in zip(got, truth, xla):
        g, t, j = (np.asarray(v, np.float64) for v in (g, t, j))
        assert g.shape == t.shape
        np.testing.assert_array_equal(np.isnan(g), np.isnan(t))
        ok = ~np.isnan(t)
        if t.dtype.kind != "f" or not ok.any():
            continue
        scale = np.max(np.abs(t[ok]))
        bound = np.max(np.abs(j[ok] - t[ok])) + 8 * EPS * scale
        assert np.max(np.abs(g[ok] - t[ok])) <= bound


def _spd(rng, shape):
    a = rng.standard_normal(shape).astype(np.float32)
    n = shape[-1]
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n, dtype=np.float32)).astype(np.float32)


def _linalg(s, a, b, bt, dl, d, du, rhs):
    return (lax.linalg.cholesky(s, symmetrize_input=False),
            lax.linalg.triangular_solve(s, b, left_side=True, lower=True),
            lax.linalg.triangular_solve(s, bt, left_side=False, lower=False, transpose_a=True,
                                        unit_diagonal=True),
            lax.linalg.lu(a), jnp.linalg.qr(a), jnp.linalg.qr(a, mode="complete"),
            jnp.linalg.svd(a, compute_uv=False), lax.linalg.tridiagonal_solve(dl, d, du, rhs))


def test_linalg_sample_against_float64():
    rng = np.random.default_rng(0)
    s = _spd(rng, (2, 4, 4))
    s[1, 0, 0] = -1.0  # not positive definite: that batch element is NaN
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    _against_float64(_linalg, s, r(2, 5, 3), r(2, 4, 3), r(2, 3, 4), r(2, 5), r(2, 5),
                     r(2, 5), r(2, 5, 2))


def test_integer_matmul_and_conv_bit_for_bit():
    rng = np.random.default_rng(1)
    big = lambda *s: rng.integers(-2**31, 2**31 - 1, s, dtype=np.int64).astype(np.int32)  # noqa
    small = lambda *s: rng.integers(-128, 128, s, dtype=np.int64).astype(np.int8)  # noqa
    x, w, a8, b8 = big(2, 4, 7, 6), big(6, 2, 3, 2), small(4, 6), small(6, 3)

    def fun(i, j, x, w, a8, b8):
        return (i @ j, jnp.einsum("bij,bjk->ik", i, j), a8 @ b8,
                lax.dot(a8, b8, preferred_element_type=jnp.int32),
                lax.conv_general_dilated(x, w, (2, 1), ((1, 2), (0, 1)), lhs_dilation=(1, 2),
                                         rhs_dilation=(2, 1), feature_group_count=2))

    args = (big(3, 4, 5), big(3, 5, 2), x, w, a8, b8)
    got = jax.tree.leaves(rlxjax.coreml_jit(fun, format="aimodel")(*args))
    want = jax.tree.leaves(jax.jit(fun)(*args))
    for g, t in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(t).dtype
        np.testing.assert_array_equal(g, t)


#: (jax function, float64 reference, measured worst error rounded up, in ulps of the float64
#: value with eps as the floor of an ulp: |got - want| / (ulp(want) + eps), so that relative
#: accuracy is not asked of values next to a root)
_X = np.concatenate([np.linspace(-6, 6, 801), [0.0, -0.0, 1e-30, -1e-30, 1e30, -1e30]])
_SPECIAL = {
    "atan2": (lambda y, x: jnp.arctan2(y, x), np.arctan2, 1.5),
    "cbrt": (jnp.cbrt, np.cbrt, 1.0),
    "erf_inv": (lax.erf_inv, scipy_special.erfinv, 3.0),
    "bessel_i0e": (lax.bessel_i0e, scipy_special.i0e, 5.5),
    "bessel_i1e": (lax.bessel_i1e, scipy_special.i1e, 9.0),
    "lgamma": (lax.lgamma, scipy_special.gammaln, 5.0),
    "digamma": (lax.digamma, scipy_special.psi, 3.0),
    "zeta": (lax.zeta, scipy_special.zeta, 2.0),
    "polygamma": (lax.polygamma, lambda m, x: scipy_special.polygamma(m.astype(int), x), 4.0),
    # digamma's derivative: polygamma(1, x) with a constant order (zeta(2, x): Core AI's
    # compiler once folded equal(2.0, inf) of constants to true, legalize/special_fx.py)
    "digamma_grad": (jax.vmap(jax.grad(lax.digamma)),
                     lambda x: scipy_special.polygamma(1, x), 2.5),
}


def _points(name):
    if name == "erf_inv":
        return (np.concatenate([np.linspace(-1, 1, 801), [0.0, -0.0, 1.5, -2.0]]),)
    if name.startswith("bessel"):
        return (_X * 5,)
    if name == "atan2":
        return (np.roll(_X, 7), _X)
    if name in ("lgamma", "digamma", "digamma_grad"):  # off the poles (0 and the negative integers)
        x = np.concatenate([_X[1:-5:2], np.linspace(0.01, 30, 300), [1.0, 2.0, 1e30]])
        return (x[(x > 0) | (x != np.round(x))],)
    q = np.linspace(0.1, 20, 200)
    if name == "zeta":
        return (np.linspace(1.5, 8, 200), q)
    if name == "polygamma":
        return (np.tile([1.0, 2.0, 3.0], 67)[:200], q)
    return (_X,)


def _nextafter_points():
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(600) * 10.0 ** rng.integers(-37, 38, 600)).astype(np.float32)
    x = np.concatenate([x, np.float32([0, -0.0, 1, -1, np.inf, -np.inf, np.nan, 3.4028235e38,
                                       1.1754944e-38, 2.0])])
    y = np.roll(x, 1)
    y[-3:] = [np.inf, 0.0, 2.0]
    return x, y


def test_special_functions_within_measured_ulps_and_nextafter_bit_for_bit():
    names = list(_SPECIAL)
    pts = [[p.astype(np.float32) for p in _points(n)] for n in names]
    starts = np.cumsum([0] + [len(p) for p in pts])
    nx, ny = _nextafter_points()

    def fun(nx, ny, *xs):
        return [jnp.nextafter(nx, ny)] + [_SPECIAL[n][0](*xs[k:k + len(p)])
                                          for n, p, k in zip(names, pts, starts)]

    got = rlxjax.coreml_jit(fun, format="aimodel")(nx, ny, *[a for p in pts for a in p])
    for n, p, g in zip(names, pts, got[1:]):
        want = _SPECIAL[n][1](*[a.astype(np.float64) for a in p])
        g = np.asarray(g, np.float64)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(want), err_msg=n)
        fin = np.isfinite(want)
        np.testing.assert_array_equal(g[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)])
        sp = np.spacing(np.abs(want[fin]).astype(np.float32)).astype(np.float64) + EPS
        assert np.max(np.abs(g[fin] - want[fin]) / sp) <= _SPECIAL[n][2], n
    # nextafter: XLA:CPU flushes subnormal results to zero; normal ones agree bit for bit
    want = np.asarray(jax.jit(jnp.nextafter)(nx, ny))
    normal = (np.abs(want) >= np.finfo(np.float32).tiny) | ~np.isfinite(want)
    assert normal.sum() > 550
    np.testing.assert_array_equal(np.asarray(got[0])[normal].view(np.int32),
                                  want[normal].view(np.int32))


_F16 = ["atan2", "cbrt", "erf_inv", "bessel_i0e", "bessel_i1e", "lgamma", "digamma"]


@pytest.mark.parametrize("precision", [
    "fp32", pytest.param("fp16", marks=pytest.mark.slow)])
def test_fp16_special_functions_round_once_as_xla(precision):
    """fp16 values of the fp32 compositions: computed in fp32 and rounded once, which is
    what jax.jit does for these functions (bit for bit on every finite fp16, measured when
    written). Carried fp16 values (precision="fp32") and Core AI fp16 ones alike: equal to
    jax.jit bit for bit, or, where the fp32 compositions round to another fp16, no further
    from float64 than XLA is (7 of lgamma's 703 points near its zeros at 1 and 2)."""
    with np.errstate(over="ignore"):  # lgamma's 1e30 point: inf in fp16
        pts = [[p.astype(np.float16) for p in _points(n)] for n in _F16]
    starts = np.cumsum([0] + [len(p) for p in pts])

    def fun(*xs):
        return [_SPECIAL[n][0](*xs[k:k + len(p)]) for n, p, k in zip(_F16, pts, starts)]

    args = [a for p in pts for a in p]
    got = rlxjax.coreml_jit(fun, format="aimodel", precision=precision)(*args)
    differ = 0
    for n, p, g, w in zip(_F16, pts, got, jax.jit(fun)(*args)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == np.float16, n
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=n)
        off = (g.view(np.int16) != w.view(np.int16)) & ~np.isnan(w)
        exact = _SPECIAL[n][1](*[a[off].astype(np.float64) for a in p])
        assert np.all(np.abs(g[off] - exact) <= np.abs(w[off] - exact)), n
        differ += int(off.sum())
    assert differ <= 10  # the fp32 compositions are a few fp32 ulps from XLA's


# -- slow: gradients, batches, shapes ----------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("shape", [(6, 4), (4, 6), (3, 5, 5)], ids=str)
def test_factorizations_of_tall_wide_and_batched_matrices(shape):
    rng = np.random.default_rng(3)
    a = rng.standard_normal(shape).astype(np.float32)
    _against_float64(lambda a: (lax.linalg.lu(a), jnp.linalg.qr(a),
                                jnp.linalg.qr(a, mode="complete"),
                                jnp.linalg.svd(a, compute_uv=False)), a)


@pytest.mark.slow
def test_linalg_gradients_against_float64():
    rng = np.random.default_rng(4)
    s, a = _spd(rng, (4, 4)), rng.standard_normal((4, 3)).astype(np.float32)

    def loss(s, a):
        chol = jnp.linalg.cholesky(s)
        x = jnp.linalg.solve(s, a)
        q, r = jnp.linalg.qr(a)
        return (jnp.sum(jnp.tanh(chol)) + jnp.sum(x ** 2) + jnp.sum(q[:, 0] * 2) + jnp.sum(r ** 2)
                + jnp.linalg.slogdet(s)[1])

    _against_float64(jax.grad(loss, (0, 1)), s, a)


@pytest.mark.slow
@settings(max_examples=4, deadline=None)
@given(n=st.integers(1, 7), k=st.integers(1, 3), batch=st.sampled_from([(), (2,)]))
def test_solves_over_drawn_sizes(n, k, batch):
    rng = np.random.default_rng(n * 10 + k)
    s = _spd(rng, batch + (n, n))
    b = rng.standard_normal(batch + (n, k)).astype(np.float32)
    dl, d, du = (rng.standard_normal(batch + (n,)).astype(np.float32) for _ in range(3))
    _against_float64(lambda s, b, dl, d, du: (
        jnp.linalg.solve(s, b), lax.linalg.triangular_solve(s, b, left_side=True, lower=False),
        lax.linalg.tridiagonal_solve(dl, d + 4, du, b)), s, b, dl, d, du)
