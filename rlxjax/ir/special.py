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
# lowerings (transforms/legalize/special.py; derivation: tools/fit_erfc.py)
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


# -- the coefficient tables both formats' lowerings evaluate (coreml/rules/special/,
# transforms/legalize/special.py)
# erf_inv: Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011), single
# precision: erfinv(x) = x·p(w), w = -log((1 - x)(1 + x)), p a polynomial in w - 2.5 for
# w < 5 and in sqrt(w) - 3 beyond (highest degree first).
ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06,
                  0.00021858087, -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844,
               0.00573950773, -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)
# Bessel i0e / i1e: Cephes' single-precision Chebyshev expansions (i0f.c, i1f.c), on
# [0, 8] in x/2 - 2 and on (8, inf) in 32/x - 2 (the latter divided by sqrt(x)).
I0E_A = (-1.30002500998624804212e-8, 6.04699502254191894932e-8, -2.67079385394061173391e-7,
         1.11738753912010371815e-6, -4.41673835845875056359e-6, 1.64484480707288970893e-5,
         -5.75419501008210370398e-5, 1.88502885095841655729e-4, -5.76375574538582365885e-4,
         1.63947561694133579842e-3, -4.32430999505057594430e-3, 1.05464603945949983183e-2,
         -2.37374148058994688156e-2, 4.93052842396707084878e-2, -9.49010970480476444210e-2,
         1.71620901522208775349e-1, -3.04682672343198398683e-1, 6.76795274409476084995e-1)
I0E_B = (3.39623202570838634515e-9, 2.26666899049817806459e-8, 2.04891858946906374183e-7,
         2.89137052083475648297e-6, 6.88975834691682398426e-5, 3.36911647825569408990e-3,
         8.04490411014108831608e-1)
I1E_A = (9.38153738649577178388e-9, -4.44505912879632808065e-8, 2.00329475355213526229e-7,
         -8.56872026469545474066e-7, 3.47025130813767847674e-6, -1.32731636560394358279e-5,
         4.78156510755005422638e-5, -1.61760815825896745588e-4, 5.12285956168575772895e-4,
         -1.51357245063125314899e-3, 4.15642294431288815669e-3, -1.05640848946261981558e-2,
         2.47264490306265168283e-2, -5.29459812080949914269e-2, 1.02643658689847095384e-1,
         -1.76416518357834055153e-1, 2.52587186443633654823e-1)
I1E_B = (-3.83538038596423702205e-9, -2.63146884688951950684e-8, -2.51223623787020892529e-7,
         -3.88256480887769039346e-6, -1.10588938762623716291e-4, -9.76109749136146840777e-3,
         7.78576235018280120474e-1)
