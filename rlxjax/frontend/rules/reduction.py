"""Frontend rules: reductions and arg-reductions."""
from __future__ import annotations

import numpy as np

from ...ir import DType
from ..registry import rule

for _p in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):

    @rule(_p)
    def _reduce(ctx, eqn, x, _p=_p):
        axes = tuple(sorted(int(a) for a in eqn.params["axes"]))
        if not axes:
            return x
        return ctx.add(_p, x, axes=axes)


for _p in ("argmax", "argmin"):

    @rule(_p)
    def _arg(ctx, eqn, x, _p=_p):
        (axis,) = eqn.params["axes"]
        if np.dtype(eqn.params["index_dtype"]) != np.dtype("int32"):
            raise ctx.unsupported(f"index_dtype {eqn.params['index_dtype']} (only int32: "
                                  "Core ML has no int64)")
        return ctx.add(_p, x, axis=int(axis), index_dtype=DType.i32)
