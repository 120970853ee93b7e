"""Frontend rules: reshapes, transposes, broadcasts, slices, concatenation, iota."""
from __future__ import annotations

import numpy as np

from ..registry import rule


@rule("reshape")
def _reshape(ctx, eqn, x):
    if eqn.params.get("dimensions") is not None:
        raise ctx.unsupported("reshape with 'dimensions' (a transposing reshape)")
    shape = tuple(eqn.params["new_sizes"])
    if shape == x.shape:
        return x
    return ctx.add("reshape", x, shape=shape)


@rule("squeeze")
def _squeeze(ctx, eqn, x):
    dims = {d % max(x.type.rank, 1) for d in eqn.params["dimensions"]}
    shape = tuple(d for i, d in enumerate(x.shape) if i not in dims)
    return x if shape == x.shape else ctx.add("reshape", x, shape=shape)


@rule("expand_dims")
def _expand_dims(ctx, eqn, x):
    shape = tuple(eqn.outvars[0].aval.shape)
    return ctx.add("reshape", x, shape=shape)


@rule("transpose")
def _transpose(ctx, eqn, x):
    perm = tuple(int(p) for p in eqn.params["permutation"])
    if perm == tuple(range(len(perm))):
        return x
    return ctx.add("transpose", x, perm=perm)


@rule("broadcast_in_dim")
def _broadcast_in_dim(ctx, eqn, x):
    shape = tuple(eqn.params["shape"])
    dims = tuple(int(d) for d in eqn.params["broadcast_dimensions"])
    if shape == x.shape and dims == tuple(range(len(shape))):
        return x
    return ctx.add("broadcast_in_dim", x, shape=shape, dims=dims)


@rule("rev")
def _rev(ctx, eqn, x):
    axes = tuple(sorted(int(d) for d in eqn.params["dimensions"]))
    return ctx.add("rev", x, axes=axes) if axes else x


@rule("concatenate")
def _concatenate(ctx, eqn, *xs):
    if len(xs) == 1:
        return xs[0]
    return ctx.add("concatenate", *xs, axis=int(eqn.params["dimension"]))


@rule("stack")
def _stack(ctx, eqn, *xs):
    """jnp.stack (a primitive since JAX 0.9): insert the new axis, then concatenate."""
    shape = tuple(eqn.outvars[0].aval.shape)
    axis = int(eqn.params["axis"])
    one = shape[:axis] + (1,) + shape[axis + 1:]
    parts = [ctx.add("reshape", x, shape=one) for x in xs]
    return parts[0] if len(parts) == 1 else ctx.add("concatenate", *parts, axis=axis)


@rule("slice")
def _slice(ctx, eqn, x):
    start = tuple(int(s) for s in eqn.params["start_indices"])
    limit = tuple(int(s) for s in eqn.params["limit_indices"])
    strides = eqn.params["strides"]
    strides = tuple(int(s) for s in strides) if strides is not None else (1,) * len(start)
    if start == (0,) * len(start) and limit == x.shape and set(strides) <= {1}:
        return x
    return ctx.add("slice", x, start=start, limit=limit, strides=strides)


@rule("iota")
def _iota(ctx, eqn):
    p = eqn.params
    shape, dim = tuple(p["shape"]), int(p["dimension"])
    ramp = np.arange(shape[dim], dtype=np.dtype(p["dtype"]))
    ramp = ramp.reshape([-1 if i == dim else 1 for i in range(len(shape))])
    return ctx.constant(np.broadcast_to(ramp, shape).copy())


@rule("pad")
def _pad(ctx, eqn, x, value):
    cfg = tuple((int(lo), int(hi), int(i)) for lo, hi, i in eqn.params["padding_config"])
    if all(c == (0, 0, 0) for c in cfg):
        return x
    return ctx.add("pad", x, value, config=cfg)
