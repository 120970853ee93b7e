"""Measure the float32 accuracy of rlxjax's elementwise math against float64.

The functions of rlxjax/ir/special.py, against float64 references, next to XLA's own
float32 results on the same points.

    python tools/math_accuracy.py               # every function: the table in docs/numerics.md
    python tools/math_accuracy.py lgamma cbrt   # some of them
    python tools/math_accuracy.py --format aimodel igamma   # on Apple's Core AI runtime

For each function and domain: the largest error in fp32 ulps of the exact value ("ulp"),
and in ulps of max(|exact|, 1) ("mixed", an absolute error where the function crosses zero,
a relative one elsewhere), for rlxjax (the compiled program on the reference backend, or
with ``--format aimodel`` the Core AI program on its runtime: docs/coreai.md) and
for jax.jit on the CPU. References are scipy.special / numpy in float64 (mpmath where
scipy's own float64 value is not accurate enough to judge an fp32 result). Inputs are
fp32 grids (linear and logarithmic) over the domain, subnormals excluded (XLA on CPU flushes
them); a result below 1e-30 counts its error in ulps of 1e-30.
"""
from __future__ import annotations

import os
import sys

import numpy as np

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, ROOT)

F32 = np.float32
FLOOR = 1e-30


def errors(got, exact):
    """(ulp error, mixed error) per element. A NaN counts 0 if got is NaN too, an infinity
    (or a value beyond fp32's range) 0 if got is the same infinity; anything else
    non-finite is inf. Results below 1e-30 count their error in ulps of 1e-30: their
    intermediate values underflow (and XLA on CPU flushes results below 1.2e-38 to 0)."""
    got = np.asarray(got, np.float64)
    exact = np.asarray(exact, np.float64)
    a = np.abs(exact)
    with np.errstate(all="ignore"):
        rounded = exact.astype(F32).astype(np.float64)
        sp = np.spacing(np.maximum(a, FLOOR).astype(F32)).astype(np.float64)
        sp1 = np.spacing(np.maximum(a, 1.0).astype(F32)).astype(np.float64)
        ok = (np.isnan(got) & np.isnan(exact)) | (np.isinf(rounded) & (got == rounded))
        d = np.abs(got - exact)
        e = np.where(ok, 0.0, d / sp)
        m = np.where(ok, 0.0, d / sp1)
    return np.where(np.isnan(e), np.inf, e), np.where(np.isnan(m), np.inf, m)


def _lin(lo, hi, n=100001):
    return np.linspace(lo, hi, n).astype(F32)


def _log(lo, hi, n=100001):
    return np.geomspace(lo, hi, n).astype(F32)


def _sym(x):
    return np.concatenate([-x[::-1], x])


def _pairs(a, b):
    """Every combination of the fp32 grids a and b, flattened."""
    aa, bb = np.meshgrid(a, b, indexing="ij")
    return aa.ravel(), bb.ravel()


def _sp():
    import scipy.special as sp
    return sp


def _digamma64(x):
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        return np.where((x <= 0) & (x == np.floor(x)), np.nan, _sp().psi(x))


def _lgamma64(x):
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        return np.where(np.isinf(x), np.inf, _sp().gammaln(x))


def _polygamma64(m, x):
    with np.errstate(all="ignore"):
        return np.where((x <= 0) & (x == np.floor(x)), np.nan, _sp().polygamma(m.astype(int), x))


def _igamma_grad_a64(a, x):
    """dP(a, x)/da by mpmath (scipy has none), 30 digits."""
    import mpmath

    mpmath.mp.dps = 30
    fn = np.frompyfunc(lambda av, xv: float(mpmath.diff(
        lambda t: mpmath.gammainc(t, 0, xv, regularized=True), av)), 2, 1)
    return fn(a, x).astype(np.float64)


def _big_a():
    a = _log(1e2, 1e4, 201)
    k = _lin(0.5, 2.0, 201)
    aa, kk = np.meshgrid(a, k, indexing="ij")
    return aa.ravel(), (aa * kk).astype(F32).ravel()


def _triples(a, b, x):
    aa, bb, xx = np.meshgrid(a, b, x, indexing="ij")
    return aa.ravel(), bb.ravel(), xx.ravel()


def _nextafter_exact(x, y):
    return np.nextafter(x.astype(F32), y.astype(F32)).astype(np.float64)


def cases():
    """name -> (JAX function, float64 reference, [(domain label, args)])."""
    from jax import lax

    sp = _sp()
    small = _log(1e-6, 1.0)
    return {
        "tan": (lax.tan, np.tan, [("[-1.57, 1.57]", (_lin(-1.57, 1.57),))]),
        "asin": (lax.asin, np.arcsin, [("[-1, 1]", (_sym(small),))]),
        "acos": (lax.acos, np.arccos, [("[-1, 1]", (_sym(small),))]),
        "atan": (lax.atan, np.arctan, [("abs(x) in [1e-6, 1e6]", (_sym(_log(1e-6, 1e6)),))]),
        "sinh": (lax.sinh, np.sinh, [("abs(x) <= 1", (_sym(small),)),
                                     ("1 <= abs(x) <= 88", (_sym(_lin(1, 88)),))]),
        "cosh": (lax.cosh, np.cosh,
                 [("abs(x) <= 88", (_sym(np.concatenate([small, _lin(1, 88)])),))]),
        "asinh": (lax.asinh, np.arcsinh, [("abs(x) in [1e-6, 1e30]", (_sym(_log(1e-6, 1e30)),))]),
        "acosh": (lax.acosh, np.arccosh, [("[1, 1.01]", (_lin(1, 1.01),)),
                                          ("[1.01, 1e30]", (_log(1.01, 1e30),))]),
        "atanh": (lax.atanh, np.arctanh, [("[-1, 1]", (_sym(small),))]),
        "cbrt": (lax.cbrt, np.cbrt, [("abs(x) in [1e-37, 1e38]", (_sym(_log(1e-37, 1e38)),))]),
        "atan2": (lax.atan2, np.arctan2,
                  [("y, x in ±[1e-3, 1e3]", _pairs(_sym(_log(1e-3, 1e3, 301)),
                                                   _sym(_log(1e-3, 1e3, 301))))]),
        "erf_inv": (lax.erf_inv, sp.erfinv,
                    [("abs(x) <= 0.9", (_sym(_log(1e-6, 0.9)),)),
                     ("0.9 <= abs(x) < 1", (_sym(1 - _log(2.0 ** -24, 0.1)),))]),
        "lgamma": (lax.lgamma, _lgamma64,
                   [("(0, 20]", (_lin(0, 20, 200001)[1:],)),
                    ("[1e-6, 1e30]", (_log(1e-6, 1e30),)),
                    ("[-20, 0)", (_lin(-20, 0, 200001)[:-1],))]),
        "digamma": (lax.digamma, _digamma64,
                    [("(0, 20]", (_lin(0, 20, 200001)[1:],)),
                     ("[1e-6, 1e30]", (_log(1e-6, 1e30),)),
                     ("[-20, 0)", (_lin(-20, 0, 200001)[:-1],))]),
        "polygamma": (lax.polygamma, lambda m, x: _polygamma64(m, x),
                      [("m = 1, 2, 3; x in [1e-3, 1e4]",
                        _pairs(np.array([1, 2, 3], F32), _log(1e-3, 1e4, 30001))),
                       ("m = 1; x in [-6.5, 0)", _pairs(np.array([1], F32),
                                                        _lin(-6.5, 0, 30001)[:-1]))]),
        "zeta": (lax.zeta, lambda s, q: sp.zeta(s, q),
                 [("s in [1.1, 30], q in [1e-2, 1e3]",
                   _pairs(_log(1.1, 30, 301), _log(1e-2, 1e3, 301)))]),
        "igamma": (lax.igamma, sp.gammainc,
                   [("a, x in [1e-2, 1e2]", _pairs(_log(1e-2, 1e2, 301), _log(1e-2, 1e2, 301))),
                    ("a in [1e2, 1e4], x in [a/2, 2a]", _big_a())]),
        "igammac": (lax.igammac, sp.gammaincc,
                    [("a, x in [1e-2, 1e2]", _pairs(_log(1e-2, 1e2, 301), _log(1e-2, 1e2, 301))),
                     ("a in [1e2, 1e4], x in [a/2, 2a]", _big_a())]),
        "igamma_grad_a": (lax.igamma_grad_a, _igamma_grad_a64,
                          [("a, x in [1e-2, 1e2]",
                            _pairs(_log(1e-2, 1e2, 101), _log(1e-2, 1e2, 101)))]),
        "betainc": (lax.betainc, sp.betainc,
                    [("a, b in [1e-2, 1e2], x in [0, 1]", _triples(_log(1e-2, 1e2, 41),
                                                               _log(1e-2, 1e2, 41),
                                                               _lin(0, 1, 101)))]),
        "bessel_i0e": (lax.bessel_i0e, sp.i0e,
                       [("abs(x) in [1e-6, 1e6]", (_sym(_log(1e-6, 1e6)),))]),
        "bessel_i1e": (lax.bessel_i1e, sp.i1e,
                       [("abs(x) in [1e-6, 1e6]", (_sym(_log(1e-6, 1e6)),))]),
        "nextafter": (lax.nextafter, _nextafter_exact,
                      [("x in ±[1e-37, 3e38], y = ±inf, 0",
                        _pairs(_sym(_log(1e-37, 3e38, 20001)),
                               np.array([np.inf, -np.inf, 0.0], F32)))]),
    }


def measure(name, fn, ref, args, fmt="mlpackage"):
    import jax
    import rlxjax

    args = [np.asarray(a, F32) for a in args]
    with np.errstate(all="ignore"):
        exact = ref(*[a.astype(np.float64) for a in args])
    if fmt == "aimodel":
        mine = np.asarray(rlxjax.coreml_jit(fn, format="aimodel")(*args))
    else:
        mine = np.asarray(rlxjax.coreml_jit(fn, backend="reference")(*args))
    xla = np.asarray(jax.jit(fn)(*args))
    return errors(mine, exact), errors(xla, exact)


def main(argv):
    fmt = "mlpackage"
    if "--format" in argv:
        i = argv.index("--format")
        fmt, argv = argv[i + 1], argv[:i] + argv[i + 2:]
    table = cases()
    names = argv or list(table)
    print("| function | domain | rlxjax ulp | rlxjax mixed | XLA ulp | XLA mixed |")
    print("|---|---|---|---|---|---|")
    for name in names:
        fn, ref, domains = table[name]
        for label, args in domains:
            (e, m), (xe, xm) = measure(name, fn, ref, args, fmt)
            print(f"| {name} | {label} | {e.max():.3g} | {m.max():.3g} | {xe.max():.3g} | "
                  f"{xm.max():.3g} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
