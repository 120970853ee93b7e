"""``attention`` and its backward (rlxjax/ir/attention.py) -> Core AI, written out from
primitive Core AI ops in fp32: ``softmax(q·kᵀ·scale + mask)·v`` with ``batch_matmul``; its
backward as ir/attention.py. (The activations and the norms are decomposed in the RLX graph
before the rules run: rlxjax/transforms/legalize/activation.py, norm.py.)

Core AI's own ``softmax`` is not used: its accuracy is not documented, the written-out form
is the one measured (docs/coreai.md).
"""
from __future__ import annotations

import numpy as np

from ..ir import DType
from .ops_base import rule, unsupported

F32 = DType.f32


def _t(node, i=0):
    return node.inputs[i].type


def _bmm(ctx, a, b, a_shape, b_shape, transpose_b=False, transpose_a=False):
    """a @ b over the leading dims (flattened to one batch), optional transposes."""
    lead = a_shape[:-2]
    nb = int(np.prod(lead, dtype=np.int64))
    r = len(a_shape)
    if transpose_a:
        a = ctx.transpose(a, list(range(r - 2)) + [r - 1, r - 2])
        a_shape = tuple(lead) + (a_shape[-1], a_shape[-2])
    if transpose_b:
        b = ctx.transpose(b, list(range(r - 2)) + [r - 1, r - 2])
        b_shape = tuple(lead) + (b_shape[-1], b_shape[-2])
    out = ctx.matmul(ctx.reshape(a, (nb,) + tuple(a_shape[-2:])),
                     ctx.reshape(b, (nb,) + tuple(b_shape[-2:])))
    return ctx.reshape(out, tuple(lead) + (a_shape[-2], b_shape[-1]))


def _probabilities(ctx, node, ins):
    q, k = ins[0], ins[1]
    qs, ks = _t(node, 0).shape, _t(node, 1).shape
    s = ctx.mul(_bmm(ctx, q, k, qs, ks, transpose_b=True), ctx.scalar(node.params["scale"], F32))
    if _bool_mask(node):  # left-out scores: the lowest float, so a row with no True is
        # uniform (the op's value, as JAX's where gives); coreml/rules/attention.py
        s = ctx.where(ins[3], s, ctx.scalar(np.finfo(np.float32).min, F32))
    elif node.params["has_mask"]:
        s = ctx.add(s, ins[3])
    axis = len(qs) - 1
    m = ctx.reduce("max", s, [axis])
    e = ctx.ca.exp(ctx.sub(s, m))
    return ctx.div(e, ctx.sum_keep(e, [axis])), tuple(qs[:-1]) + (ks[-2],)


def _bool_mask(node) -> bool:
    return node.params["has_mask"] and node.inputs[3].type.dtype == DType.bool


@rule("attention")
def _attention(ctx, node, ins):
    if _t(node).dtype != F32:
        raise unsupported(node, "fp16 attention is not lowered for Core AI yet")
    pr, ps = _probabilities(ctx, node, ins)
    return _bmm(ctx, pr, ins[2], ps, _t(node, 2).shape)


@rule("attention_grad")
def _attention_grad(ctx, node, ins):
    if _t(node).dtype != F32:
        raise unsupported(node, "fp16 attention is not lowered for Core AI yet")
    q, k, v, dout = ins[0], ins[1], ins[2], ins[-1]
    qs, ks, vs = _t(node, 0).shape, _t(node, 1).shape, _t(node, 2).shape
    ds_shape = _t(node, len(ins) - 1).shape
    pr, ps = _probabilities(ctx, node, ins)
    scale = ctx.scalar(node.params["scale"], F32)
    dp = _bmm(ctx, dout, v, ds_shape, vs, transpose_b=True)
    dsc = ctx.mul(pr, ctx.sub(dp, ctx.sum_keep(ctx.mul(dp, pr), [len(qs) - 1])))
    if _bool_mask(node):  # no gradient reaches a left-out score (as through where)
        dsc = ctx.where(ins[3], dsc, ctx.scalar(0.0, F32))
    got = {}
    want = node.params["outputs"]
    if "dv" in want:
        got["dv"] = _bmm(ctx, pr, dout, ps, ds_shape, transpose_a=True)
    if "dq" in want:
        got["dq"] = ctx.mul(_bmm(ctx, dsc, k, ps, ks), scale)
    if "dk" in want:
        got["dk"] = ctx.mul(_bmm(ctx, dsc, q, ps, qs, transpose_a=True), scale)
    if "dmask" in want:
        mshape = _t(node, 3).shape
        lead = len(ps) - len(mshape)
        axes = list(range(lead)) + [lead + i for i, d in enumerate(mshape)
                                    if d == 1 and ps[lead + i] != 1]
        got["dmask"] = ctx.reduce("sum", dsc, axes, mshape) if axes else dsc
    return [got[g] for g in want]
