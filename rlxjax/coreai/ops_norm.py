"""The norm family and its backward ops (rlxjax/ir/norm.py, norm_grad.py) -> Core AI in fp32,
with the formulas of the Core ML lowering (coreml/rules/norm.py, norm_grad.py):

* statistics over the normalised axes, dims kept: ``mean``, the centred two-pass variance
  ``mean((x − mean)²)`` (no ``E[x²] − E[x]²`` cancellation), ``inv = rsqrt(var + eps)``,
  ``x̂ = (x − mean)·inv`` (``x·inv`` for RMS);
* group norm in its grouped layout ([N, G, C/G·…] for NCHW), batch / layer-2d norms over
  every axis but the channel's (resp. the channel axis), the parameters broadcast along it;
* backward: ``dx = inv·(sy − mean(sy) − x̂·mean(sy·x̂))`` with ``sy = dy·γ`` (RMS without
  ``mean(sy)``), ``dγ = Σ dy·x̂``, ``dβ = Σ dy`` over the non-parameter axes; the frozen
  batch norm's ``dx = dy·k`` etc. with ``k = γ·inv``; ada / gated as ir/norm_grad.py says.
"""
from __future__ import annotations

from ..ir import DType
from ..ir.norm import group_layout
from .ops_base import rule, unsupported

F32 = DType.f32


def _check(node):
    if node.inputs[0].type.dtype != F32:
        raise unsupported(node, "fp16 norms are not lowered for Core AI yet")


def _affine(ctx, node, ins, n_after=0):
    x, rest = ins[0], list(ins[1:])
    gamma = rest.pop(0) if node.params["has_gamma"] else None
    beta = rest.pop(0) if node.params.get("has_beta") else None
    return x, gamma, beta, rest


def stats(ctx, x, shape, axes, eps, centred=True):
    """(x̂, inv, mean, var) over ``axes`` (dims kept)."""
    mean = ctx.mean_keep(x, axes, shape) if centred else None
    xc = ctx.sub(x, mean) if centred else x
    var = ctx.mean_keep(ctx.mul(xc, xc), axes, shape)
    inv = ctx.ca.rsqrt(ctx.add(var, ctx.scalar(eps, F32)))
    return ctx.mul(xc, inv), inv, mean, var


def _along(ctx, v, c, rank, n):
    """A per-channel [C] vector shaped to broadcast along axis ``c`` of rank ``rank``."""
    return ctx.reshape(v, (n,) + (1,) * (rank - 1 - c))


def _apply(ctx, y, gamma, beta):
    if gamma is not None:
        y = ctx.mul(y, gamma)
    return y if beta is None else ctx.add(y, beta)


class _Layout:
    """Where a norm's statistics are taken (``stat_axes`` of the ``grouped`` shape, x's own
    when None), which axes its parameters' gradients sum over, how gamma broadcasts."""

    def __init__(self, stat_axes, param_axes, grouped=None, channel=None, centred=True):
        self.stat_axes, self.param_axes = list(stat_axes), list(param_axes)
        self.grouped, self.channel, self.centred = grouped, channel, centred


def _layout(node):
    t, p = node.inputs[0].type, node.params
    rank = t.rank
    op = node.op.replace("_grad", "")
    if op in ("layer_norm", "rms_norm"):
        a = p["axis"]
        return _Layout(range(a, rank), range(a), centred=op == "layer_norm")
    if op == "group_norm":
        c = p["channel_axis"]
        grouped, axes = group_layout(t.shape, c, p["num_groups"])
        return _Layout(axes, [i for i in range(rank) if i != c], grouped, c)
    if op == "layer_norm2d":
        return _Layout([1], [i for i in range(rank) if i != 1], None, 1)
    a = p["axis"]  # batch_norm_train
    others = [i for i in range(rank) if i != a]
    return _Layout(others, others, None, a)


def _gamma_view(ctx, lay, g, t):
    if g is None or lay.channel is None:
        return g
    return _along(ctx, g, lay.channel, t.rank, t.shape[lay.channel])


@rule("layer_norm", "rms_norm", "group_norm", "layer_norm2d")
def _norm(ctx, node, ins):
    _check(node)
    t, lay = node.inputs[0].type, _layout(node)
    x, gamma, beta, _ = _affine(ctx, node, ins)
    shape = lay.grouped or t.shape
    v = ctx.reshape(x, shape) if lay.grouped else x
    y = stats(ctx, v, shape, lay.stat_axes, node.params["eps"], lay.centred)[0]
    y = ctx.reshape(y, t.shape) if lay.grouped else y
    return _apply(ctx, y, _gamma_view(ctx, lay, gamma, t), _gamma_view(ctx, lay, beta, t))


@rule("batch_norm")
def _batch_norm(ctx, node, ins):
    _check(node)
    t, p = node.inputs[0].type, node.params
    x, gamma, beta, (mean, var) = _affine(ctx, node, ins, 2)
    ax, n = p["axis"], t.shape[p["axis"]]
    scale = ctx.ca.rsqrt(ctx.add(var, ctx.scalar(p["eps"], F32)))
    if gamma is not None:
        scale = ctx.mul(scale, gamma)
    y = ctx.mul(ctx.sub(x, _along(ctx, mean, ax, t.rank, n)), _along(ctx, scale, ax, t.rank, n))
    return y if beta is None else ctx.add(y, _along(ctx, beta, ax, t.rank, n))


@rule("batch_norm_train")
def _batch_norm_train(ctx, node, ins):
    _check(node)
    t, p = node.inputs[0].type, node.params
    x, gamma, beta, (rmean, rvar) = _affine(ctx, node, ins, 2)
    lay = _layout(node)
    y, _, mean, var = stats(ctx, x, t.shape, lay.stat_axes, p["eps"])
    y = _apply(ctx, y, _gamma_view(ctx, lay, gamma, t), _gamma_view(ctx, lay, beta, t))
    m, n = p["momentum"], t.shape[p["axis"]]

    def update(running, stat):
        return ctx.add(ctx.mul(running, ctx.scalar(m, F32)),
                       ctx.mul(ctx.reshape(stat, (n,)), ctx.scalar(1.0 - m, F32)))

    return [y, update(rmean, mean), update(rvar, var)]


def input_grad(ctx, sy, xhat, inv, axes, shape, centred):
    """dx = inv·(sy − mean(sy) − x̂·mean(sy·x̂)) over ``axes`` (RMS: without mean(sy))."""
    proj = ctx.mul(xhat, ctx.mean_keep(ctx.mul(sy, xhat), axes, shape))
    if centred:
        sy = ctx.sub(sy, ctx.mean_keep(sy, axes, shape))
    return ctx.mul(ctx.sub(sy, proj), inv)


@rule("layer_norm_grad", "rms_norm_grad", "group_norm_grad", "layer_norm2d_grad",
      "batch_norm_train_grad")
def _norm_grad(ctx, node, ins):
    _check(node)
    t, p = node.inputs[0].type, node.params
    x, dy = ins[0], ins[-1]
    gamma = ins[1] if p["has_gamma"] else None
    lay, want, got = _layout(node), p["outputs"], {}
    shape = lay.grouped or t.shape
    grouped = (lambda v: ctx.reshape(v, shape)) if lay.grouped else (lambda v: v)  # noqa: E731
    back = (lambda v: ctx.reshape(v, t.shape)) if lay.grouped else (lambda v: v)  # noqa: E731
    xhat, inv, _, _ = stats(ctx, grouped(x), shape, lay.stat_axes, p["eps"], lay.centred)
    pshape = [t.shape[i] for i in range(t.rank) if i not in lay.param_axes]
    if "dx" in want:
        sy = ctx.mul(dy, _gamma_view(ctx, lay, gamma, t)) if gamma is not None else dy
        got["dx"] = back(input_grad(ctx, grouped(sy), xhat, inv, lay.stat_axes, shape,
                                    lay.centred))
    if "dgamma" in want:
        got["dgamma"] = _sum(ctx, ctx.mul(dy, back(xhat)), lay.param_axes, pshape)
    if "dbeta" in want:
        got["dbeta"] = _sum(ctx, dy, lay.param_axes, pshape)
    return [got[k] for k in want]


def _sum(ctx, v, axes, shape):
    return ctx.reduce("sum", v, axes, shape) if axes else v


@rule("batch_norm_grad")
def _batch_norm_grad(ctx, node, ins):
    """y = (x − mean)·k + β, k = γ·inv: dx = dy·k, dβ = Σdy, dmean = −k·Σdy,
    dγ = inv·Σdy·(x − mean), dvar = −½·k·inv²·Σdy·(x − mean)."""
    _check(node)
    t, p = node.inputs[0].type, node.params
    x, dy, mean, var = ins[0], ins[-1], ins[-3], ins[-2]
    gamma = ins[1] if p["has_gamma"] else None
    ax, n = p["axis"], t.shape[p["axis"]]
    red = [i for i in range(t.rank) if i != ax]
    want, got = p["outputs"], {}
    inv = ctx.ca.rsqrt(ctx.add(var, ctx.scalar(p["eps"], F32)))
    k = ctx.mul(inv, gamma) if gamma is not None else inv
    if "dx" in want:
        got["dx"] = ctx.mul(dy, _along(ctx, k, ax, t.rank, n))
    if "dbeta" in want or "dmean" in want:
        s0 = got["dbeta"] = ctx.reduce("sum", dy, red, (n,))
        got["dmean"] = ctx.mul(s0, ctx.neg(k, F32))
    if "dgamma" in want or "dvar" in want:
        xc = ctx.sub(x, _along(ctx, mean, ax, t.rank, n))
        dg = got["dgamma"] = ctx.mul(ctx.reduce("sum", ctx.mul(dy, xc), red, (n,)), inv)
        got["dvar"] = ctx.mul(dg, ctx.mul(k, ctx.mul(inv, ctx.scalar(-0.5, F32))))
    return [got[k_] for k_ in want]


def _sum_to(ctx, v, vshape, shape):
    """Undo broadcasting: ``v`` (of ``vshape``) summed down to ``shape``."""
    lead = len(vshape) - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                if d == 1 and vshape[lead + i] != 1]
    return ctx.reduce("sum", v, axes, tuple(shape)) if axes else ctx.reshape(v, tuple(shape))


@rule("ada_layer_norm")
def _ada_layer_norm(ctx, node, ins):
    _check(node)
    x, scale, shift = ins
    t, p = node.inputs[0].type, node.params
    n = stats(ctx, x, t.shape, [t.rank - 1], p["eps"], p["kind"] == "layer")[0]
    return ctx.add(ctx.mul(n, ctx.add(scale, ctx.scalar(1, F32))), shift)


@rule("ada_layer_norm_grad")
def _ada_layer_norm_grad(ctx, node, ins):
    _check(node)
    x, scale, dy = ins
    t, p = node.inputs[0].type, node.params
    last, centred, want, got = [t.rank - 1], p["kind"] == "layer", p["outputs"], {}
    n, inv, _, _ = stats(ctx, x, t.shape, last, p["eps"], centred)
    if "dx" in want:
        sy = ctx.mul(dy, ctx.add(scale, ctx.scalar(1, F32)))
        got["dx"] = input_grad(ctx, sy, n, inv, last, t.shape, centred)
    if "dscale" in want:
        got["dscale"] = _sum_to(ctx, ctx.mul(dy, n), t.shape, node.inputs[1].type.shape)
    if "dshift" in want:
        got["dshift"] = _sum_to(ctx, dy, t.shape, p["shift_shape"])
    return [got[k] for k in want]


@rule("gated_residual")
def _gated_residual(ctx, node, ins):
    x, y, gate = ins
    return ctx.add(x, ctx.mul(gate, y))


@rule("gated_residual_grad")
def _gated_residual_grad(ctx, node, ins):
    y, gate, dy = ins
    want, got = node.params["outputs"], {}
    if "dy" in want:
        got["dy"] = ctx.mul(dy, gate)
    if "dgate" in want:
        got["dgate"] = _sum_to(ctx, ctx.mul(dy, y), node.inputs[2].type.shape,
                               node.inputs[1].type.shape)
    return [got[k] for k in want]
