"""Lowering: the norm family, composed from primitive MIL ops with implicit broadcasting.

``layer_norm`` (and ada_layer_norm's layer kind) in fp32 is MIL's own ``layer_norm`` (with gamma/beta inside when they are
constants, applied after it when they are runtime values: MIL wants them const), except
where a backward op computing dx recomputes its statistics (``uses_native``). The other
norms, and every norm in fp16, are written out:
``mean = reduce_mean(x)``, ``xc = x - mean``, ``var = reduce_mean(xc * xc)`` (the centred
two-pass variance: no ``E[x²] - E[x]²`` cancellation for data with a large mean),
``inv = rsqrt(var + eps)`` (eps folded in by an add, rsqrt's own epsilon set to 0), then the
affine. Reductions keep their dims so that ``[..., 1]`` statistics broadcast over ``x``.

In fp16 (``precision="fp16"``) ``mean(xc²)`` overflows as soon as |x − mean| exceeds ~256
(65504 is fp16's largest value), which ordinary activations do. There the statistics are
computed at a scale ``t = max(max|xc|, sqrt(eps))`` (one extra reduce_max per group):
``z = xc / t`` lies in [-1, 1], ``m = mean(z²)`` in [1/n, 1] (or [0, 1] when t = sqrt(eps)),
and ``x̂ = z · rsqrt(m + (sqrt(eps)/t)²)``, algebraically the same value with no
intermediate above 1 (and none below ~1/n that matters: ``(sqrt(eps)/t)²`` may underflow
only when it is negligible next to ``m``). ``inv = rsqrt(var + eps)`` is then kept as the
pair (s, t) and applied as ``v / t · s`` so that neither it nor a product overflows. fp32
keeps the plain two-pass form (its squares overflow only beyond |x − mean| ≈ 1.8e19).
See docs/numerics.md for the error bounds.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, TensorType
from ...ir.norm import group_layout
from ..registry import lowering
from .common import Ew, graphs, reshape, scalar_like


def reduce_mean(b, x, axes):
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return b.op("reduce_mean", TensorType(shape, x.dtype), x=x,
                axes=np.asarray(sorted(axes), np.int32), keep_dims=True)


def inv_std(b, var, eps):
    """rsqrt(var + eps) with rsqrt's own epsilon at 0 (eps is the model's, added once)."""
    e = Ew(b)
    return e.unary("rsqrt", e.binary("add", var, scalar_like(var, eps)),
                   epsilon=scalar_like(var, 0))


class InvStd:
    """``rsqrt(var + eps)`` (dims kept): the var ``s`` itself, or in fp16 ``s / t`` with ``t``
    the scale the statistics were computed at (see the module docstring)."""

    def __init__(self, s, t=None):
        self.s, self.t = s, t

    def apply(self, b, v):
        """``v · rsqrt(var + eps)`` without overflowing intermediates."""
        e = Ew(b)
        if self.t is None:
            return e.binary("mul", v, self.s)
        return e.binary("mul", e.binary("real_div", v, self.t), self.s)


def moments(b, x, axes, eps, centred=True):
    """Normalisation statistics over ``axes`` (dims kept) -> ``(x̂, inv, mean, var)``:
    ``x̂ = (x − mean)·inv`` (``x·inv`` when not centred; mean is then None), ``inv`` an
    :class:`InvStd`, ``var`` a thunk building the variance (only the training batch norm
    needs it, so no dead op is emitted otherwise)."""
    e = Ew(b)
    mean = reduce_mean(b, x, axes) if centred else None
    xc = e.binary("sub", x, mean) if centred else x
    if x.dtype != DType.f16:
        var = reduce_mean(b, e.binary("mul", xc, xc), axes)
        inv = InvStd(inv_std(b, var, eps))
        return inv.apply(b, xc), inv, mean, lambda: var
    shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    amax = b.op("reduce_max", TensorType(shape, x.dtype), x=e.unary("abs", xc),
                axes=np.asarray(sorted(axes), np.int32), keep_dims=True)
    root_eps = float(np.sqrt(eps))
    t = e.binary("maximum", amax, scalar_like(amax, root_eps))
    z = e.binary("real_div", xc, t)
    m = reduce_mean(b, e.binary("mul", z, z), axes)
    r = e.binary("real_div", scalar_like(t, root_eps), t)
    s = e.unary("rsqrt", e.binary("add", m, e.binary("mul", r, r)), epsilon=scalar_like(m, 0))
    return e.binary("mul", z, s), InvStd(s, t), mean, \
        lambda: e.binary("mul", e.binary("mul", m, t), t)


def centred_stats(b, x, axes, eps):
    """-> (x̂, inv, mean, var thunk) over ``axes``, dims kept (see :func:`moments`)."""
    return moments(b, x, axes, eps, centred=True)


def normalize(b, x, axes, eps):
    return moments(b, x, axes, eps, centred=True)[0]


def rms_normalize(b, x, axes, eps):
    return moments(b, x, axes, eps, centred=False)[0]


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


#: the backward ops whose lowering (rules/norm_grad.py) recomputes the statistics of a
#: layer norm that could be MIL's ``layer_norm`` when it computes dx
RECOMPUTE_STATS = ("layer_norm_grad", "ada_layer_norm_grad")


def stats_recomputed(ctx) -> frozenset:
    """An analysis (``ctx.analysis``): ids of the values a backward op computing dx
    recomputes layer-norm statistics of. Without dx only x̂ is needed: native."""
    return frozenset(n.inputs[0].id for g in graphs(ctx.graph) for n in g.nodes
                     if n.op in RECOMPUTE_STATS and "dx" in n.params["outputs"])


def uses_native(ctx, node, x):
    """Whether the layer norm of ``node`` (forward or backward; x its first input, lowered
    to ``x``) is MIL's ``layer_norm``: in fp32, unless a backward op computing dx
    recomputes the statistics of the same x (:func:`stats_recomputed`): written out, the
    forward's statistics are shared with it by MIL CSE. A backward that needs no dx (x is
    data, not differentiated) uses only x̂ = ``layer_norm(x)``, which MIL CSE then shares
    with the forward's."""
    return x.dtype == DType.f32 and node.inputs[0].id not in ctx.analysis(stats_recomputed)


@lowering("layer_norm")
def _layer_norm(ctx, node, *inputs):
    x, gamma, beta, _ = split_affine(node, inputs)
    axes = range(node.params["axis"], x.type.rank)
    if uses_native(ctx, node, x):
        return native_layer_norm(ctx.b, x, list(axes), node.params["eps"], gamma, beta)
    return affine(ctx.b, normalize(ctx.b, x, list(axes), node.params["eps"]), gamma, beta)


def native_layer_norm(b, x, axes, eps, gamma, beta):
    """fp32: MIL's own ``layer_norm`` (the same centred, biased statistics). Its gamma/beta
    must be constants: constant ones (an inference export's weights) go inside the op,
    runtime ones (a training graph's parameters) are applied after it. Not where a backward
op recomputes the statistics of the same x: written out, the forward's statistics are
shared with it by MIL CSE, one op fewer than the native op next to the backward's."""
    g, bt = (b.known(t) if t is not None else None for t in (gamma, beta))
    inside = (gamma is None or g is not None) and (beta is None or bt is not None)
    y = b.op("layer_norm", TensorType(x.shape, x.dtype), x=x,
             axes=np.asarray(sorted(axes), np.int32), epsilon=scalar_like(x, eps),
             gamma=g if inside else None, beta=bt if inside else None)
    return y if inside else affine(b, y, gamma, beta)


@lowering("rms_norm")
def _rms_norm(ctx, node, *inputs):
    x, gamma, beta, _ = split_affine(node, inputs)
    axes = range(node.params["axis"], x.type.rank)
    return affine(ctx.b, rms_normalize(ctx.b, x, list(axes), node.params["eps"]), gamma, beta)


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
    native = native_batch_norm(b, x, ax, p["eps"], mean, var, gamma, beta)
    if native is not None:
        return native
    # Per-channel work first ([C] vectors), then one sub, one mul, one add over x.
    scale = inv_std(b, var, p["eps"])
    if gamma is not None:
        scale = e.binary("mul", scale, gamma)
    y = e.binary("mul", e.binary("sub", x, along(b, mean, ax, rank)), along(b, scale, ax, rank))
    return affine(b, y, None, along(b, beta, ax, rank) if beta is not None else None)


def native_batch_norm(b, x, axis, eps, mean, var, gamma, beta):
    """MIL's own ``batch_norm`` (one op for the written-out form's six or seven) when its
    statistics and affine are known constants of x's dtype (an inference export's) and x
    is laid out as it wants: ``[n, C, *D]`` of rank 3-5 (channel axis 1, NCHW). None
    otherwise: channel-last x (flax's NHWC) would need a transpose on each side, not worth
    it; runtime statistics cannot go in (MIL wants them const)."""
    if axis != 1 or not 3 <= x.type.rank <= 5 or x.dtype not in (DType.f16, DType.f32):
        return None
    given = {"mean": mean, "variance": var, "gamma": gamma, "beta": beta}
    vals = {k: b.known(v) for k, v in given.items() if v is not None}
    if any(v is None or np.asarray(v).dtype != x.dtype.np for v in vals.values()):
        return None
    return b.op("batch_norm", TensorType(x.shape, x.dtype), x=x,
                **{k: b.const(np.reshape(v, (-1,))) for k, v in vals.items()},
                epsilon=scalar_like(x, eps))


@lowering("batch_norm_train")
def _batch_norm_train(ctx, node, *inputs):
    x, gamma, beta, (rmean, rvar) = split_affine(node, inputs, 2)
    p, b, e = node.params, ctx.b, Ew(ctx.b)
    ax, rank = p["axis"], x.type.rank
    axes = [i for i in range(rank) if i != ax]
    y, _, mean, var = centred_stats(b, x, axes, p["eps"])
    var = var()
    g = along(b, gamma, ax, rank) if gamma is not None else None
    bt = along(b, beta, ax, rank) if beta is not None else None
    y = affine(b, y, g, bt)
    m = p["momentum"]

    def update(running, stat):
        stat = reshape(b, stat, running.shape)
        return e.binary("add", e.binary("mul", running, scalar_like(running, m)),
                        e.binary("mul", stat, scalar_like(running, 1.0 - m)))

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
    if p["kind"] == "layer" and uses_native(ctx, node, x):
        n = native_layer_norm(b, x, last, p["eps"], None, None)
    else:
        n = (normalize if p["kind"] == "layer" else rms_normalize)(b, x, last, p["eps"])
    one_plus = e.binary("add", scale, scalar_like(scale, 1))  # on the (small) scale tensor
    return e.binary("add", e.binary("mul", n, one_plus), shift)


@lowering("gated_residual")
def _gated_residual(ctx, node, x, y, gate):
    e = Ew(ctx.b)
    return e.binary("add", x, e.binary("mul", gate, y))
