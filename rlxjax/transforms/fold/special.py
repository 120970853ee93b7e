"""Fold: the elementwise math of ir/special.py. numpy's kernels in the operands' dtype where
numpy has the function (as fold/elementwise.py); the special functions in float64 by
scipy.special (a dependency of JAX), rounded once to the dtype, with JAX's values at the
poles and edges. Where JAX's edge semantics are its algorithm's (a = 0 in igamma, q <= 0 in
zeta) or there is no float64 reference (igamma_grad_a), the op is not folded (None)."""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl

_NUMPY = {"tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
          "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh,
          "atanh": np.arctanh, "cbrt": np.cbrt}


def _round(x, r):
    return np.asarray(r, dtype=np.float64).astype(x.dtype)


def _f64(*xs):
    return [np.asarray(x, dtype=np.float64) for x in xs]


for _name, _fn in _NUMPY.items():
    register_impl("fold", _name)(lambda p, x, _fn=_fn: np.asarray(_fn(x), dtype=x.dtype))


@register_impl("fold", "atan2")
def _atan2(p, y, x):
    return np.asarray(np.arctan2(y, x), dtype=y.dtype)


@register_impl("fold", "nextafter")
def _nextafter(p, x, y):
    if x.dtype == np.float16:  # maybe float32 held in fp16 (precision="fp16"): the lowering
        return None            # tells the two apart (and refuses the float32 case)
    r = np.where(x == y, y, np.nextafter(x, y))  # y itself when equal (-0 -> +0), as JAX
    return np.asarray(r, dtype=x.dtype)


def _sp():
    import scipy.special  # noqa: PLC0415  (only when a special function is folded)

    return scipy.special


def _pole(x):
    return (x <= 0) & (x == np.floor(x))


@register_impl("fold", "erf_inv")
def _erf_inv(p, x):
    return _round(x, _sp().erfinv(*_f64(x)))


@register_impl("fold", "lgamma")
def _lgamma(p, x):
    (v,) = _f64(x)
    with np.errstate(all="ignore"):
        r = _sp().gammaln(v)
    return _round(x, np.where(np.isinf(v), np.inf, r))  # lgamma(-inf) = +inf in JAX


@register_impl("fold", "digamma")
def _digamma(p, x):
    (v,) = _f64(x)
    with np.errstate(all="ignore"):
        r = _sp().psi(v)
    return _round(x, np.where(_pole(v), np.nan, r))  # JAX: NaN at 0 and the negative integers


@register_impl("fold", "bessel_i0e")
def _i0e(p, x):
    return _round(x, _sp().i0e(*_f64(x)))


@register_impl("fold", "bessel_i1e")
def _i1e(p, x):
    return _round(x, _sp().i1e(*_f64(x)))


def _zeta64(s, q):
    with np.errstate(all="ignore"):
        return np.where(s == 1, np.inf, np.where(s < 1, np.nan, _sp().zeta(s, q)))


@register_impl("fold", "zeta")
def _zeta(p, s, q):
    s64, q64 = _f64(s, q)
    if np.any(q64 <= 0) or np.any(np.isnan(s64) | np.isnan(q64)):
        return None
    return _round(s, _zeta64(s64, q64))


@register_impl("fold", "polygamma")
def _polygamma(p, m, x):
    m64, x64 = _f64(m, x)
    if np.any(x64 <= 0) or np.any(np.isnan(x64)):
        return None
    natural = (m64 >= 0) & (m64 == np.floor(m64))
    n = np.where(natural, m64, 1.0)
    with np.errstate(all="ignore"):
        sign = np.where(np.fmod(n, 2) == 1, 1.0, -1.0)
        r = sign * _sp().gamma(n + 1) * _zeta64(n + 1, x64)
        r = np.where(m64 == 0, _sp().psi(x64), r)
    return _round(x, np.where(natural, r, np.nan))


def _igamma_domain(a, x):
    """JAX's NaN cases of igamma/igammac, or None where its value is its algorithm's."""
    if np.any(a == 0):
        return None
    return (x < 0) | (a < 0) | np.isnan(a) | np.isnan(x)


def _igamma_fold(upper):
    def fold(p, a, x):
        a64, x64 = _f64(a, x)
        bad = _igamma_domain(a64, x64)
        if bad is None:
            return None
        with np.errstate(all="ignore"):
            r = (_sp().gammaincc if upper else _sp().gammainc)(a64, x64)
        return _round(a, np.where(bad, np.nan, r))

    return fold


register_impl("fold", "igamma")(_igamma_fold(False))
register_impl("fold", "igammac")(_igamma_fold(True))


@register_impl("fold", "betainc")
def _betainc(p, a, b, x):
    a64, b64, x64 = _f64(a, b, x)
    if not (np.all(a64 > 0) and np.all(b64 > 0) and np.all((x64 >= 0) & (x64 <= 1))):
        return None
    return _round(x, _sp().betainc(a64, b64, x64))
