"""Frontend rules: dynamic_slice and dynamic_update_slice (starts clamped as JAX does)."""
from __future__ import annotations

import numpy as np

from ....ir import constant_value
from ...registry import rule
from .common import i32


def _clamped_starts(ctx, x, starts, sizes):
    """JAX clamps each start into [0, dim - size]; constant starts are clamped here."""
    out, static = [], []
    for s, d, n in zip(starts, x.shape, sizes):
        c = constant_value(s)
        if c is not None:
            v = int(np.clip(int(c), 0, d - n))
            static.append(v)
            out.append(ctx.constant(np.int32(v)))
        else:
            static.append(None)
            out.append(ctx.add("clamp", ctx.constant(np.int32(0)), i32(ctx, s),
                               ctx.constant(np.int32(d - n))))
    return out, static


@rule("dynamic_slice")
def _dynamic_slice(ctx, eqn, x, *starts):
    sizes = tuple(int(s) for s in eqn.params["slice_sizes"])
    starts = starts[:x.type.rank]
    if x.type.rank == 0:
        return x
    vals, static = _clamped_starts(ctx, x, starts, sizes)
    if all(s is not None for s in static):
        return ctx.add("slice", x, start=tuple(static),
                       limit=tuple(s + n for s, n in zip(static, sizes)),
                       strides=(1,) * len(sizes))
    return ctx.add("dynamic_slice", x, *vals, sizes=sizes)


@rule("dynamic_update_slice")
def _dynamic_update_slice(ctx, eqn, x, upd, *starts):
    if x.type.rank == 0:
        return upd
    vals, _ = _clamped_starts(ctx, x, starts, upd.shape)
    return ctx.add("dynamic_update_slice", x, upd, *vals)
