"""Frontend rules: reshapes, transposes, broadcasts, slices, concatenation, iota."""
from __future__ import annotations

import numpy as np

from ...ir import Dyn
from ...ir.types import dtype_from_numpy
from ..registry import rule


@rule("reshape")
def _reshape(ctx, eqn, x):
    dims = eqn.params.get("dimensions")
    if dims is not None:
        # lax.reshape(x, shape, dimensions): transpose by `dimensions`, then reshape (JAX's
        # reduce_prod JVP emits one).
        x = ctx.transpose(x, tuple(int(d) for d in dims))
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
    return ctx.transpose(x, tuple(int(p) for p in eqn.params["permutation"]))


@rule("broadcast_in_dim")
def _broadcast_in_dim(ctx, eqn, x):
    shape = tuple(eqn.params["shape"])
    return ctx.broadcast(x, shape, tuple(int(d) for d in eqn.params["broadcast_dimensions"]))


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


@rule("split")
def _split(ctx, eqn, x):
    """lax.split (jnp.split, and JAX's transpose of concatenate): one RLX split (its VJP
    is JAX's, a concatenate); one slice per piece where x has a flexible size or a piece
    is empty."""
    axis, rank = int(eqn.params["axis"]), x.type.rank
    sizes = tuple(int(n) for n in eqn.params["sizes"])
    if len(sizes) > 1 and all(sizes) and x.type.is_static:
        return list(ctx.add_multi("split", [x], axis=axis, sizes=sizes))
    outs, start = [], 0
    for n in sizes:
        lo, hi = [0] * rank, list(x.shape)
        lo[axis], hi[axis] = start, start + n
        outs.append(x if n == x.shape[axis] else
                    ctx.add("slice", x, start=tuple(lo), limit=tuple(hi), strides=(1,) * rank))
        start += n
    return outs


@rule("slice")
def _slice(ctx, eqn, x):
    start = tuple(int(s) for s in eqn.params["start_indices"])
    limit = tuple(s if isinstance(s, Dyn) else int(s) for s in eqn.params["limit_indices"])
    strides = eqn.params["strides"]
    strides = tuple(int(s) for s in strides) if strides is not None else (1,) * len(start)
    if start == (0,) * len(start) and limit == x.shape and set(strides) <= {1}:
        return x
    return ctx.add("slice", x, start=start, limit=limit, strides=strides)


@rule("iota")
def _iota(ctx, eqn):
    p = eqn.params
    shape, dim = tuple(p["shape"]), int(p["dimension"])
    if any(isinstance(d, Dyn) for d in shape):  # a flexible length (docs/flexible.md)
        return _flexible_iota(ctx, shape, dim, np.dtype(p["dtype"]))
    ramp = np.arange(shape[dim], dtype=np.dtype(p["dtype"]))
    ramp = ramp.reshape([-1 if i == dim else 1 for i in range(len(shape))])
    return ctx.constant(np.broadcast_to(ramp, shape).copy())


def _flexible_iota(ctx, shape, dim, dtype):
    """An iota whose shape has flexible dims (a causal mask over a flexible sequence): the
    int32 running count of ones along ``dim`` less one (indexing/common.py's), converted."""
    from .indexing.common import _flexible_iota as count

    ramp = count(ctx, shape, dim)
    return ramp if dtype == np.int32 else ctx.add("convert", ramp, dtype=dtype_from_numpy(dtype))


@rule("pad")
def _pad(ctx, eqn, x, value):
    cfg = tuple((int(lo), int(hi), int(i)) for lo, hi, i in eqn.params["padding_config"])
    if all(c == (0, 0, 0) for c in cfg):
        return x
    return ctx.add("pad", x, value, config=cfg)


@rule("tile")
def _tile(ctx, eqn, x):
    """lax.tile (jnp.tile): as JAX lowers it, a broadcast into a new axis before each axis,
    then a reshape merging each pair; the gradient follows from those two ops."""
    reps = tuple(int(r) for r in eqn.params["reps"])
    if all(r == 1 for r in reps):
        return x
    pairs = tuple(k for r, d in zip(reps, x.shape) for k in (r, d))
    y = ctx.broadcast(x, pairs, tuple(2 * i + 1 for i in range(x.type.rank)))
    return ctx.reshape(y, tuple(r * d for r, d in zip(reps, x.shape)))
