"""Lowering: lgamma, digamma, and the Hurwitz zeta / polygamma functions digamma's
derivative reaches, composed from MIL ops in fp32 (compose.upcast).

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
"""
from __future__ import annotations

import math

import numpy as np

from ...registry import lowering
from .compose import upcast

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


@lowering("lgamma")
def _lgamma(ctx, node, x):
    return upcast(ctx, node, [x], lgamma)


@lowering("digamma")
def _digamma(ctx, node, x):
    return upcast(ctx, node, [x], digamma)


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


@lowering("zeta")
def _zeta(ctx, node, s, q):
    return upcast(ctx, node, [s, q], zeta)


@lowering("polygamma")
def _polygamma(ctx, node, m, x):
    return upcast(ctx, node, [m, x], polygamma)
