"""The regularized incomplete gamma functions igamma = P(a, x), igammac = Q(a, x),
igamma_grad_a = dP/da, and the regularized incomplete beta function betainc(a, b, x), in
fp32, written against a format's ``Fx`` (coreml/rules/special/compose.py or
transforms/legalize/special_fx.py, as ir/special_eval.py): one copy for both formats. No format is imported.

They follow the algorithms JAX itself runs (jax/_src/lax/special.py, after XLA's
math.cc), so that results and edge cases agree with JAX: the power series of P for
x < max(1, a) and Legendre's continued fraction of Q beyond, each a ``while_loop``
over every element that has not yet converged to within fp32's epsilon (the continued
fraction at most 2000 steps), the derivative in a carried along each step; betainc is the
Lentz-Thompson-Barnett evaluation of its continued fraction (at most 200 steps) on the
side of x where it converges fast. Loop state is float only (the "still running" flags
are 0/1 floats). Beyond the elementwise methods these need of ``f``: ``full_like(x, v)``,
``scalar(v)`` (a rank-0 value), ``mask(p)`` (bool to 0/1 float), ``max_all(x)`` (rank 0),
``any_true(mask)`` and ``while_loop(init, cond, body)``. The operands are at the result's
shape already (each format broadcasts them). Accuracies against float64: docs/numerics.md
(Core ML) and docs/coreai.md (Core AI).
"""
from __future__ import annotations

import math

import numpy as np

from .special_eval import digamma, lgamma

_EPS = float(np.finfo(np.float32).eps)
_LOG_MAX = math.log(float(np.finfo(np.float32).max))
_CF_STEPS = 2000.0


def _series(f, ax, x, a, enabled, derivative):
    """P(a, x) (or dP/da) by its power series, on the elements where ``enabled``."""
    one, zero = f.full_like(a, 1.0), f.full_like(a, 0.0)
    init = [f.mask(enabled), a, one, one] + ([zero, zero] if derivative else [])

    def body(s):
        on = f.gt(s[0], 0)
        r = f.add(s[1], 1.0)
        x_r = f.div(x, r)
        c = f.mul(s[2], x_r)
        ans = f.add(s[3], c)
        new = [r, c, ans]
        if derivative:
            dc = f.sub(f.mul(s[4], x_r), f.div(f.mul(s[2], x), f.mul(r, r)))
            dans = f.add(s[5], dc)
            new += [dc, dans]
            more = f.gt(f.abs(f.div(dc, dans)), _EPS)
        else:
            more = f.gt(f.div(c, ans), _EPS)
        return [f.mask(f.and_(on, more))] + [f.select(on, v, old)
                                                for v, old in zip(new, s[1:])]

    out = f.while_loop(init, lambda s: f.any_true(s[0]), body)
    ans = out[3]
    if not derivative:
        return f.div(f.mul(ans, ax), a)
    dlogax_da = f.sub(f.log(x), digamma(f, f.add(a, 1.0)))
    return f.div(f.mul(ax, f.add(f.mul(ans, dlogax_da), out[5])), a)


def _continued_fraction(f, ax, x, a, enabled, derivative):
    """Q(a, x) (or dQ/da) by Legendre's continued fraction, on the elements where
    ``enabled``, at most 2000 steps."""
    y = f.sub(1.0, a)
    z = f.add(f.add(x, y), 1.0)
    pkm2, qkm2 = f.full_like(x, 1.0), x
    pkm1 = f.add(x, 1.0)
    qkm1 = f.mul(z, x)
    ans = f.div(pkm1, qkm1)
    zero = f.full_like(x, 0.0)
    state = [f.mask(enabled), f.scalar(0.0), ans, y, z, pkm1, qkm1, pkm2, qkm2]
    if derivative:  # dpkm2, dqkm2, dpkm1, dqkm1, dans
        dqkm1 = f.neg(x)
        state += [zero, zero, zero, dqkm1, f.div(f.neg(f.mul(ans, dqkm1)), qkm1)]

    def body(s):
        on = f.gt(s[0], 0)
        c = f.add(s[1], 1.0)
        y = f.add(s[3], 1.0)
        z = f.add(s[4], 2.0)
        yc = f.mul(y, c)
        pkm1, qkm1, pkm2, qkm2 = s[5:9]
        pk = f.sub(f.mul(pkm1, z), f.mul(pkm2, yc))
        qk = f.sub(f.mul(qkm1, z), f.mul(qkm2, yc))
        nonzero = f.ne(qk, 0)
        r = f.div(pk, qk)
        ans = f.select(nonzero, r, s[2])
        rescale = f.gt(f.abs(pk), 1.0 / _EPS)

        def scaled(v):
            return f.select(rescale, f.mul(v, _EPS), v)

        new = [ans, y, z, scaled(pk), scaled(qk), scaled(pkm1), scaled(qkm1)]
        if derivative:
            dpkm2, dqkm2, dpkm1, dqkm1, dans_old = s[9:14]
            dpk = f.add(f.sub(f.sub(f.mul(dpkm1, z), pkm1), f.mul(dpkm2, yc)), f.mul(pkm2, c))
            dqk = f.add(f.sub(f.sub(f.mul(dqkm1, z), qkm1), f.mul(dqkm2, yc)), f.mul(qkm2, c))
            dans = f.select(nonzero, f.div(f.sub(dpk, f.mul(ans, dqk)), qk), dans_old)
            more = f.gt(f.select(nonzero, f.abs(f.sub(dans, dans_old)), 1.0), _EPS)
            new += [scaled(dpkm1), scaled(dqkm1), scaled(dpk), scaled(dqk), dans]
        else:
            t = f.select(nonzero, f.abs(f.div(f.sub(s[2], r), r)), 1.0)
            more = f.gt(t, _EPS)
        olds = [s[2]] + list(s[3:])
        return [f.mask(f.and_(on, more)), c] + [f.select(on, v, old)
                                                  for v, old in zip(new, olds)]

    def cond(s):
        return f.and_(f.lt(s[1], _CF_STEPS), f.any_true(s[0]))

    out = f.while_loop(state, cond, body)
    if not derivative:
        return f.mul(out[2], ax)
    dlogax_da = f.sub(f.log(x), digamma(f, a))
    return f.mul(ax, f.add(f.mul(out[2], dlogax_da), out[13]))


def _log1pmx(f, u, ratio):
    """log(1 + u) - u to a few ulps, ``ratio`` = 1 + u computed directly. Where the two
    cancel (|u| <= 1/2): with v = u/(2 + u), log(1 + u) = 2·atanh(v) and u - 2v = u·v, so
    log(1 + u) - u = 2v³·(1/3 + v²/5 + v⁴/7 + ...) - u·v, a series in v² <= 1/9; beyond,
    log(ratio) - u (1 + u itself would have lost the digits of a small ratio)."""
    v = f.div(u, f.add(u, 2.0))
    w = f.mul(v, v)
    series = f.horner([1.0 / (2 * k + 3) for k in range(8, -1, -1)], w)
    near = f.sub(f.mul(f.mul(f.mul(v, w), 2.0), series), f.mul(u, v))
    return f.select(f.le(f.abs(u), 0.5), near, f.sub(f.log(ratio), u))


def _prefix(f, a, x):
    """exp(a·log x - x - lgamma(a)), and whether it underflows. JAX sums those three
    terms as they are, which leaves an absolute error of an ulp of a·log x in the
    exponent: a relative error of 1e-5 at a = 100, 1e-2 at a = 1e4. From a = 10 on, the
    exponent is formed as a·(log1p(u) - u) + log(a/2pi)/2 - S(a) instead, u = (x - a)/a
    (x - a exact near a) and S(a) = lgamma(a) - Stirling's leading terms (to 1/a^5), which
    keeps it to a few ulps of itself."""
    plain = f.sub(f.sub(f.mul(a, f.log(x)), x), lgamma(f, a))
    r = f.div(1.0, a)
    r2 = f.mul(r, r)
    stirling = f.mul(r, f.horner((1.0 / 1260.0, -1.0 / 360.0, 1.0 / 12.0), r2))
    u = f.div(f.sub(x, a), a)
    half_log = f.mul(f.log(f.mul(a, 1.0 / (2.0 * math.pi))), 0.5)
    large = f.sub(f.add(f.mul(a, _log1pmx(f, u, f.div(x, a))), half_log), stirling)
    ax = f.select(f.and_(f.ge(a, 10.0), f.lt(a, np.inf)), large, plain)
    return f.exp(ax), f.lt(ax, -_LOG_MAX)


def igamma(f, a, x):
    nan = f.or_(f.isnan(a), f.isnan(x))
    x_inf, x_zero = f.eq(x, np.inf), f.eq(x, 0)
    domain = f.any_of(f.lt(x, 0), f.lt(a, 0), f.and_(f.eq(a, 0), x_zero), nan)
    use_cf = f.and_(f.ge(x, 1.0), f.gt(x, a))
    ax, underflow = _prefix(f, a, x)
    enabled = f.not_(f.any_of(x_zero, domain, underflow, x_inf))
    cf = _continued_fraction(f, ax, x, a, f.and_(enabled, use_cf), False)
    series = _series(f, ax, x, a, f.and_(enabled, f.not_(use_cf)), False)
    out = f.select(use_cf, f.sub(1.0, cf), series)
    out = f.select(x_zero, 0.0, out)
    out = f.select(x_inf, 1.0, out)
    return f.select(domain, np.nan, out)


def igammac(f, a, x):
    nan = f.or_(f.isnan(a), f.isnan(x))
    a_zero, x_zero, x_inf = f.eq(a, 0), f.eq(x, 0), f.eq(x, np.inf)
    domain = f.any_of(f.lt(x, 0), f.lt(a, 0), f.and_(a_zero, x_zero), nan)
    use_series = f.or_(f.lt(x, 1.0), f.lt(x, a))
    ax, underflow = _prefix(f, a, x)
    enabled = f.not_(f.any_of(domain, underflow, x_inf, a_zero))
    series = _series(f, ax, x, a, f.and_(enabled, use_series), False)
    cf = _continued_fraction(f, ax, x, a, f.and_(enabled, f.not_(use_series)), False)
    out = f.select(use_series, f.sub(1.0, series), cf)
    out = f.select(f.or_(x_inf, a_zero), 0.0, out)
    return f.select(domain, np.nan, out)


def igamma_grad_a(f, a, x):
    nan = f.or_(f.isnan(a), f.isnan(x))
    x_zero = f.eq(x, 0)
    domain = f.or_(f.lt(x, 0), f.le(a, 0))
    use_cf = f.and_(f.gt(x, 1.0), f.gt(x, a))
    ax, underflow = _prefix(f, a, x)
    enabled = f.not_(f.any_of(x_zero, domain, underflow, nan))
    cf = _continued_fraction(f, ax, x, a, f.and_(enabled, use_cf), True)
    series = _series(f, ax, x, a, f.and_(enabled, f.not_(use_cf)), True)
    out = f.select(use_cf, f.neg(cf), series)
    out = f.select(x_zero, 0.0, out)
    return f.select(f.or_(domain, nan), np.nan, out)


_BETA_STEPS = 200.0
_HALF_EPS = _EPS / 2


def _betainc_fraction(f, a, b, x):
    """The continued fraction of I_x(a, b) (DLMF 8.17.22) by Lentz-Thompson-Barnett: all
    elements step together until every one has converged (|delta - 1| < eps/2), at most
    200 steps, as JAX."""
    def numerator(it):
        m = f.floor(f.mul(f.sub(it, 1.0), 0.5))
        even = f.eq(f.sub(it, f.mul(f.floor(f.mul(it, 0.5)), 2.0)), 0)
        a2m = f.add(a, f.mul(m, 2.0))
        first = f.div(f.mul(f.neg(f.add(a, b)), x), f.add(a, 1.0))
        even_n = f.div(f.mul(f.mul(f.neg(f.add(a, m)), f.add(f.add(a, b), m)), x),
                       f.mul(a2m, f.add(a2m, 1.0)))
        even_n = f.select(f.eq(m, 0), first, even_n)
        odd_n = f.div(f.mul(f.mul(m, f.sub(b, m)), x), f.mul(f.sub(a2m, 1.0), a2m))
        return f.select(f.eq(it, 1.0), 1.0, f.select(even, even_n, odd_n))

    h = f.full_like(x, _HALF_EPS)  # the zeroth partial denominator is 0, below "small"
    # loop state is float only (the "some element has not converged" flag is 0/1 too)
    state = [f.scalar(1.0), f.scalar(1.0), h, f.full_like(x, 0.0), h]

    def body(s):
        it, _, c, d, h = s
        num = numerator(it)
        c = f.add(f.div(num, c), 1.0)
        c = f.select(f.lt(f.abs(c), _HALF_EPS), _HALF_EPS, c)
        d = f.add(f.mul(num, d), 1.0)
        d = f.div(1.0, f.select(f.lt(f.abs(d), _HALF_EPS), _HALF_EPS, d))
        delta = f.mul(c, d)
        unconverged = f.max_all(f.mask(f.ge(f.abs(f.sub(delta, 1.0)), _HALF_EPS)))
        return [f.add(it, 1.0), unconverged, c, d, f.mul(h, delta)]

    def cond(s):
        return f.and_(f.lt(s[0], _BETA_STEPS), f.gt(s[1], 0))

    return f.while_loop(state, cond, body)[4]


def betainc(f, a, b, x):
    a_zero = f.or_(f.eq(a, 0), f.eq(b, np.inf))
    b_zero = f.or_(f.eq(b, 0), f.eq(a, np.inf))
    x_zero, x_one = f.eq(x, 0), f.eq(x, 1.0)
    nan = f.any_of(f.isnan(a), f.isnan(b), f.isnan(x))
    is_zero = f.or_(f.and_(b_zero, f.not_(x_one)), f.and_(a_zero, x_zero))
    is_one = f.or_(f.and_(a_zero, f.not_(x_zero)), f.and_(b_zero, x_one))
    is_nan = f.any_of(f.lt(a, 0), f.lt(b, 0), f.lt(x, 0), f.gt(x, 1.0),
                      f.and_(a_zero, b_zero), nan)
    # the fraction converges fast for x < (a + 1)/(a + b + 2); else I_x(a, b) = 1 - I_1-x(b, a)
    fast = f.lt(x, f.div(f.add(a, 1.0), f.add(f.add(a, b), 2.0)))
    a, b = f.select(fast, a, b), f.select(fast, b, a)
    x = f.select(fast, x, f.sub(1.0, x))
    cf = _betainc_fraction(f, a, b, x)
    lbeta_small_a = f.sub(lgamma(f, b), lgamma(f, f.add(a, b)))
    lbeta = f.add(lgamma(f, a), lbeta_small_a)
    log1m_x = f.log1p(f.neg(x))
    tiny_a = f.exp(f.sub(f.mul(log1m_x, b), lbeta_small_a))
    general = f.div(f.exp(f.sub(f.add(f.mul(f.log(x), a), f.mul(log1m_x, b)), lbeta)), a)
    factor = f.select(f.lt(a, float(np.finfo(np.float32).tiny) * 2), tiny_a, general)
    out = f.mul(cf, factor)
    out = f.select(fast, out, f.sub(1.0, out))
    out = f.select(is_zero, 0.0, out)
    out = f.select(is_one, 1.0, out)
    return f.select(is_nan, np.nan, out)
