"""Lowering: the norm_grad family (backward of the norms), from primitive MIL ops.

One formula serves every normalisation over a set of axes. With ``x̂ = (x − μ)·inv``
(centred; ``x̂ = x·inv`` for RMS), ``inv = rsqrt(var + eps)`` and ``sy = dy·γ``:

    dx = inv · (sy − mean(sy) − x̂ · mean(sy · x̂))      (RMS: no ``mean(sy)`` term)
    dγ = Σ_params dy · x̂,   dβ = Σ_params dy

where ``mean`` runs over the normalised axes (dims kept, so ``[..., 1]`` factors broadcast)
and ``Σ_params`` over every axis of x that is not a parameter axis. The statistics are
recomputed with the forward's centred two-pass helpers (rules/norm.py) rather than saved,
so that the forward and backward stay independent nodes. LayerNorm, RMSNorm, GroupNorm
(in the grouped layout of ``group_layout``), LayerNorm2d and training BatchNorm differ only
in their axes (``_Layout``); AdaLayerNorm uses the same ``dx`` with ``sy = dy·(1+scale)``.
A LayerNorm (or layer-kind AdaLayerNorm) backward that needs no dx in fp32 takes x̂ from
MIL's ``layer_norm`` instead, the same op the forward then uses (rules/norm.py
``uses_native``), so that MIL CSE leaves one op for x̂ where the written-out form has seven.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Tuple

import numpy as np

from ...ir import TensorType
from ...ir.norm import group_layout
from ..registry import lowering
from .common import Ew, reshape, scalar_like
from .norm import along, inv_std, moments, native_layer_norm, reduce_mean, uses_native


# -- shared maths ----------------------------------------------------------------------
def reduce_sum(b, x, axes, keep_dims=False):
    """Sum over ``axes`` (x itself when there are none)."""
    axes = sorted(axes)
    if not axes:
        return x
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)
                  if keep_dims or i not in axes)
    return b.op("reduce_sum", TensorType(shape, x.dtype), x=x,
                axes=np.asarray(axes, np.int32), keep_dims=keep_dims)


def sum_to(b, x, shape):
    """Undo numpy broadcasting: sum ``x`` down to ``shape`` (at most one reduce_sum and,
    only when neither keep_dims choice lands on ``shape``, one reshape)."""
    shape = tuple(shape)
    lead = x.type.rank - len(shape)
    inner = [lead + i for i, d in enumerate(shape) if d == 1 and x.shape[lead + i] != 1]
    axes = list(range(lead)) + inner
    if not axes:
        return reshape(b, x, shape)
    return reshape(b, reduce_sum(b, x, axes, keep_dims=not lead), shape)


def norm_stats(b, x, axes, eps, centred):
    """-> (x̂, inv): the normalised x and rsqrt(var + eps) (an ``InvStd``) over ``axes``
    (dims kept), with the forward's statistics (fp16-safe, see rules/norm.py)."""
    xhat, inv, _, _ = moments(b, x, axes, eps, centred)
    return xhat, inv


def input_grad(b, sy, xhat, inv, axes, centred):
    """dx = inv·(sy − mean(sy) − x̂·mean(sy·x̂)) over ``axes`` (RMS: without mean(sy))."""
    e = Ew(b)
    proj = e.binary("mul", xhat, reduce_mean(b, e.binary("mul", sy, xhat), axes))
    if centred:
        sy = e.binary("sub", sy, reduce_mean(b, sy, axes))
    return inv.apply(b, e.binary("sub", sy, proj))


# -- the affine norms: one lowering, per-op axes -----------------------------------------
@dataclass(frozen=True)
class _Layout:
    stat_axes: Sequence[int]          # normalised axes, in the stats layout
    param_axes: Sequence[int]         # axes of x summed for dgamma / dbeta
    grouped: Optional[Tuple[int, ...]]  # the stats layout's shape when it is not x's
    gamma_view: Callable              # (b, gamma) -> gamma broadcasting against x
    centred: bool = True


def _trailing(node, x):
    a, rank = node.params["axis"], x.type.rank
    return _Layout(list(range(a, rank)), list(range(a)), None, lambda b, g: g,
                   centred=node.op == "layer_norm_grad")


def _channel(c, rank, stat_axes, grouped=None):
    return _Layout(stat_axes, [i for i in range(rank) if i != c], grouped,
                   lambda b, g: along(b, g, c, rank))


def _group(node, x):
    c = node.params["channel_axis"]
    grouped, axes = group_layout(x.shape, c, node.params["num_groups"])
    return _channel(c, x.type.rank, axes, grouped)


def _layer2d(node, x):
    return _channel(1, x.type.rank, [1])


def _batch_train(node, x):
    a, rank = node.params["axis"], x.type.rank
    return _channel(a, rank, [i for i in range(rank) if i != a])


_LAYOUTS = {"layer_norm_grad": _trailing, "rms_norm_grad": _trailing,
            "group_norm_grad": _group, "layer_norm2d_grad": _layer2d,
            "batch_norm_train_grad": _batch_train}


@lowering(*_LAYOUTS)
def _affine_norm_grad(ctx, node, *inputs):
    p, b, e = node.params, ctx.b, Ew(ctx.b)
    x, dy = inputs[0], inputs[-1]
    gamma = inputs[1] if p["has_gamma"] else None
    lay = _LAYOUTS[node.op](node, x)
    want = p["outputs"]

    def grouped(v):
        return reshape(b, v, lay.grouped) if lay.grouped else v

    got = {}
    if "dx" not in want and "dgamma" in want and node.op == "layer_norm_grad" and \
            uses_native(ctx, node, x):
        xhat = native_layer_norm(b, x, lay.stat_axes, p["eps"], None, None)
    elif "dx" in want or "dgamma" in want:
        xhat, inv = norm_stats(b, grouped(x), lay.stat_axes, p["eps"], lay.centred)
    if "dx" in want:
        sy = e.binary("mul", dy, lay.gamma_view(b, gamma)) if gamma is not None else dy
        dx = input_grad(b, grouped(sy), xhat, inv, lay.stat_axes, lay.centred)
        got["dx"] = reshape(b, dx, x.shape)
    if "dgamma" in want:
        got["dgamma"] = reduce_sum(b, e.binary("mul", dy, reshape(b, xhat, x.shape)),
                                   lay.param_axes)
    if "dbeta" in want:
        got["dbeta"] = reduce_sum(b, dy, lay.param_axes)
    return tuple(got[n] for n in want)


# -- frozen-statistics batch norm: per-channel [C] work, then one pass over x -----------
@lowering("batch_norm_grad")
def _batch_norm_grad(ctx, node, *inputs):
    """y = (x − mean)·k + β with k = γ·inv: dx = dy·k, dβ = Σdy, dmean = −k·Σdy,
    dγ = inv·Σdy·(x − mean), dvar = −½·k·inv²·Σdy·(x − mean)."""
    p, b, e = node.params, ctx.b, Ew(ctx.b)
    x, dy = inputs[0], inputs[-1]
    gamma = inputs[1] if p["has_gamma"] else None
    mean, var = inputs[-3], inputs[-2]
    ax, rank = p["axis"], x.type.rank
    red = [i for i in range(rank) if i != ax]
    want = p["outputs"]
    inv = inv_std(b, var, p["eps"])
    k = e.binary("mul", inv, gamma) if gamma is not None else inv
    got = {}
    if "dx" in want:
        got["dx"] = e.binary("mul", dy, along(b, k, ax, rank))
    if "dbeta" in want or "dmean" in want:
        s0 = got["dbeta"] = reduce_sum(b, dy, red)
        if "dmean" in want:
            got["dmean"] = e.binary("mul", s0, e.binary("mul", k, scalar_like(k, -1)))
    if "dgamma" in want or "dvar" in want:
        xc = e.binary("sub", x, along(b, mean, ax, rank))
        dg = got["dgamma"] = e.binary("mul", reduce_sum(b, e.binary("mul", dy, xc), red), inv)
        if "dvar" in want:
            half_k_inv = e.binary("mul", k, e.binary("mul", inv, scalar_like(inv, -0.5)))
            got["dvar"] = e.binary("mul", dg, half_k_inv)
    return tuple(got[n] for n in want)


# -- DiT adaLN and the gated residual ---------------------------------------------------
@lowering("ada_layer_norm_grad")
def _ada_layer_norm_grad(ctx, node, x, scale, dy):
    """y = n·(1 + scale) + shift, n = norm(x): dx = input_grad with sy = dy·(1 + scale),
    dscale = Σ dy·n, dshift = Σ dy (summed down to their broadcast shapes)."""
    p, b, e = node.params, ctx.b, Ew(ctx.b)
    last, centred = [x.type.rank - 1], p["kind"] == "layer"
    want = p["outputs"]
    got = {}
    if "dx" not in want and "dscale" in want and centred and uses_native(ctx, node, x):
        n = native_layer_norm(b, x, last, p["eps"], None, None)
    elif "dx" in want or "dscale" in want:
        n, inv = norm_stats(b, x, last, p["eps"], centred)
    if "dx" in want:
        sy = e.binary("mul", dy, e.binary("add", scale, scalar_like(scale, 1)))
        got["dx"] = input_grad(b, sy, n, inv, last, centred)
    if "dscale" in want:
        got["dscale"] = sum_to(b, e.binary("mul", dy, n), scale.shape)
    if "dshift" in want:
        got["dshift"] = sum_to(b, dy, p["shift_shape"])
    return tuple(got[n] for n in want)


@lowering("gated_residual_grad")
def _gated_residual_grad(ctx, node, y, gate, dy):
    """out = x + gate·y: d(y) = dy·gate, dgate = Σ dy·y (summed down to gate's shape)."""
    e, want = Ew(ctx.b), node.params["outputs"]
    got = {}
    if "dy" in want:
        got["dy"] = e.binary("mul", dy, gate)
    if "dgate" in want:
        got["dgate"] = sum_to(ctx.b, e.binary("mul", dy, y), gate.shape)
    return tuple(got[n] for n in want)
