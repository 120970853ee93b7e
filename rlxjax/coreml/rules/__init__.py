"""Core ML lowerings, one module per op family; importing registers them."""
from . import constant, elementwise, linear, norm, reduction, shape  # noqa: F401
from . import norm_grad  # noqa: F401
from . import activation, attention  # noqa: F401
from . import indexing  # noqa: F401
from . import conv  # noqa: F401
from . import random  # noqa: F401
from . import control  # noqa: F401
from . import special  # noqa: F401  (the elementwise math of ir/special.py)
from . import bitwise  # noqa: F401
from . import convert  # noqa: F401
from . import constexpr  # noqa: F401  (frozen weights, compressed)
