"""Derive the polynomial coefficients of rlxjax's lgamma and digamma lowerings
(rlxjax/ir/special_eval.py). Needs mpmath (not a dependency of rlxjax):
``pip install mpmath && python tools/fit_gamma.py``.

- lgamma: P(t) = lgamma(2 + t) / t on t in [-0.75, 0.5] (P(0) = digamma(2) = 1 - gamma)
  and R(t) = lgamma(1 + t) / t on t in [-0.25, 0.25] (R(0) = digamma(1) = -gamma), so that
  lgamma keeps full relative accuracy at its roots x = 2 and x = 1.
- digamma: Q(u) = digamma(x) / (x - x0) on x in [1, 2], u = x - 1.5, x0 = 1.4616... the
  positive root of digamma, so that digamma = (x - x0)·Q keeps relative accuracy there.

Each is a Chebyshev least-squares fit on dense samples computed with 40-digit mpmath; the
script prints the power-basis coefficients (highest degree first, for Horner), the root
split into two float32 parts, and the worst relative error of a float32 Horner evaluation.
"""
import mpmath
import numpy as np
from numpy.polynomial import chebyshev as C

mpmath.mp.dps = 40
X0 = mpmath.findroot(mpmath.digamma, 1.46)


def p_lgamma(t):
    t = mpmath.mpf(t)
    if t == 0:
        return float(mpmath.digamma(2))
    return float(mpmath.loggamma(2 + t) / t)


def r_lgamma(t):
    t = mpmath.mpf(t)
    if t == 0:
        return float(mpmath.digamma(1))
    return float(mpmath.loggamma(1 + t) / t)


def q_digamma(x):
    x = mpmath.mpf(x)
    if abs(x - X0) < mpmath.mpf(10) ** -30:
        return float(mpmath.polygamma(1, X0))
    return float(mpmath.digamma(x) / (x - X0))


def horner32(coeffs, u):
    acc = np.full_like(u, np.float32(coeffs[0]))
    for k in coeffs[1:]:
        acc = acc * u + np.float32(k)
    return acc


def fit(fn, u, degree):
    want = np.array([fn(v) for v in u])
    coeffs = C.cheb2poly(C.chebfit(u, want, degree))[::-1]
    err = np.max(np.abs(horner32(coeffs, u.astype(np.float32)) / want - 1.0))
    fit_err = np.max(np.abs(np.polyval(coeffs, u) / want - 1.0))
    print(f"  (float64 fit error {fit_err:.2e})")
    return coeffs, err


def main():
    t = np.linspace(-0.75, 0.5, 5001)
    p, err = fit(p_lgamma, t, 11)
    print(f"lgamma P: {np.array2string(p, precision=17, separator=', ')}")
    print(f"lgamma P: worst float32 Horner relative error {err:.2e}")
    t = np.linspace(-0.25, 0.25, 2001)
    r, err = fit(r_lgamma, t, 10)
    print(f"lgamma R: {np.array2string(r, precision=17, separator=', ')}")
    print(f"lgamma R: worst float32 Horner relative error {err:.2e}")
    x = np.linspace(1.0, 2.0, 4001)
    q, err = fit(lambda u: q_digamma(u + 1.5), x - 1.5, 11)
    print(f"digamma Q: {np.array2string(q, precision=17, separator=', ')}")
    print(f"digamma Q: worst float32 Horner relative error {err:.2e}")
    hi = np.float32(float(X0))
    lo = float(X0 - mpmath.mpf(float(hi)))
    print(f"digamma root: hi={float(hi)!r} lo={lo!r}")


if __name__ == "__main__":
    main()
