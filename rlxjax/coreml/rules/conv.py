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
insertion above is exact on every target.
"""
from __future__ import annotations

import numpy as np

from ..registry import lowering
from .common import lax_pad, reshape, transpose


def _spatial_pad(b, x, config):
    """lax.pad-style (lo, hi, interior) zero padding of the spatial dims of [A, B, *S].
    A and B are merged first so that interior padding (which splits a dim) stays within
    Core ML's rank limit of 5 for 3-D convolutions."""
    a, c, *spatial = x.shape
    if all(cfg == (0, 0, 0) for cfg in config):
        return x
    flat = reshape(b, x, (a * c, *spatial))
    padded = lax_pad(b, flat, [(0, 0, 0)] + list(config), 0.0)
    return reshape(b, padded, (a, c, *padded.shape[1:]))


def _batch_groups_to_feature_groups(b, x, groups):
    n, c, *spatial = x.shape
    y = reshape(b, x, (groups, n // groups, c, *spatial))
    y = transpose(b, y, (1, 0, *range(2, y.type.rank)))
    return reshape(b, y, (n // groups, groups * c, *spatial))


def _is_const(var) -> bool:
    return var.producer is not None and var.producer.type == "const"


@lowering("conv")
def _conv(ctx, node, x, w):
    if not x.dtype.is_float:
        from .conv_int import int_conv  # (imports this module's helpers)

        return int_conv(ctx, node, x, w)
    return float_conv(ctx, node.params, x, w, ctx.out_type(node))


def float_conv(ctx, p, x, w, out_type):
    """MIL conv of float ``x``, ``w`` with RLX conv params ``p``, result type ``out_type``."""
    groups = p["feature_groups"]
    if p["batch_groups"] > 1:
        x = _batch_groups_to_feature_groups(ctx.b, x, p["batch_groups"])
        groups = p["batch_groups"]
    pads = list(p["padding"])
    if any(d > 1 for d in p["lhs_dilation"]) or any(v < 0 for lh in pads for v in lh):
        x = _spatial_pad(ctx.b, x, [(lo, hi, d - 1)
                                    for (lo, hi), d in zip(pads, p["lhs_dilation"])])
        pads = [(0, 0)] * len(pads)
    dilations = list(p["rhs_dilation"])
    if any(d > 1 for d in dilations) and not _is_const(w):
        w = _spatial_pad(ctx.b, w, [(0, 0, d - 1) for d in dilations])
        dilations = [1] * len(dilations)
    return ctx.b.op("conv", out_type, x=x, weight=w,
                    strides=np.asarray(p["strides"], np.int32), pad_type="custom",
                    pad=np.asarray([v for lh in pads for v in lh], np.int32),
                    dilations=np.asarray(dilations, np.int32), groups=np.int32(groups))

