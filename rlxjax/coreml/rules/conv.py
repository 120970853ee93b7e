"""Lowering: RLX ``conv`` (canonical [N, C, *S] x [O, I, *K]) -> MIL ``conv``.

MIL's conv (every target since iOS15) takes a runtime weight, which training needs, but
  - it has no lhs dilation (transposed convolution) and no negative padding: both become
    an explicit zero ``pad`` of the input (interior padding = lhs_dilation - 1, negative
    widths crop), followed by a conv without padding;
  - its ``dilations`` need a const weight (coremltools' type inference rejects them
    otherwise): a runtime weight is dilated explicitly instead, by inserting
    rhs_dilation - 1 zeros between its taps, which gives exactly the same sums;
  - it has no batch groups: batch_groups = G is rewritten into G feature groups by moving
    the G batch slices into the channel dim ([G, N/G, C] -> [N/G, G*C]).
MIL ``conv_transpose`` is not used: its weight must be const before iOS17, and the zero
insertion above is exact on every target. Integer convolutions (MIL's conv takes floats
only) go through fp32 where that is provably exact, else int32 matmuls: conv_int.py.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, TensorType
from ..registry import lowering
from .common import pad_edges, reshape
from .conv_int import fp32_exact, tap_conv, to_fp32
from .conv_layout import batch_groups_to_feature_groups, spatial_pad


def _is_const(var) -> bool:
    return var.producer is not None and var.producer.type == "const"


@lowering("conv")
def _conv(ctx, node, x, w):
    if x.dtype.is_float:
        return float_conv(ctx, node.params, x, w, ctx.out_type(node))
    # integers (conv_int.py): in fp32 where that is provably exact, else int32 taps
    out_t = ctx.out_type(node)
    if not fp32_exact(node):
        return tap_conv(ctx.b, node.params, x, w, out_t)
    xf, wf = to_fp32(ctx.b, x), to_fp32(ctx.b, w)
    y = float_conv(ctx, node.params, xf, wf, out_t.with_dtype(DType.f32))
    return ctx.b.op("cast", out_t, x=y, dtype="int32")


def float_conv(ctx, p, x, w, out_type):
    """MIL conv of float ``x``, ``w`` with RLX conv params ``p``, result type ``out_type``.
    The edge padding is conv's own (a negative edge a slice of ``x``); lhs dilation (a
    strided conv's input gradient) is one pad of the interior zeros, whose trailing ones
    count against the high edge."""
    groups = p["feature_groups"]
    if p["batch_groups"] > 1:
        x = batch_groups_to_feature_groups(ctx.b, x, p["batch_groups"])
        groups = p["batch_groups"]
    pads = [tuple(lh) for lh in p["padding"]]
    lhs = list(p["lhs_dilation"])
    if any(d > 1 for d in lhs):
        if 1 + 2 * len(lhs) <= 5:  # each x followed by d - 1 zeros: one pad (Core ML rank 5)
            x = _dilate(ctx.b, x, lhs)
            pads = [(lo, hi - (d - 1)) for (lo, hi), d in zip(pads, lhs)]
        else:
            x = spatial_pad(ctx.b, x, [(0, 0, d - 1) for d in lhs])
    if any(v < 0 for lh in pads for v in lh):  # negative edges crop: one slice
        x = _crop(ctx.b, x, pads)
        pads = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    dilations = list(p["rhs_dilation"])
    if any(d > 1 for d in dilations) and not _is_const(w):
        w = spatial_pad(ctx.b, w, [(0, 0, d - 1) for d in dilations])
        dilations = [1] * len(dilations)
    return ctx.b.op("conv", out_type, x=x, weight=w,
                    strides=np.asarray(p["strides"], np.int32), pad_type="custom",
                    pad=np.asarray([v for lh in pads for v in lh], np.int32),
                    dilations=np.asarray(dilations, np.int32), groups=np.int32(groups))


def _dilate(b, x, dilation):
    """[N, C, *S] with each element followed by d - 1 zeros along each spatial axis
    ([N*C, S1, 1, S2, 1] padded to [N*C, S1, d1, S2, d2]): lax's interior padding plus
    d - 1 trailing zeros per axis, in one pad."""
    n, c, *spatial = x.shape
    split = [n * c] + [v for s in spatial for v in (s, 1)]
    y = pad_edges(b, reshape(b, x, tuple(split)),
                  [(0, 0)] + [v for d in dilation for v in ((0, 0), (0, d - 1))], 0.0)
    return reshape(b, y, (n, c, *(s * d for s, d in zip(spatial, dilation))))


def _crop(b, x, pads):
    """``x`` [N, C, *S] without the negative edges of ``pads`` (one slice)."""
    begin = [0, 0] + [max(-lo, 0) for lo, _ in pads]
    end = list(x.shape[:2]) + [s - max(-hi, 0) for s, (_, hi) in zip(x.shape[2:], pads)]
    shape = tuple(e - a for a, e in zip(begin, end))
    return b.op("slice_by_index", TensorType(shape, x.dtype), x=x,
                begin=np.asarray(begin, np.int32), end=np.asarray(end, np.int32),
                stride=np.ones(x.type.rank, np.int32))
