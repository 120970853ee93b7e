"""Frontend rules: reductions and arg-reductions."""
from __future__ import annotations

import numpy as np

from ...ir import DType
from ..registry import rule
from .reduce_generic import reduce_monoid

_MONOID = {"reduce_sum": "add", "reduce_max": "max", "reduce_min": "min", "reduce_prod": "mul"}

for _p in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod"):

    @rule(_p)
    def _reduce(ctx, eqn, x, _p=_p):
        axes = tuple(sorted(int(a) for a in eqn.params["axes"]))
        if not axes:
            return x
        if x.dtype == DType.bool and _p in ("reduce_max", "reduce_min"):
            return _reduce_bool(ctx, x, axes, _p)  # jnp.max(mask): any / all
        if x.dtype in (DType.i8, DType.u8):  # in int32, wrapped back (reduce_generic.py)
            return reduce_monoid(ctx, _MONOID[_p], x, None, axes)
        return ctx.add(_p, x, axes=axes)


_INDEX_DTYPES = {np.dtype("int32"): None, np.dtype("uint32"): None,
                 np.dtype("int8"): DType.i8, np.dtype("uint8"): DType.u8}

for _p in ("argmax", "argmin"):

    @rule(_p)
    def _arg(ctx, eqn, x, _p=_p):
        (axis,) = eqn.params["axes"]
        index = np.dtype(eqn.params["index_dtype"])
        if index not in _INDEX_DTYPES:
            raise ctx.unsupported(f"index_dtype {index} (int32, uint32, int8 or uint8: Core "
                                  "ML has no 64- or 16-bit integers)")
        if x.dtype == DType.bool:  # False < True, first index among ties as for numbers
            x = ctx.add("convert", x, dtype=DType.i32)
        i = ctx.add(_p, x, axis=int(axis), index_dtype=DType.i32)
        # uint32 is carried as int32 (frontend/uint32.py); 8-bit indices: the low bits of
        # the int32 index, as XLA computes them
        small = _INDEX_DTYPES[index]
        return i if small is None else ctx.add("convert", i, dtype=small)


@rule("reduce_or", "reduce_and")
def _reduce_logical(ctx, eqn, x):
    """any / all of bools: MIL reduces numbers only, so reduce 0/1 int32 with max / min."""
    axes = tuple(sorted(int(a) for a in eqn.params["axes"]))
    if not axes:
        return x
    if x.dtype != DType.bool:  # bitwise, composed from int32 arithmetic (reduce_generic.py)
        return reduce_monoid(ctx, "or" if eqn.primitive.name == "reduce_or" else "and", x,
                             None, axes)
    return _reduce_bool(ctx, x, axes,
                        "reduce_max" if eqn.primitive.name == "reduce_or" else "reduce_min")


def _reduce_bool(ctx, x, axes, op):
    r = ctx.add(op, ctx.add("convert", x, dtype=DType.i32), axes=axes)
    return ctx.add("convert", r, dtype=DType.bool)
