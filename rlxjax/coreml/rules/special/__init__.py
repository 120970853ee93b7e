"""Core ML lowerings of the elementwise math of ir/special.py (as the other layers' special.py
modules), most composed from MIL ops, which lack them; importing registers them.

* ``elementary.py``: the trigonometric and hyperbolic functions and their inverses, cube
  root, nextafter;
* ``erf_inv.py``: the inverse error function;
* ``bessel.py``: the exponentially scaled modified Bessel functions i0e, i1e;
* ``gamma.py``: lgamma, digamma, and the Hurwitz zeta and polygamma functions;
* ``incomplete_gamma_beta.py``: the regularized incomplete gamma functions (igamma, igammac,
  igamma_grad_a) and incomplete beta function (betainc);
* ``compose.py``: what they are composed with (``Fx``, ``upcast``, ``while_loop``); no
  lowering.
"""
from . import elementary  # noqa: F401
from . import erf_inv, bessel  # noqa: F401
from . import gamma  # noqa: F401
from . import incomplete_gamma_beta  # noqa: F401
