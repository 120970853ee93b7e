"""Lowering: the norm family, composed from primitive MIL ops with implicit broadcasting.

MIL's native ``layer_norm`` / ``batch_norm`` / ``instance_norm`` want const gamma/beta/stats;
in a training graph they are runtime values, so every norm is written out:
``mean = reduce_mean(x)``, ``xc = x - mean``, ``var = reduce_mean(xc * xc)`` (the centred
two-pass variance: no ``E[x²] - E[x]²`` cancellation for data with a large mean),
``inv = rsqrt(var + eps)`` (eps folded in by an add, rsqrt's own epsilon set to 0), then the
affine. Reductions keep their dims so that ``[..., 1]`` statistics broadcast over ``x``.
"""
from __future__ import annotations

import numpy as np

from ...ir import TensorType
from ..registry import lowering
from .elementwise import Ew
from .shape import reshape


def _c(x, v):
    return np.asarray(v, dtype=x.dtype.np)


def reduce_mean(b, x, axes):
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return b.op("reduce_mean", TensorType(shape, x.dtype), x=x,
                axes=np.asarray(sorted(axes), np.int32), keep_dims=True)


def inv_std(b, var, eps):
    """rsqrt(var + eps) with rsqrt's own epsilon at 0 (eps is the model's, added once)."""
    e = Ew(b)
    return e.unary("rsqrt", e.binary("add", var, _c(var, eps)), epsilon=_c(var, 0))


def centred_stats(b, x, axes, eps):
    """-> (x - mean, rsqrt(var + eps), mean, var) over ``axes``, dims kept."""
    e = Ew(b)
    mean = reduce_mean(b, x, axes)
    xc = e.binary("sub", x, mean)
    var = reduce_mean(b, e.binary("mul", xc, xc), axes)
    return xc, inv_std(b, var, eps), mean, var


def normalize(b, x, axes, eps):
    xc, inv, _, _ = centred_stats(b, x, axes, eps)
    return Ew(b).binary("mul", xc, inv)


def rms_normalize(b, x, axes, eps):
    e = Ew(b)
    ms = reduce_mean(b, e.binary("mul", x, x), axes)
    return e.binary("mul", x, inv_std(b, ms, eps))


def split_affine(node, inputs, n_after=0):
    x, rest = inputs[0], list(inputs[1:])
    gamma = rest.pop(0) if node.params["has_gamma"] else None
    beta = rest.pop(0) if node.params["has_beta"] else None
    return x, gamma, beta, rest


def along(b, v, axis, rank):
    """Reshape a per-channel vector [C] so it broadcasts along ``axis`` of a rank-``rank``
    tensor (trailing size-1 dims only; leading ones come from broadcasting)."""
    return reshape(b, v, (v.shape[0],) + (1,) * (rank - 1 - axis))


def affine(b, y, gamma, beta):
    e = Ew(b)
    if gamma is not None:
        y = e.binary("mul", y, gamma)
    if beta is not None:
        y = e.binary("add", y, beta)
    return y


@lowering("layer_norm")
def _layer_norm(ctx, node, *inputs):
    x, gamma, beta, _ = split_affine(node, inputs)
    axes = range(node.params["axis"], x.type.rank)
    return affine(ctx.b, normalize(ctx.b, x, list(axes), node.params["eps"]), gamma, beta)


@lowering("rms_norm")
def _rms_norm(ctx, node, *inputs):
    x, gamma, beta, _ = split_affine(node, inputs)
    axes = range(node.params["axis"], x.type.rank)
    return affine(ctx.b, rms_normalize(ctx.b, x, list(axes), node.params["eps"]), gamma, beta)


def group_layout(shape, c, groups):
    """Grouped shape of x and the axes that hold one group's elements.

    NCHW-like (c == 1): [N, G, C/G·H·W], one last-axis reduction. Otherwise
    [N, P, G, C/G, Q] with P, Q the products of the dims before and after the channel
    axis (Q dropped when the channels are last, as in flax's layout)."""
    n, ch = shape[0], shape[c]
    p = int(np.prod(shape[1:c], dtype=np.int64))
    q = int(np.prod(shape[c + 1:], dtype=np.int64))
    if c == 1:
        return (n, groups, (ch // groups) * q), [2]
    if c == len(shape) - 1:
        return (n, p, groups, ch // groups), [1, 3]
    return (n, p, groups, ch // groups, q), [1, 3, 4]


@lowering("group_norm")
def _group_norm(ctx, node, *inputs):
    x, gamma, beta, _ = split_affine(node, inputs)
    p, b = node.params, ctx.b
    c, rank = p["channel_axis"], x.type.rank
    grouped, axes = group_layout(x.shape, c, p["num_groups"])
    y = reshape(b, normalize(b, reshape(b, x, grouped), axes, p["eps"]), x.shape)
    gamma = along(b, gamma, c, rank) if gamma is not None else None
    beta = along(b, beta, c, rank) if beta is not None else None
    return affine(b, y, gamma, beta)


@lowering("batch_norm")
def _batch_norm(ctx, node, *inputs):
    x, gamma, beta, (mean, var) = split_affine(node, inputs, 2)
    p, b, e = node.params, ctx.b, Ew(ctx.b)
    ax, rank = p["axis"], x.type.rank
    # Per-channel work first ([C] vectors), then one sub, one mul, one add over x.
    scale = inv_std(b, var, p["eps"])
    if gamma is not None:
        scale = e.binary("mul", scale, gamma)
    y = e.binary("mul", e.binary("sub", x, along(b, mean, ax, rank)), along(b, scale, ax, rank))
    return affine(b, y, None, along(b, beta, ax, rank) if beta is not None else None)


@lowering("batch_norm_train")
def _batch_norm_train(ctx, node, *inputs):
    x, gamma, beta, (rmean, rvar) = split_affine(node, inputs, 2)
    p, b, e = node.params, ctx.b, Ew(ctx.b)
    ax, rank = p["axis"], x.type.rank
    axes = [i for i in range(rank) if i != ax]
    xc, inv, mean, var = centred_stats(b, x, axes, p["eps"])
    y = e.binary("mul", xc, inv)
    g = along(b, gamma, ax, rank) if gamma is not None else None
    bt = along(b, beta, ax, rank) if beta is not None else None
    y = affine(b, y, g, bt)
    m = p["momentum"]

    def update(running, stat):
        stat = reshape(b, stat, running.shape)
        return e.binary("add", e.binary("mul", running, _c(running, m)),
                        e.binary("mul", stat, _c(running, 1.0 - m)))

    return y, update(rmean, mean), update(rvar, var)


@lowering("layer_norm2d")
def _layer_norm2d(ctx, node, *inputs):
    x, gamma, beta, _ = split_affine(node, inputs)
    b, rank = ctx.b, x.type.rank
    y = normalize(b, x, [1], node.params["eps"])
    gamma = along(b, gamma, 1, rank) if gamma is not None else None
    beta = along(b, beta, 1, rank) if beta is not None else None
    return affine(b, y, gamma, beta)


@lowering("ada_layer_norm")
def _ada_layer_norm(ctx, node, x, scale, shift):
    p, b, e = node.params, ctx.b, Ew(ctx.b)
    last = [x.type.rank - 1]
    n = (normalize if p["kind"] == "layer" else rms_normalize)(b, x, last, p["eps"])
    one_plus = e.binary("add", scale, _c(scale, 1))  # on the (small) scale tensor
    return e.binary("add", e.binary("mul", n, one_plus), shift)


@lowering("gated_residual")
def _gated_residual(ctx, node, x, y, gate):
    e = Ew(ctx.b)
    return e.binary("add", x, e.binary("mul", gate, y))
