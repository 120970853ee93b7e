"""Derive the polynomial coefficients used by rlxjax's erfc lowering
(rlxjax/transforms/legalize/special.py). Needs mpmath (not a dependency of rlxjax):
``pip install mpmath && python tools/fit_erfc.py``.

erfc(x) = exp(-x²)·f(x)/x for x >= 1 with f(x) = x·exp(x²)·erfc(x), a smooth function
fitted in two pieces by Chebyshev least squares on dense samples computed with 30-digit
mpmath: [1, 3] as a polynomial in (x - 2), and [3, 10.5] (beyond which erfc underflows
float32) as a polynomial in u = (2/x² - (lo + hi)) / (hi - lo), lo/hi the range of 1/x².
The script prints the power-basis coefficients (highest degree first, for Horner) and the
worst relative error of a float32 Horner evaluation against mpmath.
"""
import mpmath
import numpy as np
from numpy.polynomial import chebyshev as C

mpmath.mp.dps = 30


def f(x):
    return float(mpmath.mpf(x) * mpmath.exp(mpmath.mpf(x) ** 2) * mpmath.erfc(x))


def horner32(coeffs, u):
    acc = np.full_like(u, np.float32(coeffs[0]))
    for k in coeffs[1:]:
        acc = acc * u + np.float32(k)
    return acc


xa = np.linspace(1.0, 3.0, 4001)
pa = C.cheb2poly(C.chebfit(xa - 2.0, [f(x) for x in xa], 10))[::-1]
xb = np.linspace(3.0, 10.5, 6001)
tb = 1.0 / xb ** 2
lo, hi = tb.min(), tb.max()
ub = (2.0 * tb - (lo + hi)) / (hi - lo)
pb = C.cheb2poly(C.chebfit(ub, [f(x) for x in xb], 7))[::-1]

for name, coeffs, u, x in (("A", pa, xa - 2.0, xa), ("B", pb, ub, xb)):
    want = np.array([f(v) for v in x])
    err = np.max(np.abs(horner32(coeffs, u.astype(np.float32)) / want - 1.0))
    print(f"{name}: coefficients {np.array2string(np.asarray(coeffs), precision=17, separator=', ')}")
    print(f"{name}: worst float32 Horner relative error {err:.2e}")
print(f"B: lo={lo!r} hi={hi!r}")
