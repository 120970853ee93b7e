"""The special functions of ir/special.py that Core AI lacks, composed as the Core ML lowering
composes them (coreml/rules/special/elementary.py, erf_inv.py, bessel.py: the same
formulas, constants from ir/special.py), written with ops_fx.py's ``Fx``, in float32:

- ``atan2``: atan of min/max of |x|, |y| in [0, 1], then the octant; 0/0 and inf/inf as C;
- ``cbrt``: ``pow(|x|, 1/3)`` and one Newton step, zeros / infinities / NaN passed through;
- ``nextafter``: float arithmetic exact under round-to-nearest (no bitcast): x ± |x|·c with
  c = 0.625·2^(1-p), subnormal steps scaled by 2^(p+1);
- ``erf_inv``: Giles' single-precision polynomials;
- ``bessel_i0e`` / ``bessel_i1e``: Cephes' Chebyshev expansions (Clenshaw).
Measured against float64 in docs/coreai.md.
"""
from __future__ import annotations

import numpy as np

from ..ir import DType
from ..ir.special import ERFINV_CENTRAL, ERFINV_TAIL, I0E_A, I0E_B, I1E_A, I1E_B
from .ops_base import rule, unsupported
from .ops_fx import Fx
from .ops_linalg import widen


def _args(ctx, node, ins):
    """The operands at the result's shape (Core AI's where misbehaved on operands that
    broadcast along different dims: ops_linalg.py ``widen``)."""
    t = node.outputs[0].type
    if t.dtype != DType.f32:
        raise unsupported(node, f"{node.op} of {t.dtype} is not lowered for Core AI yet")
    return Fx(ctx), [widen(ctx, v, t.shape, DType.f32) for v in ins]


@rule("atan2")
def _atan2(ctx, node, ins):
    f, (y, x) = _args(ctx, node, ins)
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


@rule("cbrt")
def _cbrt(ctx, node, ins):
    f, (x,) = _args(ctx, node, ins)
    a = f.abs(x)
    y = f.pow(a, 1.0 / 3.0)
    y = f.sub(y, f.div(f.sub(y, f.div(a, f.mul(y, y))), 3.0))
    y = f.select(f.lt(x, 0), f.neg(y), y)
    return f.select(f.or_(f.eq(a, 0), f.eq(a, np.inf)), x, y)


@rule("nextafter")
def _nextafter(ctx, node, ins):
    f, (x, y) = _args(ctx, node, ins)
    fi = np.finfo(np.float32)
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


@rule("erf_inv")
def _erf_inv(ctx, node, ins):
    f, (x,) = _args(ctx, node, ins)
    w = f.neg(f.log(f.mul(f.sub(1.0, x), f.add(x, 1.0))))
    central = f.horner(ERFINV_CENTRAL, f.sub(w, 2.5))
    tail = f.horner(ERFINV_TAIL, f.sub(f.sqrt(w), 3.0))
    r = f.mul(f.select(f.lt(w, 5.0), central, tail), x)
    r = f.select(f.eq(f.abs(x), 1.0), f.mul(x, np.inf), r)
    return f.select(f.gt(f.abs(x), 1.0), np.nan, r)


def _chebyshev(f, coeffs, t):
    """Clenshaw's sum of a Chebyshev series in t (Cephes' chbevl: halved first term)."""
    b2, b1, b0 = 0.0, float(coeffs[0]), f.add(f.mul(t, float(coeffs[0])), float(coeffs[1]))
    for k in coeffs[2:]:
        b2, b1 = b1, b0
        b0 = f.sub(f.add(f.mul(t, b1), float(k)), b2)
    return f.mul(f.sub(b0, b2), 0.5)


def _bessel(f, x, a, b):
    z = f.abs(x)
    near = _chebyshev(f, a, f.sub(f.mul(z, 0.5), 2.0))
    far = f.div(_chebyshev(f, b, f.sub(f.div(32.0, z), 2.0)), f.sqrt(z))
    return z, near, far


@rule("bessel_i0e")
def _i0e(ctx, node, ins):
    f, (x,) = _args(ctx, node, ins)
    z, near, far = _bessel(f, x, I0E_A, I0E_B)
    return f.select(f.le(z, 8.0), near, far)


@rule("bessel_i1e")
def _i1e(ctx, node, ins):
    f, (x,) = _args(ctx, node, ins)
    z, near, far = _bessel(f, x, I1E_A, I1E_B)
    return f.select(f.le(z, 8.0), f.mul(near, x), f.select(f.lt(x, 0), f.neg(far), far))
