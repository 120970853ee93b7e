"""VJP rules: shape ops (all linear: the cotangent is moved back, summed or padded)."""
from __future__ import annotations

import numpy as np

from ...ir import Dyn
from .registry import vjp_rule


@vjp_rule("reshape")
def _reshape(ctx, node, cts, needs):
    return [ctx.add("reshape", cts[0], shape=tuple(node.inputs[0].shape))]


@vjp_rule("transpose")
def _transpose(ctx, node, cts, needs):
    inv = tuple(int(i) for i in np.argsort(node.params["perm"]))
    return [ctx.add("transpose", cts[0], perm=inv)]


@vjp_rule("broadcast_in_dim")
def _broadcast_in_dim(ctx, node, cts, needs):
    (ct,), (x,) = cts, node.inputs
    shape, dims = node.params["shape"], node.params["dims"]
    new = [i for i in range(len(shape)) if i not in dims]
    stretched = [d for j, d in enumerate(dims) if x.shape[j] == 1 and shape[d] != 1]
    axes = tuple(sorted(new + stretched))
    r = ctx.add("reduce_sum", ct, axes=axes) if axes else ct
    return [r if tuple(r.shape) == tuple(x.shape) else ctx.add("reshape", r, shape=tuple(x.shape))]


@vjp_rule("rev")
def _rev(ctx, node, cts, needs):
    return [ctx.add("rev", cts[0], axes=node.params["axes"])]


@vjp_rule("concatenate")
def _concatenate(ctx, node, cts, needs):
    (ct,), ax = cts, node.params["axis"]
    out, start = [], 0
    for x, need in zip(node.inputs, needs):
        stop = start + x.shape[ax]
        if need:
            lo = [0] * ct.type.rank
            hi = list(ct.shape)
            lo[ax], hi[ax] = start, stop
            out.append(ctx.add("slice", ct, start=tuple(lo), limit=tuple(hi),
                               strides=(1,) * ct.type.rank))
        else:
            out.append(None)
        start = stop
    return out


@vjp_rule("split")
def _split(ctx, node, cts, needs):
    # JAX's transpose of split: the pieces' cotangents side by side, zeros only for a piece
    # that has none. Nothing is added to them (the sum of zero pads that slices' VJPs give
    # would turn a -0.0 into +0.0; transforms/cse.py concat_pad_sums).
    if not needs[0]:
        return [None]
    parts = [ctx.instantiate(ct, v.type) for ct, v in zip(cts, node.outputs)]
    return [ctx.add("concatenate", *parts, axis=node.params["axis"])
            if len(parts) > 1 else parts[0]]


@vjp_rule("slice")
def _slice(ctx, node, cts, needs):
    # The cotangent goes back to the sliced positions: pad it with zeros, strides
    # becoming interior padding.
    (ct,), (x,), p = cts, node.inputs, node.params
    cfg = []
    for s, st, n_out, d in zip(p["start"], p["strides"], ct.shape, x.shape):
        if isinstance(d, Dyn):  # a flexible axis, sliced whole (docs/flexible.md)
            cfg.append((0, 0, 0))
            continue
        last = s + (n_out - 1) * st + 1 if n_out else s
        cfg.append((s, d - last, st - 1 if n_out else 0))
    return [ctx.add("pad", ct, ctx.scalar(0.0, ct), config=tuple(cfg))]


@vjp_rule("pad")
def _pad(ctx, node, cts, needs):
    (ct,), (x, value), cfg = cts, node.inputs, node.params["config"]
    out = [None, None]
    unpadded = ctx.add("pad", ct, ctx.scalar(0.0, ct),
                       config=tuple((-lo, -hi, 0) for lo, hi, _ in cfg))
    strides = tuple(k + 1 for _, _, k in cfg)
    ct_x = unpadded if set(strides) <= {1} else ctx.add(
        "slice", unpadded, start=(0,) * x.type.rank, limit=tuple(unpadded.shape), strides=strides)
    if needs[0]:
        out[0] = ct_x
    if needs[1]:
        # every padded position holds the padding value
        all_axes = tuple(range(ct.type.rank))
        total = ctx.add("reduce_sum", ct, axes=all_axes) if all_axes else ct
        inner = ctx.add("reduce_sum", ct_x, axes=all_axes) if all_axes else ct_x
        out[1] = ctx.add("sub", total, inner)
    return out
