"""``reduce_precision`` decomposed (for a format without it: Core AI; the Core ML format runs
its own, coreml/rules/bitwise.py, whose subnormal step is ``(|x| + C) - C``): XLA's
ReducePrecision in fp32 arithmetic. Veltkamp's splitting rounds the mantissa to nearest
even (values >= 2**100 scaled by 2**-64 first, exact), the source format's subnormals are
rounded to the reduced format's step with ``round`` (half to even), then overflow to ±inf
and the flush below the reduced format's smallest normal; NaN kept. fp16 values are
widened exactly to fp32 and the result converted back. Bit for bit against XLA on every
fp16 value and on fp32's edge binades (tests/coreai_format/test_coreai_fp16.py).
"""
from __future__ import annotations

import numpy as np

from ...errors import JAX_NAMES, UnsupportedPrimitiveError
from ...ir import DType
from ...ir.ops import register_impl

#: (exponent bits, mantissa bits) of the formats values are computed in
_FORMATS = {DType.f32: (8, 23), DType.f16: (5, 10)}


@register_impl("decompose", "reduce_precision")
def _reduce_precision(b, node, ins):
    src = node.inputs[0].type.dtype
    e_bits, m_bits = node.params["exponent_bits"], node.params["mantissa_bits"]
    src_e, src_m = _FORMATS[src]
    if e_bits >= src_e and m_bits >= src_m:
        return [ins[0]]
    if m_bits == 0:
        raise UnsupportedPrimitiveError(
            JAX_NAMES.get(node.op, node.op), node.source,
            "mantissa_bits=0 (XLA breaks those ties by the parity of the exponent, which "
            "fp32 arithmetic cannot see)")
    x = ins[0] if src == DType.f32 else b.add("convert", ins[0], dtype=DType.f32)
    f = lambda v: b.constant(np.float32(v))  # noqa: E731
    op = b.add

    def sel(cond, on_true, on_false):
        return op("select", cond, on_false, on_true)

    ax, r = op("abs", x), x
    if m_bits < src_m:
        big = op("ge", ax, f(2.0 ** 100))
        xs = sel(big, op("mul", x, f(2.0 ** -64)), x)
        c = op("mul", xs, f(2.0 ** (23 - m_bits) + 1))
        hi = op("sub", c, op("sub", c, xs))
        hi = sel(big, op("mul", hi, f(2.0 ** 64)), hi)
        bias = (1 << (src_e - 1)) - 1
        mn, q = 2.0 ** (1 - bias), 2.0 ** (1 - bias - m_bits)
        # to a multiple of q, ties to even: round(|x| / q) · q, both scalings exact (Core
        # AI's compiler folds Core ML's (|x| + C) - C into |x|: measured)
        # (1/q up to 2**149: two factors, each product exact, k·q a float; the first
        # factor a runtime value, else Core AI's compiler multiplies the two: inf)
        p100 = sel(op("ne", x, x), f(1.0), f(2.0 ** 100))
        k = op("round", op("mul", op("mul", ax, p100), f(2.0 ** -100 / q)), method="half_even")
        mag = op("div", op("mul", k, f(q * 2.0 ** 100)), p100)
        signed = sel(op("lt", x, f(0)), op("mul", mag, f(-1)), mag)
        tiny = sel(op("eq", mag, f(0)), op("mul", x, f(0)), signed)
        r = sel(op("lt", ax, f(mn)), tiny, hi)
        r = sel(op("eq", ax, f(np.inf)), x, r)
    if e_bits < src_e:
        rb = (1 << (e_bits - 1)) - 1  # the reduced format's largest exponent
        ar = op("abs", r)
        r = sel(op("ge", ar, f(2.0 ** (rb + 1))), op("mul", x, f(np.inf)), r)
        r = sel(op("lt", ar, f(2.0 ** (1 - rb))), op("mul", x, f(0)), r)
    r = sel(op("ne", x, x), x, r)  # NaN stays NaN
    return [r if src == DType.f32 else b.add("convert", r, dtype=src)]
