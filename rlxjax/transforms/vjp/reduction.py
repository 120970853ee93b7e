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


@vjp_rule("reduce_prod")
def _reduce_prod(ctx, node, cts, needs):
    # d prod / d x_i is the product of the other elements (JAX computes it exactly, zeros
    # included). Here: p = product of the non-zero elements; with no zero in the row the
    # gradient is p / x_i, with exactly one zero it is p at that zero and 0 elsewhere, with
    # two or more zeros it is 0 everywhere. The division costs at most an ulp or two.
    (ct,), (x,), axes = cts, node.inputs, node.params["axes"]
    zero, one = ctx.scalar(0.0, x), ctx.scalar(1.0, x)
    is_zero = ctx.add("eq", x, zero)
    safe = ctx.add("select", is_zero, x, one)
    p = _expand(ctx, ctx.add("reduce_prod", safe, axes=axes), x, axes)
    n_zero = _expand(ctx, ctx.add("reduce_sum", ctx.add("convert", is_zero, dtype=x.dtype),
                                  axes=axes), x, axes)
    at_single_zero = ctx.add("and", ctx.add("eq", n_zero, one), is_zero)
    with_zeros = ctx.add("select", at_single_zero, zero, p)
    others = ctx.add("select", ctx.add("eq", n_zero, zero), with_zeros,
                     ctx.add("div", p, safe))
    return [ctx.add("mul", _expand(ctx, ct, x, axes), others)]
