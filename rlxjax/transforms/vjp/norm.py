"""VJP rules: the norm family. Each forward norm emits its own backward op (norm_grad
family, rlxjax/ir/norm_grad.py; named by the forward's record, ``backward`` in
rlxjax/ir/norm.py) asking, through ``outputs``, only for the gradients that ``needs``
wants. The running-statistics outputs of batch_norm_train are the exception: their
cotangents go through standard ops here (rarely present: a loss seldom reads them).
"""
from __future__ import annotations

from .helpers import backward_op, emit
from .registry import refuse_vjp, vjp_rule

_KEEP = ("axis", "eps", "num_groups", "channel_axis", "has_gamma", "kind")


def _grad_params(node):
    """The forward params the backward op takes (beta and momentum play no part)."""
    return {k: v for k, v in node.params.items() if k in _KEEP}


def _affine_roles(p, n_stats=0, stats=()):
    return (["dx"] + ["dgamma"] * p["has_gamma"] + ["dbeta"] * p["has_beta"]
            + list(stats or [None] * n_stats))


def _gamma(node):
    return [node.inputs[1]] if node.params["has_gamma"] else []


@vjp_rule("layer_norm", "rms_norm", "group_norm", "layer_norm2d")
def _affine_norm(ctx, node, cts, needs):
    (ct,), x = cts, node.inputs[0]
    return emit(ctx, backward_op(node), [x, *_gamma(node), ct], _affine_roles(node.params),
                needs, **_grad_params(node))


@vjp_rule("batch_norm")
def _batch_norm(ctx, node, cts, needs):
    (ct,), x, (mean, var) = cts, node.inputs[0], node.inputs[-2:]
    return emit(ctx, backward_op(node), [x, *_gamma(node), mean, var, ct],
                _affine_roles(node.params, stats=("dmean", "dvar")), needs,
                **_grad_params(node))


@vjp_rule("batch_norm_train")
def _batch_norm_train(ctx, node, cts, needs):
    ct, ct_mean, ct_var = cts
    x, n = node.inputs[0], len(node.inputs)
    if ct is not None:
        res = emit(ctx, backward_op(node), [x, *_gamma(node), ct],
                   _affine_roles(node.params, n_stats=2), needs, **_grad_params(node))
    else:
        res = [None] * n
    m = node.params["momentum"]
    # new_running = m·running + (1 − m)·batch_stat
    for i, c in ((n - 2, ct_mean), (n - 1, ct_var)):
        if c is not None and needs[i]:
            res[i] = ctx.add("mul", c, ctx.scalar(m, c))
    if needs[0] and (ct_mean is not None or ct_var is not None):
        extra = _running_stats_dx(ctx, x, node.params["axis"], 1.0 - m, ct_mean, ct_var)
        res[0] = extra if res[0] is None else ctx.add("add", res[0], extra)
    return res


def _running_stats_dx(ctx, x, axis, w, ct_mean, ct_var):
    """x's cotangent through w·mean(x) and w·var(x) (batch statistics over every axis but
    ``axis``): (w/N)·(ct_mean + 2·ct_var·(x − mean)); the mean inside var contributes
    nothing since Σ(x − mean) = 0."""
    rank = x.type.rank
    red = tuple(i for i in range(rank) if i != axis)
    cshape = (x.shape[axis],) + (1,) * (rank - 1 - axis)  # broadcasts along ``axis``
    count = x.type.size // x.shape[axis]

    def per_channel(v):
        return ctx.add("reshape", v, shape=cshape)

    term = None
    if ct_var is not None:
        total = ctx.add("reduce_sum", x, axes=red) if red else x
        mean = ctx.add("mul", total, ctx.scalar(1.0 / count, x))
        xc = ctx.add("sub", x, per_channel(mean))
        term = ctx.add("mul", xc, per_channel(ctx.add("mul", ct_var, ctx.scalar(2.0, x))))
    if ct_mean is not None:
        c = per_channel(ct_mean)
        term = c if term is None else ctx.add("add", term, c)
    term = ctx.add("mul", term, ctx.scalar(w / count, x))
    if tuple(term.shape) != tuple(x.shape):  # only ct_mean: a per-channel value
        term = ctx.add("broadcast_in_dim", term, shape=tuple(x.shape),
                       dims=tuple(range(rank - len(cshape), rank)))
    return term


@vjp_rule("ada_layer_norm")
def _ada_layer_norm(ctx, node, cts, needs):
    (ct,), (x, scale, shift) = cts, node.inputs
    return emit(ctx, backward_op(node), [x, scale, ct], ["dx", "dscale", "dshift"], needs,
                kind=node.params["kind"], eps=node.params["eps"], shift_shape=tuple(shift.shape))


@vjp_rule("gated_residual")
def _gated_residual(ctx, node, cts, needs):
    (ct,), (_, y, gate) = cts, node.inputs
    res = emit(ctx, backward_op(node), [y, gate, ct], [None, "dy", "dgate"], needs)
    res[0] = ct if needs[0] else None
    return res


# The backward ops have no VJP of their own: a gradient of a gradient through a norm.
refuse_vjp("second-order derivatives through a norm are not supported (the backward op "
           "of a norm has no VJP rule)",
           "layer_norm_grad", "rms_norm_grad", "group_norm_grad", "layer_norm2d_grad",
           "batch_norm_grad", "batch_norm_train_grad", "ada_layer_norm_grad",
           "gated_residual_grad")
