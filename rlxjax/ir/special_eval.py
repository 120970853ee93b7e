"""The special functions' compositions, written against an elementwise float arithmetic
``f`` (the Core ML lowering's ``Fx``, coreml/rules/special/compose.py, or the Core AI
legalize stage's on RLX values, transforms/legalize/special_fx.py, for Core AI: the same
method names), so both formats evaluate one copy.
No format is imported here.

* ``atan2``, ``cbrt``, ``nextafter`` (exact float arithmetic, no bitcast), ``erf_inv``
  (Giles), ``i0e`` / ``i1e`` (Cephes' Chebyshev expansions); their tables: ir/special.py;
* ``lgamma``, ``digamma``, and the Hurwitz ``zeta`` / ``polygamma`` functions digamma's
  derivative reaches, all in fp32 (each format upcasts fp16 operands):

  lgamma (x > 0): lgamma(2 + t) = t·P(t) for t = x - 2 in [-0.75, 0.5), x in [2.5, 8) first
  stepping down into [1.5, 2.5) (exact) and adding the log of the product of the steps;
  lgamma(1 + t) = t·R(t) on x in [0.75, 1.25); below, lgamma(x + 1) - log x (P and R fitted by
  tools/fit_gamma.py), so both roots (x = 1, 2) keep their relative accuracy; x >= 8 is
  Stirling's series to 1/x^5. x <= 0: the reflection lgamma(x) = log(pi) - log|sin(pi·x)| -
  lgamma(1 - x), with |sin(pi·x)| taken at the exact distance of x to the nearest integer.

  digamma (x > 0): on [1, 2], (x - x0)·Q(x - 1.5) with x0 the positive root (Q fitted by
  tools/fit_gamma.py); [2, 8) steps down to [1, 2) adding 1/(z + k); (0, 1) steps up
  (digamma(x) = digamma(x + 1) - 1/x); x >= 8 is the asymptotic series to 1/x^6. x <= 0:
  digamma(1 - x) - pi/tan(pi·r), r = x minus its nearest integer (exact). NaN at the poles
  (0 and the negative integers), as JAX.

  zeta(s, q) and polygamma(m, x) follow JAX's (CHLO's) own algorithm: ten terms of the sum,
  then the Euler-Maclaurin tail with twelve Bernoulli terms at q + 10; polygamma(m, x) =
  (-1)^(m+1)·m!·zeta(m + 1, x). Accurate for q > -7; like JAX, off for q far below zero
  (docs/numerics.md). Accuracies against float64: docs/numerics.md ("Elementwise math").

The incomplete gamma and beta functions, which loop: ir/special_incomplete.py.
"""
from __future__ import annotations

import math

import numpy as np

from .special import ERFINV_CENTRAL, ERFINV_TAIL, I0E_A, I0E_B, I1E_A, I1E_B


class FxCommon:
    """What both formats' ``Fx`` derive from their elementwise ops the same way."""

    def any_of(self, *ps):
        out = ps[0]
        for p in ps[1:]:
            out = self.or_(out, p)
        return out

    def is_negative(self, x):
        """x < 0, and True for -0.0 too (1 / -0 = -inf): the sign bit, without a bitcast."""
        return self.or_(self.lt(x, 0), self.and_(self.eq(x, 0), self.lt(self.div(1, x), 0)))

    def horner(self, coeffs, u):
        """sum(coeffs[i] · u^(n-1-i)): coefficients highest degree first."""
        acc = self.add(self.mul(u, float(coeffs[0])), float(coeffs[1]))
        for k in coeffs[2:]:
            acc = self.add(self.mul(acc, u), float(k))
        return acc


def atan2(f, y, x):
    # atan of min(|x|,|y|)/max(|x|,|y|) in [0, 1], then the octant: pi/2 - t when |y| > |x|,
    # pi - t when x < 0 (or -0), the sign of y (or -0). 0/0 and inf/inf are fixed up: the
    # ratio is 0 for two zeros and 1 for two infinities, as C's atan2.
    ax, ay = f.abs(x), f.abs(y)
    mn, mx = f.min(ax, ay), f.max(ax, ay)
    r = f.div(mn, mx)
    r = f.select(f.eq(mx, 0), 0.0, r)
    r = f.select(f.and_(f.isinf(ax), f.isinf(ay)), 1.0, r)
    t = f.atan(r)
    t = f.select(f.gt(ay, ax), f.sub(np.pi / 2, t), t)
    t = f.select(f.is_negative(x), f.sub(np.pi, t), t)
    t = f.select(f.is_negative(y), f.neg(t), t)
    return f.select(f.or_(f.isnan(x), f.isnan(y)), np.nan, t)


def cbrt(f, x):
    # pow(|x|, 1/3), then one Newton step y - (y - a/y²)/3, which removes pow's error and
    # the error of the rounded exponent 1/3 (|log a|·3e-8 relative, 12 ulps at 1e30);
    # zeros, infinities and NaN pass through; the sign is x's.
    a = f.abs(x)
    y = f.pow(a, 1.0 / 3.0)
    y = f.sub(y, f.div(f.sub(y, f.div(a, f.mul(y, y))), 3.0))
    y = f.select(f.lt(x, 0), f.neg(y), y)
    return f.select(f.or_(f.eq(a, 0), f.eq(a, np.inf)), x, y)


def nextafter(f, x, y):
    # Exact without a bitcast, under IEEE round-to-nearest: with c = 0.625·2^(1-p) (p the
    # significand bits), |x|·c lies strictly between half and one and a half of the gap
    # to x's neighbour on either side (the gap below a power of two is half the gap
    # above it, and 0.625 fits both), so x ± |x|·c rounds to that neighbour. Below
    # 2^(emin+p+1) the step would be subnormal: x is scaled by 2^(p+1) first (exact),
    # stepped, scaled back (exact: the result is normal). At or below the smallest normal
    # the gap is the smallest subnormal on both sides. Zeros, infinities, NaN and x == y
    # follow C's nextafter (a zero result keeps x's sign).
    fi = np.finfo(f.dt.np)
    p = fi.nmant + 1
    c = 0.625 * 2.0 ** (1 - p)
    scale = 2.0 ** (p + 1)
    up = f.gt(y, x)
    ax = f.abs(x)
    big = f.add(x, f.select(up, f.mul(ax, c), f.mul(ax, -c)))
    xs = f.mul(x, scale)
    axs = f.abs(xs)
    small = f.mul(f.add(xs, f.select(up, f.mul(axs, c), f.mul(axs, -c))), 1.0 / scale)
    sub = f.add(x, f.select(up, float(fi.smallest_subnormal), -float(fi.smallest_subnormal)))
    r = f.select(f.lt(ax, float(fi.smallest_normal) * scale), small, big)
    r = f.select(f.le(ax, float(fi.smallest_normal)), sub, r)
    r = f.select(f.eq(r, 0), f.mul(x, 0.0), r)
    r = f.select(f.eq(ax, np.inf), f.select(f.lt(x, 0), -float(fi.max), float(fi.max)), r)
    r = f.select(f.eq(x, y), y, r)
    return f.select(f.or_(f.isnan(x), f.isnan(y)), np.nan, r)


def erf_inv(f, x):
    # (1 - x)(1 + x) rather than 1 - x²: 1 - x is exact for |x| >= 1/2, so w keeps its
    # digits as |x| -> 1, where the result is most sensitive to it.
    w = f.neg(f.log(f.mul(f.sub(1.0, x), f.add(x, 1.0))))
    central = f.horner(ERFINV_CENTRAL, f.sub(w, 2.5))
    tail = f.horner(ERFINV_TAIL, f.sub(f.sqrt(w), 3.0))
    r = f.mul(f.select(f.lt(w, 5.0), central, tail), x)
    r = f.select(f.eq(f.abs(x), 1.0), f.mul(x, np.inf), r)
    return f.select(f.gt(f.abs(x), 1.0), np.nan, r)


def _chebyshev(f, coeffs, t):
    """Clenshaw's sum of a Chebyshev series in t (Cephes' chbevl: halved first term):
    b0 = (t·b1 + c) - b2 over the coefficients, then (b0 - b2)/2. (Adding c before b2
    measured a little more accurate than Cephes' order: 9.7 against 10.8 ulps for i1e.)"""
    b2, b1, b0 = 0.0, float(coeffs[0]), f.add(f.mul(t, float(coeffs[0])), float(coeffs[1]))
    for k in coeffs[2:]:
        b2, b1 = b1, b0
        b0 = f.sub(f.add(f.mul(t, b1), float(k)), b2)
    return f.mul(f.sub(b0, b2), 0.5)


def _bessel_parts(f, x, a, b):
    z = f.abs(x)
    near = _chebyshev(f, a, f.sub(f.mul(z, 0.5), 2.0))
    far = f.div(_chebyshev(f, b, f.sub(f.div(32.0, z), 2.0)), f.sqrt(z))
    return z, near, far


def i0e(f, x):
    z, near, far = _bessel_parts(f, x, I0E_A, I0E_B)
    return f.select(f.le(z, 8.0), near, far)


def i1e(f, x):
    # odd: x·A(x) on [0, 8] (keeps -0), ±B(|x|)/sqrt(|x|) beyond
    z, near, far = _bessel_parts(f, x, I1E_A, I1E_B)
    return f.select(f.le(z, 8.0), f.mul(near, x), f.select(f.lt(x, 0), f.neg(far), far))


# lgamma(2 + t) / t on [-0.75, 0.5] and lgamma(1 + t) / t on [-0.25, 0.25], highest degree
# first (tools/fit_gamma.py)
_LGAMMA_P = (5.6977215175263112e-05, -3.5298146961459149e-05, 7.7578439156212909e-05,
             -2.3180424435481658e-04, 5.1464353990316467e-04, -1.1906597107141387e-03,
             2.8899983204721518e-03, -7.3857466671614731e-03, 2.0580831257538647e-02,
             -6.7352294859142389e-02, 3.2246703311170222e-01, 4.2278433506826885e-01)
_LGAMMA_R = (-0.10624839870700212, 0.11510114553637696, -0.11027453426678056,
             0.1245929258054431, -0.14408300864701273, 0.16958115699057788,
             -0.20738508949171075, 0.27058055607619863, -0.40068563671195323,
             0.8224670341572731, -0.5772156648996591)
# digamma(x) / (x - x0) on [1, 2] in u = x - 1.5, highest degree first (tools/fit_gamma.py)
_DIGAMMA_Q = (-0.00758614500203533, 0.01106114780540187, -0.01116661456682437,
              0.01700811972407417, -0.02708570598466384, 0.04087513422531743,
              -0.06191436894466151, 0.09498228699264911, -0.14840515491338543,
              0.24054261484429024, -0.423627419327805, 0.9510558756088477)
_X0_HI, _X0_LO = 1.4616321325302124, 1.2438149938918909e-08
_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def _lgamma_positive(f, x):
    """lgamma(x) for x > 0 (inf at +inf)."""
    z, prod = x, None
    for _ in range(6):  # [2.5, 8) -> [1.5, 2.5), prod = the product of the steps
        step = f.ge(z, 2.5)
        z = f.select(step, f.sub(z, 1.0), z)
        prod = f.select(step, z if prod is None else f.mul(prod, z), 1.0 if prod is None
                        else prod)
    # x < 0.5: lgamma(1 + x) - log x, with lgamma(1 + x) = lgamma(2 + x) - log1p(x);
    # [0.5, 0.75): lgamma(x + 1) - log x, with t = x - 1; [1.25, 8): t = z - 2 (exact).
    lo, mid = f.lt(x, 0.5), f.lt(x, 0.75)
    t = f.select(lo, x, f.select(mid, f.sub(x, 1.0), f.sub(z, 2.0)))
    tp = f.mul(t, f.horner(_LGAMMA_P, t))
    shifted = f.select(lo, f.add(f.log1p(x), f.log(x)), f.select(mid, f.log(x), f.neg(
        f.log(prod))))
    from_p = f.sub(tp, shifted)
    # [0.75, 1.25): lgamma(1 + t) = t·R(t), t = x - 1 (exact)
    t1 = f.sub(x, 1.0)
    from_r = f.mul(t1, f.horner(_LGAMMA_R, t1))
    small = f.select(f.and_(f.ge(x, 0.75), f.lt(x, 1.25)), from_r, from_p)
    # Stirling: (x - 1/2)(log x - 1) + (log(2 pi) - 1)/2 + 1/(12x) - 1/(360x^3) + 1/(1260x^5)
    r = f.div(1.0, x)
    r2 = f.mul(r, r)
    series = f.mul(r, f.horner((1.0 / 1260.0, -1.0 / 360.0, 1.0 / 12.0), r2))
    big = f.add(f.mul(f.sub(x, 0.5), f.sub(f.log(x), 1.0)), f.add(series, _HALF_LOG_2PI - 0.5))
    return f.select(f.lt(x, 8.0), small, big)


def _distance_to_integer(f, x):
    """|x - round(x)| in [0, 0.5], exactly."""
    a = f.abs(x)
    r = f.sub(a, f.floor(a))
    return f.min(r, f.sub(1.0, r))


def lgamma(f, x):
    pos = _lgamma_positive(f, f.select(f.gt(x, 0), x, f.sub(1.0, x)))
    s = _distance_to_integer(f, x)
    log_sin = f.log(f.sin(f.mul(s, np.pi)))
    refl = f.sub(f.sub(math.log(math.pi), log_sin), pos)
    refl = f.select(f.or_(f.eq(s, 0), f.isinf(x)), np.inf, refl)  # the poles, and -inf
    out = f.select(f.gt(x, 0), pos, refl)
    return f.select(f.isnan(x), x, out)


def _digamma_positive(f, x):
    """digamma(x) for x > 0 (inf at +inf)."""
    below = f.lt(x, 1.0)
    fl = f.floor(x)
    z = f.select(below, f.add(x, 1.0), f.add(f.sub(x, fl), 1.0))  # in [1, 2)
    n = f.sub(fl, 1.0)  # steps down from x >= 1 to z
    core = f.mul(f.sub(f.sub(z, _X0_HI), _X0_LO), f.horner(_DIGAMMA_Q, f.sub(z, 1.5)))
    acc = core
    for k in range(6):
        acc = f.select(f.gt(n, float(k)), f.add(acc, f.div(1.0, f.add(z, float(k)))), acc)
    small = f.select(below, f.sub(core, f.div(1.0, x)), acc)
    # log x - 1/(2x) - 1/(12x²) + 1/(120x⁴) - 1/(252x⁶)
    r = f.div(1.0, x)
    r2 = f.mul(r, r)
    series = f.mul(r2, f.horner((-1.0 / 252.0, 1.0 / 120.0, -1.0 / 12.0), r2))
    big = f.add(f.sub(f.log(x), f.mul(r, 0.5)), series)
    return f.select(f.lt(x, 8.0), small, big)


def digamma(f, x):
    pos = _digamma_positive(f, f.select(f.gt(x, 0), x, f.sub(1.0, x)))
    rnd = f.floor(f.add(x, 0.5))
    r = f.sub(x, rnd)  # x minus its nearest integer: exact
    refl = f.sub(pos, f.div(np.pi, f.tan(f.mul(r, np.pi))))
    out = f.select(f.gt(x, 0), pos, refl)
    pole = f.and_(f.le(x, 0), f.eq(x, f.floor(x)))  # 0, the negative integers, -inf
    return f.select(f.or_(pole, f.isnan(x)), np.nan, out)




def _bernoulli_even(n):
    """B_2, B_4, ..., B_2n as Fractions (Akiyama-Tanigawa)."""
    from fractions import Fraction

    out, a = [], []
    for m in range(2 * n + 1):
        a.append(Fraction(1, m + 1))
        for j in range(m, 0, -1):
            a[j - 1] = j * (a[j - 1] - a[j])
        if m >= 2 and m % 2 == 0:
            out.append(a[0])
    return out


#: B_2j / (2j)! for j = 1..12: the Euler-Maclaurin tail of the Hurwitz zeta function
_ZETA_TAIL = tuple(float(b / math.factorial(2 * j)) for j, b in enumerate(_bernoulli_even(12), 1))
_ZETA_TERMS = 10  # terms summed directly before the tail, at q + 10


def _pow_signed(f, b, e):
    """b^e that is right for a negative b when e is an integer (MIL's pow is not asked to
    be): |b|^e, negated for a negative b and an odd e."""
    p = f.pow(f.abs(b), e)
    odd = f.eq(f.sub(e, f.mul(f.floor(f.mul(e, 0.5)), 2.0)), 1.0)
    return f.select(f.and_(f.lt(b, 0), odd), f.neg(p), p)


def zeta(f, s, q):
    neg_s = f.neg(s)
    total = _pow_signed(f, q, neg_s)
    a = q
    for _ in range(_ZETA_TERMS - 1):
        a = f.add(a, 1.0)
        total = f.add(total, _pow_signed(f, a, neg_s))
    a = f.add(a, 1.0)
    a_pow = _pow_signed(f, a, neg_s)  # a^-s, a = q + 10
    # sum_j B_2j/(2j)! · s(s+1)...(s+2j-2) · a^(-s-2j+1), nested from the last term
    inv_a2 = f.div(1.0, f.mul(a, a))
    nested = None
    for j in range(len(_ZETA_TAIL), 1, -1):
        inner = _ZETA_TAIL[j - 1] if nested is None else f.add(nested, _ZETA_TAIL[j - 1])
        rising = f.mul(f.add(s, float(2 * j - 3)), f.add(s, float(2 * j - 2)))
        nested = f.mul(f.mul(rising, inv_a2), inner)
    tail = f.mul(a_pow, f.add(f.mul(f.div(s, a), f.add(nested, _ZETA_TAIL[0])), 0.5))
    out = f.add(f.add(total, f.div(f.mul(a_pow, a), f.sub(s, 1.0))), tail)
    # the tail is below the sum's last bit: the sum itself (as JAX)
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    negligible = f.lt(f.abs(a_pow), f.mul(f.abs(total), tiny))
    out = f.select(negligible, total, out)
    # the domain, as JAX: s < 1 NaN, s = 1 inf; q <= 0 needs an integer s; at a pole
    # (q a non-positive integer) inf for an even s, NaN for an odd one
    s_int = f.eq(s, f.floor(s))
    q_le0 = f.le(q, 0)
    out = f.select(f.lt(s, 1.0), np.nan, out)
    out = f.select(f.and_(q_le0, f.not_(s_int)), np.nan, out)
    s_even = f.and_(s_int, f.eq(f.sub(s, f.mul(f.floor(f.mul(s, 0.5)), 2.0)), 0))
    pole = f.and_(q_le0, f.eq(q, f.floor(q)))
    out = f.select(pole, f.select(s_even, np.inf, np.nan), out)
    out = f.select(f.eq(s, 1.0), np.inf, out)
    return f.select(f.eq(s, np.inf), np.nan, out)  # as JAX (its tail is inf·0 there)


def polygamma(f, m, x):
    # (-1)^(m+1)·m!·zeta(m + 1, x); digamma at m = 0; NaN unless m is a natural number
    m1 = f.add(m, 1.0)
    odd = f.eq(f.sub(m, f.mul(f.floor(f.mul(m, 0.5)), 2.0)), 1.0)
    mag = f.mul(f.exp(lgamma(f, m1)), zeta(f, m1, x))
    out = f.select(odd, mag, f.neg(mag))
    out = f.select(f.eq(m, 0), digamma(f, x), out)
    natural = f.and_(f.ge(m, 0), f.eq(m, f.floor(m)))
    return f.select(natural, out, np.nan)
