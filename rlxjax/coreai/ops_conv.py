"""RLX ``conv`` -> Core AI's ``conv2d`` / ``conv3d`` (1-D as 2-D with a unit height):
padding, negative padding and lhs dilation become an explicit zero ``lax.pad`` of the
input, batch groups become feature groups ([G, N/G, C] -> [N/G, G·C]). (The pool family is
decomposed in the RLX graph before the rules run: rlxjax/transforms/legalize/pool.py.)
"""
from __future__ import annotations

import numpy as np

from ..ir import DType
from .ops_base import rule, unsupported
from .ops_shape import lax_pad


def conv_layout(ctx, node, x, dt):
    """The conv's input with batch groups as feature groups and its padding and lhs
    dilation as an explicit zero ``lax.pad`` -> (x, its shape, feature groups)."""
    p, xt = node.params, node.inputs[0].type
    groups = p["feature_groups"]
    xs = list(xt.shape)
    if p["batch_groups"] > 1:  # [G, N/G, C, *S] -> [N/G, G*C, *S]
        g = p["batch_groups"]
        n, c, sp = xs[0], xs[1], xs[2:]
        x = ctx.reshape(x, [g, n // g, c] + sp)
        x = ctx.transpose(x, [1, 0] + list(range(2, 3 + len(sp))))
        xs = [n // g, g * c] + sp
        x = ctx.reshape(x, xs)
        groups = g
    cfg = [(lo, hi, d - 1) for (lo, hi), d in zip(p["padding"], p["lhs_dilation"])]
    if any(c != (0, 0, 0) for c in cfg):  # explicit zero padding of the spatial dims
        x = lax_pad(ctx, x, xs, [(0, 0, 0), (0, 0, 0)] + cfg, ctx.scalar(0, dt), dt)
        xs = list(ctx.shape(x))
    return x, xs, groups


@rule("conv")
def _conv(ctx, node, ins):
    x, w = ins
    p = node.params
    xt, wt, out_t = node.inputs[0].type, node.inputs[1].type, node.outputs[0].type
    # fp16 values: in their fp32 carriers, rounded once (as XLA:CPU); not in Core AI fp16
    if xt.dtype != DType.f32 and not (xt.dtype == DType.f16 and not ctx.native_f16):
        raise unsupported(node, f"{xt.dtype} convolutions are not lowered for Core AI yet")
    nsp = xt.rank - 2
    if nsp not in (1, 2, 3):
        raise unsupported(node, f"{nsp}-d convolutions are not lowered for Core AI")
    x, xs, groups = conv_layout(ctx, node, x, DType.f32)
    strides, dil, ws = list(p["strides"]), list(p["rhs_dilation"]), list(wt.shape)
    if nsp == 1:  # as 2-D with a unit height
        x, w = ctx.reshape(x, xs[:2] + [1] + xs[2:]), ctx.reshape(w, ws[:2] + [1] + ws[2:])
        strides, dil = [1] + strides, [1] + dil
    conv = ctx.ca.conv3d if nsp == 3 else ctx.ca.conv2d
    y = conv(x, w, ctx.u32(strides), ctx.u32(dil), ctx.const(np.uint32(groups)))
    return ctx.reshape(y, out_t.shape) if nsp == 1 else y
