"""Special functions decomposed: ``erfc`` below, and the compositions of ir/special_eval.py /
ir/special_incomplete.py on special_fx.py's ``Fx`` (the end of this module).

``erfc`` decomposed (MIL and Core AI have ``erf`` only, and ``1 - erf(x)`` loses every
digit of small results: erfc(4) = 1.5e-8 is below erf's rounding), to float32 accuracy:

* |x| < 1: ``1 - erf(x)`` (erfc >= 0.157 there);
* |x| >= 1: ``erfc(|x|) = exp(-x²)·f(|x|)/|x|`` with ``f(x) = x·exp(x²)·erfc(x)`` smooth,
  two fitted polynomials (rlxjax/ir/special.py; derivation and error: tools/fit_erfc.py,
  float32 Horner relative error <= 8.6e-8 against 30-digit mpmath); ``exp(-x²)`` taken as
  ``exp(-h²)·exp(-(x-h)(x+h))`` with h = x to 8 fractional bits, so h² is exact and the
  large exponent carries no rounding error; ``erfc(-x) = 2 - erfc(x)``; exact limits at ±inf.

Computed in the operand's dtype (Core ML's fp16 programs op for op); a format carrying fp16
in fp32 rounds once (``round_once``); Core AI refuses its native fp16 (coreai/lower.py).
"""
from __future__ import annotations

import numpy as np

from ...errors import JAX_NAMES, UnsupportedPrimitiveError
from ...ir import DType, special_eval, special_incomplete
from ...ir.ops import register_impl
from ...ir.special import ERFC_A, ERFC_B, ERFC_HI, ERFC_LO
from .policy import round_once
from .special_fx import Fx


def _horner(b, coeffs, u):
    acc = b.add("mul", u, b.scalar(coeffs[0], u))
    for k in coeffs[1:-1]:
        acc = b.add("mul", b.add("add", acc, b.scalar(k, u)), u)
    return b.add("add", acc, b.scalar(coeffs[-1], u))


def erfc(b, x):
    """erfc(x), the composition above (also exact gelu's for Core AI, activation.py)."""
    def op(name, *vs):  # numbers as constants of x's dtype
        return b.add(name, *[v if hasattr(v, "type") else b.scalar(v, x) for v in vs])

    a = op("abs", x)
    fa = _horner(b, ERFC_A, op("sub", a, 2.0))
    t = op("div", 1.0, op("mul", a, a))
    u = op("div", op("sub", op("mul", t, 2.0), ERFC_LO + ERFC_HI), ERFC_HI - ERFC_LO)
    fb = _horner(b, ERFC_B, u)
    f = op("select", op("lt", a, 3.0), fb, fa)
    h = op("div", op("floor", op("mul", a, 256.0)), 256.0)
    small = op("mul", op("sub", a, h), op("add", a, h))
    expo = op("mul", op("exp", op("mul", op("mul", h, h), -1.0)), op("exp", op("mul", small, -1.0)))
    tail = op("div", op("mul", expo, f), a)
    tail = op("select", op("lt", x, 0.0), tail, op("sub", 2.0, tail))
    near = op("sub", 1.0, op("erf", x))
    out = op("select", op("lt", a, 1.0), tail, near)
    at_inf = op("eq", a, np.inf)  # a = inf: f/a is 0·0; the exact limits instead
    return op("select", at_inf, out, op("select", op("lt", x, 0.0), 0.0, 2.0))


@register_impl("decompose", "erfc")
@round_once
def _erfc(b, node, ins):
    return [erfc(b, ins[0])]


def _in_fp32(fn, f16: bool, loops: bool = False):
    """The decomposition computing ``fn`` on ``Fx`` in fp32, its operands at the result's
    shape (widened by ``x + -0.0`` at that shape, not broadcast: Core AI's where misbehaved
    on operands that broadcast along different dims). ``f16``: fp16 values too, as XLA
    computes them, in fp32 rounded once (a format carrying fp16 in fp32 converts for free).
    ``loops``: the operands at least 1-D (the while loops of ir/special_incomplete.py run
    on rank 0 as [1])."""
    def decompose(b, node, ins):
        t = node.outputs[0].type
        if t.dtype != DType.f32 and not (f16 and t.dtype == DType.f16):
            raise UnsupportedPrimitiveError(JAX_NAMES.get(node.op, node.op), node.source,
                                            f"{node.op} of {t.dtype} is not decomposed yet")
        ins = [v if v.type.dtype == DType.f32 else b.add("convert", v, dtype=DType.f32)
               for v in ins]
        shape = tuple(t.shape) or ((1,) if loops else ())
        if loops:
            ins = [v if v.type.shape else b.reshape(v, (1,) * len(shape)) for v in ins]
        ins = [v if tuple(v.type.shape) == shape else
               b.add("add", v, b.constant(np.full(shape, -0.0, np.float32))) for v in ins]
        out = b.reshape(fn(Fx(b), *ins), t.shape)
        return [out if t.dtype == DType.f32 else b.add("convert", out, dtype=t.dtype)]

    return decompose


# fp16: jax.jit gives exactly round(f(fp32(x))) for these on every finite fp16 (measured,
# 2026-12-02), but not for nextafter, which steps by one fp16 ulp: its fp16 stays refused
for _op, _fn, _f16 in (
        ("atan2", special_eval.atan2, True), ("cbrt", special_eval.cbrt, True),
        ("nextafter", special_eval.nextafter, False), ("erf_inv", special_eval.erf_inv, True),
        ("bessel_i0e", special_eval.i0e, True), ("bessel_i1e", special_eval.i1e, True),
        ("lgamma", special_eval.lgamma, True), ("digamma", special_eval.digamma, True),
        ("zeta", special_eval.zeta, False), ("polygamma", special_eval.polygamma, False)):
    register_impl("decompose", _op)(_in_fp32(_fn, _f16))

for _op, _fn in (("igamma", special_incomplete.igamma), ("igammac", special_incomplete.igammac),
                 ("igamma_grad_a", special_incomplete.igamma_grad_a),
                 ("betainc", special_incomplete.betainc)):
    register_impl("decompose", _op)(_in_fp32(_fn, True, loops=True))
