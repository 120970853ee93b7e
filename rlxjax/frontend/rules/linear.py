"""Frontend rules: dot_general."""
from __future__ import annotations

import numpy as np

from ...ir import dtype_from_numpy
from ..registry import rule


@rule("dot_general")
def _dot_general(ctx, eqn, a, b):
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    pet = eqn.params.get("preferred_element_type")
    out_dtype = dtype_from_numpy(pet) if pet is not None else a.dtype
    if a.dtype != b.dtype:
        raise ctx.unsupported(f"operands of different dtypes ({a.dtype}, {b.dtype})")
    if out_dtype != a.dtype:
        # Accumulating in a wider type than the operands is not something MIL's matmul
        # exposes; compute in the operand type only when that is what JAX asked for.
        raise ctx.unsupported(f"preferred_element_type {np.dtype(pet)} differs from the "
                              f"operand dtype {a.dtype}")
    return ctx.add("dot_general", a, b,
                   contract=(tuple(map(int, lc)), tuple(map(int, rc))),
                   batch=(tuple(map(int, lb)), tuple(map(int, rb))))
