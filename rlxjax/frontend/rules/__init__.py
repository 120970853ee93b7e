"""Frontend rules, one module per op family; importing registers them."""
from . import control, elementwise, linear, norm, reduction, shape  # noqa: F401
from . import indexing  # noqa: F401
from . import pool  # noqa: F401
from . import conv  # noqa: F401
from . import random  # noqa: F401
from . import collective  # noqa: F401
from . import special  # noqa: F401
from . import linalg  # noqa: F401
from . import bitwise, reduce_generic  # noqa: F401
from . import remat  # noqa: F401
from . import bitcast  # noqa: F401
from . import equinox  # noqa: F401
