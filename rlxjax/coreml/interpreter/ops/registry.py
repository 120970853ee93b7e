"""The registry the reference interpreter's MIL op implementations fill (see __init__.py):
a module of its own, so that the op modules and the package do not import each other."""
from __future__ import annotations

from typing import Callable

#: op type -> implementation
MIL_OP_IMPLS: dict[str, Callable] = {}
#: op type -> names of its tuple-typed inputs (always passed as a list, even with one binding)
TUPLE_INPUTS: dict[str, frozenset] = {"while_loop": frozenset({"loop_vars"})}
#: op types whose implementation needs the declared output dtypes (see OUTPUT_DTYPES_KEY)
WANTS_OUTPUT_DTYPES: set = set()
#: extra key the interpreter puts into ``inputs`` for ops in WANTS_OUTPUT_DTYPES: a tuple with the
#: numpy dtype of each declared output.  Needed where MIL's type inference depends on facts that
#: are not visible in the values (iOS17 matmul: output dtype is that of the non-const operand).
OUTPUT_DTYPES_KEY = "__output_dtypes__"


def register(*names: str, tuple_inputs=(), wants_output_dtypes: bool = False):
    """Decorator: register ``fn`` under each MIL op type in ``names``."""

    def deco(fn):
        for name in names:
            if name in MIL_OP_IMPLS:
                raise ValueError(f"op {name!r} registered twice")
            MIL_OP_IMPLS[name] = fn
            if tuple_inputs:
                TUPLE_INPUTS[name] = frozenset(tuple_inputs)
            if wants_output_dtypes:
                WANTS_OUTPUT_DTYPES.add(name)
        return fn

    return deco
