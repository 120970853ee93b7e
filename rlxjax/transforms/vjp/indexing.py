"""VJP rules: gathers, scatters, dynamic slices, cumsum (JAX's transposes and JVPs)."""
from __future__ import annotations

from ...errors import UnsupportedPrimitiveError
from .registry import vjp_rule


@vjp_rule("gather_nd")
def _gather_nd(ctx, node, cts, needs):
    # JAX's transpose of gather: scatter-add of the cotangent (duplicates accumulate).
    (ct,), (x, idx) = cts, node.inputs
    return [ctx.add("scatter_nd", ctx.zeros(x.type), idx, ct, mode="add", unique=False), None]


@vjp_rule("scatter_nd")
def _scatter_nd(ctx, node, cts, needs):
    (ct,), (x, idx, upd), p = cts, node.inputs, node.params
    mode = p["mode"]
    ct_x = ct_u = None
    if mode == "add":
        ct_x = ct
        ct_u = ctx.add("gather_nd", ct, idx) if needs[2] else None
    elif mode == "update":
        # The frontend made the written positions unique (losers go to a scratch slot
        # whose cotangent is zero), so: zero the overwritten positions, gather the rest.
        if needs[0]:
            ct_x = ctx.add("scatter_nd", ct, idx, ctx.zeros(upd.type), mode="update",
                           unique=p["unique"])
        ct_u = ctx.add("gather_nd", ct, idx) if needs[2] else None
    elif mode == "mul":
        if needs[0]:
            ct_x = ctx.add("scatter_nd", ct, idx, upd, mode="mul", unique=p["unique"])
        if needs[2]:
            if not p["unique"]:
                raise UnsupportedPrimitiveError(
                    "scatter-mul", node.source,
                    "its gradient w.r.t. the updates needs unique indices (as in JAX): pass "
                    "unique_indices=True to .at[...].multiply if the indices are unique")
            ct_u = ctx.add("gather_nd", ctx.add("mul", ct, x), idx)
    else:  # max / min: JAX's JVP shares the cotangent equally among the tied winners
        out = node.output
        one = ctx.scalar(1.0, ct)
        zero = ctx.scalar(0.0, ct)
        x_won = ctx.add("eq", x, out)
        u_won = ctx.add("eq", upd, ctx.add("gather_nd", out, idx))
        n_u = ctx.add("scatter_nd", ctx.zeros(x.type), idx,
                      ctx.add("convert", u_won, dtype=x.dtype), mode="add", unique=False)
        n = ctx.add("add", n_u, ctx.add("select", x_won, zero, one))
        share = ctx.add("div", ct, n)
        if needs[0]:
            ct_x = ctx.add("select", x_won, ctx.zeros(x.type), share)
        if needs[2]:
            ct_u = ctx.add("select", u_won, ctx.zeros(upd.type),
                           ctx.add("gather_nd", share, idx))
    return [ct_x if needs[0] else None, None, ct_u]


@vjp_rule("cumsum")
def _cumsum(ctx, node, cts, needs):
    return [ctx.add("cumsum", cts[0], axis=node.params["axis"],
                    reverse=not node.params["reverse"])]


@vjp_rule("dynamic_slice")
def _dynamic_slice(ctx, node, cts, needs):
    (ct,), x, starts = cts, node.inputs[0], node.inputs[1:]
    return [ctx.add("dynamic_update_slice", ctx.zeros(x.type), ct, *starts)] + \
        [None] * len(starts)


@vjp_rule("dynamic_update_slice")
def _dynamic_update_slice(ctx, node, cts, needs):
    (ct,), (x, upd), starts = cts, node.inputs[:2], node.inputs[2:]
    ct_x = ctx.add("dynamic_update_slice", ct, ctx.zeros(upd.type), *starts) \
        if needs[0] else None
    ct_u = ctx.add("dynamic_slice", ct, *starts, sizes=tuple(upd.shape)) if needs[1] else None
    return [ct_x, ct_u] + [None] * len(starts)

