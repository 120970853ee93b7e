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


# -- erfc to float32 accuracy: the fitted f(x) = x·exp(x²)·erfc(x) of both formats'
# lowerings (coreml/rules/erfc.py, coreai/ops_special.py; derivation: tools/fit_erfc.py)
# f(x) on [1, 3] as a polynomial in (x - 2), highest degree first.
ERFC_A = (-8.9861497851032659e-06, 2.9367471408893778e-05, -7.1136734477332094e-05,
          2.1674416785613779e-04, -6.4782245750472783e-04, 1.7800081829546690e-03,
          -4.5789150418021922e-03, 1.0881038038523883e-02, -2.3190976485714290e-02,
          4.1802773057551201e-02, 5.1079135287713351e-01)
# f(x) on [3, 10.5] as a polynomial in u = (2/x² - (LO + HI)) / (HI - LO).
ERFC_B = (-4.9434631194531132e-08, 2.3206072567315718e-07, -1.2621965315271319e-06,
          8.6306646832990324e-06, -7.0582075550043160e-05, 7.5028242373620651e-04,
          -1.2258853323664585e-02, 5.4857505508028637e-01)
ERFC_LO, ERFC_HI = 0.009070294784580499, 0.1111111111111111
