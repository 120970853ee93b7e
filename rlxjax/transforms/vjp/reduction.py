"""VJP rules: reductions."""
from __future__ import annotations

from .registry import vjp_rule


def _kept_dims(rank, axes):
    return tuple(i for i in range(rank) if i not in axes)


def _expand(ctx, v, x, axes):
    """Broadcast a reduced value back to x's shape."""
    return ctx.add("broadcast_in_dim", v, shape=tuple(x.shape), dims=_kept_dims(x.type.rank, axes))


@vjp_rule("reduce_sum")
def _reduce_sum(ctx, node, cts, needs):
    (ct,), (x,) = cts, node.inputs
    return [_expand(ctx, ct, x, node.params["axes"])]


@vjp_rule("reduce_max", "reduce_min")
def _reduce_chooser(ctx, node, cts, needs):
    # As JAX: the cotangent is shared equally among the positions equal to the result.
    (ct,), (x,), axes = cts, node.inputs, node.params["axes"]
    hit = ctx.add("eq", x, _expand(ctx, node.output, x, axes))
    ones = ctx.add("convert", hit, dtype=x.dtype)
    counts = ctx.add("reduce_sum", ones, axes=axes)
    share = ctx.add("div", ct, counts)
    return [ctx.add("mul", ones, _expand(ctx, share, x, axes))]
