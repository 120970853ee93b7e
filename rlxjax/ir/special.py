"""Elementwise math beyond ops.py: the inverse trigonometric and hyperbolic functions, cube
root, the special functions (gamma family, incomplete gamma and beta, Bessel, inverse
error function) and nextafter. Family ``elementwise``: every op maps floats to floats of
the same dtype, numpy broadcasting between operands.

Each is one JAX primitive of the same name, except ``betainc`` (``regularized_incomplete_beta``).
``igamma_grad_a`` (d/da of the regularized lower incomplete gamma) is JAX's primitive of
that name, which its ``igamma`` derivative emits; ``polygamma`` and ``zeta`` (Hurwitz) are
the primitives ``digamma``'s derivative reaches.
"""
from __future__ import annotations

from .ops import IRTypeError, broadcast_shapes, defop
from .types import TensorType

#: unary float -> float
SPECIAL_UNARY = ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                 "cbrt", "erf_inv", "lgamma", "digamma", "bessel_i0e", "bessel_i1e")
#: binary float, float -> float (numpy broadcasting)
SPECIAL_BINARY = ("atan2", "nextafter", "igamma", "igammac", "igamma_grad_a", "polygamma",
                  "zeta")
#: ternary
SPECIAL_TERNARY = ("betainc",)


def _float_op(name):
    def infer(ts, p):
        for t in ts:
            if not t.dtype.is_float:
                raise IRTypeError(f"{name} needs float inputs, got {t}")
            if t.dtype != ts[0].dtype:
                raise IRTypeError(f"{name}: dtypes differ ({', '.join(map(str, ts))})")
        return [TensorType(broadcast_shapes(*(t.shape for t in ts)), ts[0].dtype)]

    return infer


for _n in SPECIAL_UNARY:
    defop(_n, "elementwise", 1, params={})(_float_op(_n))
for _n in SPECIAL_BINARY:
    defop(_n, "elementwise", 2, params={})(_float_op(_n))
defop("betainc", "elementwise", 3, params={})(_float_op("betainc"))
