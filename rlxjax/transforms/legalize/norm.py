"""The norm and norm_grad families decomposed into elementwise ops, reductions and reshapes
(for a format without fused norms: Core AI; the Core ML format runs its own, fused for
numerics: MIL's ``layer_norm``, fp16-safe statistics, coreml/rules/norm.py).

* statistics over the normalised axes, dims kept: ``mean = Σx / n``, the centred two-pass
  variance ``mean((x − mean)²)`` (no ``E[x²] − E[x]²`` cancellation), ``inv = rsqrt(var +
  eps)``, ``x̂ = (x − mean)·inv`` (``x·inv`` for RMS);
* group norm in its grouped layout ([N, G, C/G·…] for NCHW, ``ir.norm.group_layout``),
  batch / layer-2d norms over every axis but the channel's (resp. the channel axis), the
  parameters broadcast along it;
* backward: ``dx = inv·(sy − mean(sy) − x̂·mean(sy·x̂))`` with ``sy = dy·γ`` (RMS without
  ``mean(sy)``), ``dγ = Σ dy·x̂``, ``dβ = Σ dy`` over the non-parameter axes; the frozen
  batch norm's ``dx = dy·k``, ``dβ = Σdy``, ``dmean = −k·Σdy``, ``dγ = inv·Σdy·(x − mean)``,
  ``dvar = −½·k·inv²·Σdy·(x − mean)`` with ``k = γ·inv``; ada / gated as ir/norm_grad.py.

The statistics are taken in fp32 only: in fp16 ``mean((x − mean)²)`` overflows for ordinary
activations, so an fp16 norm is refused by name here (docs/numerics.md).
"""
from __future__ import annotations

import numpy as np

from ...errors import JAX_NAMES, UnsupportedPrimitiveError
from ...ir import DType
from ...ir.norm import group_layout
from ...ir.ops import register_impl


def _check(node):
    if node.inputs[0].type.dtype != DType.f32:
        raise UnsupportedPrimitiveError(
            JAX_NAMES.get(node.op, node.op), node.source,
            "fp16 norms are decomposed for this format in fp32 only (their two-pass "
            "statistics overflow in fp16): compute the norm in fp32")


def _keep(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def mean_keep(b, x, axes):
    """The mean over ``axes`` (dims kept): the sum divided by n."""
    n = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    s = b.reshape(b.add("reduce_sum", x, axes=tuple(sorted(axes))), _keep(x.shape, axes)) \
        if axes else x
    return b.add("div", s, b.scalar(n, s))


def stats(b, x, axes, eps, centred=True):
    """(x̂, inv, mean, var) over ``axes`` (dims kept; mean None when not centred)."""
    mean = mean_keep(b, x, axes) if centred else None
    xc = b.add("sub", x, mean) if centred else x
    var = mean_keep(b, b.add("mul", xc, xc), axes)
    inv = b.add("rsqrt", b.add("add", var, b.scalar(eps, var)))
    return b.add("mul", xc, inv), inv, mean, var


def _sum(b, v, axes):
    return b.add("reduce_sum", v, axes=tuple(sorted(axes))) if axes else v


def _along(b, v, c, rank):
    """A per-channel [C] vector shaped to broadcast along axis ``c`` of rank ``rank``."""
    return b.reshape(v, (v.shape[0],) + (1,) * (rank - 1 - c))


def _affine(node, ins):
    x, rest = ins[0], list(ins[1:])
    gamma = rest.pop(0) if node.params["has_gamma"] else None
    beta = rest.pop(0) if node.params.get("has_beta") else None
    return x, gamma, beta, rest


def _apply(b, y, gamma, beta):
    if gamma is not None:
        y = b.add("mul", y, gamma)
    return y if beta is None else b.add("add", y, beta)


class _Layout:
    """Where a norm's statistics are taken (``stat_axes`` of the ``grouped`` shape, x's own
    when None), which axes its parameters' gradients sum over, how gamma broadcasts."""

    def __init__(self, stat_axes, param_axes, grouped=None, channel=None, centred=True):
        self.stat_axes, self.param_axes = list(stat_axes), list(param_axes)
        self.grouped, self.channel, self.centred = grouped, channel, centred

    def view(self, b, g, rank):
        """gamma (or beta) shaped to broadcast against x."""
        return g if g is None or self.channel is None else _along(b, g, self.channel, rank)


def _layout(node):
    t, p = node.inputs[0].type, node.params
    rank, op = t.rank, node.op.replace("_grad", "")
    if op in ("layer_norm", "rms_norm"):
        a = p["axis"]
        return _Layout(range(a, rank), range(a), centred=op == "layer_norm")
    if op == "group_norm":
        c = p["channel_axis"]
        grouped, axes = group_layout(t.shape, c, p["num_groups"])
        return _Layout(axes, [i for i in range(rank) if i != c], grouped, c)
    if op == "layer_norm2d":
        return _Layout([1], [i for i in range(rank) if i != 1], None, 1)
    others = [i for i in range(rank) if i != p["axis"]]  # batch_norm_train
    return _Layout(others, others, None, p["axis"])


@register_impl("decompose", "layer_norm", "rms_norm", "group_norm", "layer_norm2d")
def _norm(b, node, ins):
    _check(node)
    t, lay = node.inputs[0].type, _layout(node)
    x, gamma, beta, _ = _affine(node, ins)
    y = stats(b, b.reshape(x, lay.grouped or t.shape), lay.stat_axes, node.params["eps"],
              lay.centred)[0]
    return [_apply(b, b.reshape(y, t.shape), lay.view(b, gamma, t.rank),
                   lay.view(b, beta, t.rank))]


@register_impl("decompose", "batch_norm")
def _batch_norm(b, node, ins):
    _check(node)
    t, p = node.inputs[0].type, node.params
    x, gamma, beta, (mean, var) = _affine(node, ins)
    ax = p["axis"]
    scale = b.add("rsqrt", b.add("add", var, b.scalar(p["eps"], var)))
    if gamma is not None:
        scale = b.add("mul", scale, gamma)
    y = b.add("mul", b.add("sub", x, _along(b, mean, ax, t.rank)), _along(b, scale, ax, t.rank))
    return [y if beta is None else b.add("add", y, _along(b, beta, ax, t.rank))]


@register_impl("decompose", "batch_norm_train")
def _batch_norm_train(b, node, ins):
    _check(node)
    t, p = node.inputs[0].type, node.params
    x, gamma, beta, (rmean, rvar) = _affine(node, ins)
    lay = _layout(node)
    y, _, mean, var = stats(b, x, lay.stat_axes, p["eps"])
    y = _apply(b, y, lay.view(b, gamma, t.rank), lay.view(b, beta, t.rank))
    m, n = p["momentum"], t.shape[p["axis"]]

    def update(running, stat):
        return b.add("add", b.add("mul", running, b.scalar(m, running)),
                     b.add("mul", b.reshape(stat, (n,)), b.scalar(1.0 - m, running)))

    return [y, update(rmean, mean), update(rvar, var)]


def input_grad(b, sy, xhat, inv, axes, centred):
    """dx = inv·(sy − mean(sy) − x̂·mean(sy·x̂)) over ``axes`` (RMS: without mean(sy))."""
    proj = b.add("mul", xhat, mean_keep(b, b.add("mul", sy, xhat), axes))
    if centred:
        sy = b.add("sub", sy, mean_keep(b, sy, axes))
    return b.add("mul", b.add("sub", sy, proj), inv)


@register_impl("decompose", "layer_norm_grad", "rms_norm_grad", "group_norm_grad",
               "layer_norm2d_grad", "batch_norm_train_grad")
def _norm_grad(b, node, ins):
    _check(node)
    t, p = node.inputs[0].type, node.params
    x, dy = ins[0], ins[-1]
    gamma = ins[1] if p["has_gamma"] else None
    lay, want, got = _layout(node), p["outputs"], {}
    shape = lay.grouped or t.shape
    xhat, inv, _, _ = stats(b, b.reshape(x, shape), lay.stat_axes, p["eps"], lay.centred)
    if "dx" in want:
        sy = b.add("mul", dy, lay.view(b, gamma, t.rank)) if gamma is not None else dy
        got["dx"] = b.reshape(input_grad(b, b.reshape(sy, shape), xhat, inv, lay.stat_axes,
                                         lay.centred), t.shape)
    if "dgamma" in want:
        got["dgamma"] = _sum(b, b.add("mul", dy, b.reshape(xhat, t.shape)), lay.param_axes)
    if "dbeta" in want:
        got["dbeta"] = _sum(b, dy, lay.param_axes)
    return [got[k] for k in want]


@register_impl("decompose", "batch_norm_grad")
def _batch_norm_grad(b, node, ins):
    _check(node)
    t, p = node.inputs[0].type, node.params
    x, dy, mean, var = ins[0], ins[-1], ins[-3], ins[-2]
    gamma = ins[1] if p["has_gamma"] else None
    ax = p["axis"]
    red = [i for i in range(t.rank) if i != ax]
    want, got = p["outputs"], {}
    inv = b.add("rsqrt", b.add("add", var, b.scalar(p["eps"], var)))
    k = b.add("mul", inv, gamma) if gamma is not None else inv
    if "dx" in want:
        got["dx"] = b.add("mul", dy, _along(b, k, ax, t.rank))
    if "dbeta" in want or "dmean" in want:
        s0 = got["dbeta"] = _sum(b, dy, red)
        if "dmean" in want:
            got["dmean"] = b.add("mul", s0, b.add("mul", k, b.scalar(-1, k)))
    if "dgamma" in want or "dvar" in want:
        xc = b.add("sub", x, _along(b, mean, ax, t.rank))
        dg = got["dgamma"] = b.add("mul", _sum(b, b.add("mul", dy, xc), red), inv)
        if "dvar" in want:
            got["dvar"] = b.add("mul", dg, b.add("mul", k, b.add("mul", inv,
                                                                   b.scalar(-0.5, inv))))
    return [got[k_] for k_ in want]


def sum_to(b, v, shape):
    """Undo broadcasting: ``v`` summed down to ``shape``."""
    shape = tuple(shape)
    lead = v.type.rank - len(shape)
    axes = list(range(lead)) + [lead + i for i, d in enumerate(shape)
                                if d == 1 and v.shape[lead + i] != 1]
    return b.reshape(_sum(b, v, axes), shape)


@register_impl("decompose", "ada_layer_norm")
def _ada_layer_norm(b, node, ins):
    _check(node)
    x, scale, shift = ins
    n = stats(b, x, [x.type.rank - 1], node.params["eps"], node.params["kind"] == "layer")[0]
    return [b.add("add", b.add("mul", n, b.add("add", scale, b.scalar(1, scale))), shift)]


@register_impl("decompose", "ada_layer_norm_grad")
def _ada_layer_norm_grad(b, node, ins):
    _check(node)
    x, scale, dy = ins
    p = node.params
    last, centred, want, got = [x.type.rank - 1], p["kind"] == "layer", p["outputs"], {}
    n, inv, _, _ = stats(b, x, last, p["eps"], centred)
    if "dx" in want:
        sy = b.add("mul", dy, b.add("add", scale, b.scalar(1, scale)))
        got["dx"] = input_grad(b, sy, n, inv, last, centred)
    if "dscale" in want:
        got["dscale"] = sum_to(b, b.add("mul", dy, n), scale.shape)
    if "dshift" in want:
        got["dshift"] = sum_to(b, dy, p["shift_shape"])
    return [got[k] for k in want]


@register_impl("decompose", "gated_residual")
def _gated_residual(b, node, ins):
    x, y, gate = ins
    return [b.add("add", x, b.add("mul", gate, y))]


@register_impl("decompose", "gated_residual_grad")
def _gated_residual_grad(b, node, ins):
    y, gate, dy = ins
    want, got = node.params["outputs"], {}
    if "dy" in want:
        got["dy"] = b.add("mul", dy, gate)
    if "dgate" in want:
        got["dgate"] = sum_to(b, b.add("mul", dy, y), gate.shape)
    return [got[k] for k in want]
