"""Registry of MIL op implementations for the reference interpreter.

Each implementation is ``fn(inputs: dict[str, value]) -> tuple of outputs``.  ``inputs`` maps the
MIL input names ("x", "y", "axes", ...) to resolved values: ``np.ndarray`` (rank 0 included),
``str`` for string constants, or a ``list`` of arrays for tuple inputs (e.g. concat's
``values``).  Optional inputs may be absent; implementations fill in the defaults exactly as
coremltools' op definitions (``converters/mil/mil/ops/defs/iOS15..iOS18``) do.  Outputs must have
exactly the dtype MIL's type inference gives, and are always arrays (never numpy scalars).
"""
from __future__ import annotations

from .registry import (MIL_OP_IMPLS, OUTPUT_DTYPES_KEY, TUPLE_INPUTS,  # noqa: F401
                       WANTS_OUTPUT_DTYPES, register)
# The op families fill MIL_OP_IMPLS through `register`.
from . import control, elementwise, linear, reduction, shape  # noqa: E402,F401
from . import indexing  # noqa: E402,F401
from . import conv  # noqa: E402,F401
from . import random  # noqa: E402,F401
from . import state  # noqa: E402,F401
from . import constexpr  # noqa: E402,F401
from . import attention, normalization  # noqa: E402,F401

__all__ = ["MIL_OP_IMPLS", "TUPLE_INPUTS", "WANTS_OUTPUT_DTYPES", "OUTPUT_DTYPES_KEY", "register"]
