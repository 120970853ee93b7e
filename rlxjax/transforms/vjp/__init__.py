"""VJP rules, one module per op family; importing registers them."""
from . import elementwise, linear, reduction, shape  # noqa: F401
from . import norm  # noqa: F401
from . import activation, attention  # noqa: F401
from . import indexing  # noqa: F401
from . import pool  # noqa: F401
from . import conv  # noqa: F401
from . import random  # noqa: F401
from . import control  # noqa: F401
from . import special  # noqa: F401
from . import linalg  # noqa: F401
from . import bitwise  # noqa: F401
from .registry import NON_DIFFERENTIABLE, VJPS, refuse_vjp, vjp_rule

__all__ = ["NON_DIFFERENTIABLE", "VJPS", "refuse_vjp", "vjp_rule"]
