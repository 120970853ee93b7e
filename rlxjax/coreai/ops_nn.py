"""The fused activations and attention (rlxjax/ir/activation.py, attention.py) -> Core AI,
written out from primitive Core AI ops with the formulas of the Core ML lowering
(coreml/rules/activation.py) in fp32 (the norms: transforms/legalize/norm.py):

* ``softmax`` = ``exp(x - max) / sum``, ``log_softmax`` = ``(x - max) - log(sum)``
  (max over the axis, dims kept); their backward ops as in ir/activation.py;
* ``gelu`` exact as JAX writes it, ``0.5·x·erfc(-x·√½)`` (ops_special.py's erfc; native fp16
  values ``0.5·x·(1 + erf(x/√2))``); tanh form as JAX writes it; ``silu`` =
  ``x·sigmoid(x)``; their backward ops;
* ``attention`` = ``softmax(q·kᵀ·scale + mask)·v`` with ``batch_matmul``; its backward as
  ir/attention.py.

Core AI's own ``softmax`` / ``gelu`` / ``silu`` ops are not used: their accuracy is not
documented, the written-out forms are the ones measured (docs/coreai.md).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir import DType
from .ops_base import rule, unsupported
from .ops_special import erfc_lowers, erfc_of

F32 = DType.f32


def _t(node, i=0):
    return node.inputs[i].type


def _softmax_parts(ctx, x, axis, dt):
    m = ctx.reduce("max", x, [axis])  # no NaN handling needed: a NaN poisons exp anyway
    s = ctx.sub(x, m)
    e = ctx.ca.exp(s)
    return s, e, ctx.sum_keep(e, [axis])


@rule("softmax")
def _softmax(ctx, node, ins):
    _, e, z = _softmax_parts(ctx, ins[0], node.params["axis"], _t(node).dtype)
    return ctx.div(e, z)


@rule("log_softmax")
def _log_softmax(ctx, node, ins):
    s, _, z = _softmax_parts(ctx, ins[0], node.params["axis"], _t(node).dtype)
    return ctx.sub(s, ctx.ca.log(z))


@rule("softmax_grad")
def _softmax_grad(ctx, node, ins):
    y, dy = ins  # y·(dy − Σ dy·y)
    return ctx.mul(y, ctx.sub(dy, ctx.sum_keep(ctx.mul(dy, y), [node.params["axis"]])))


@rule("log_softmax_grad")
def _log_softmax_grad(ctx, node, ins):
    y, dy = ins  # dy − exp(y)·Σ dy
    return ctx.sub(dy, ctx.mul(ctx.ca.exp(y), ctx.sum_keep(dy, [node.params["axis"]])))


_C = math.sqrt(2.0 / math.pi)


def _half_one_plus(ctx, x, approximate, dt):
    """0.5·(1 + t): t the tanh of the approximate form, else erf(x/√2), written as JAX's
    ``0.5·erfc(-x·√½)`` (``1 + erf`` cancels for x < 0 and is 0 below -5.54; docs/coreai.md
    measures both). Native fp16 values (precision="fp16" / "mixed"), which erfc is not
    lowered for, keep ``1 + erf``."""
    c = lambda v: ctx.scalar(v, dt)  # noqa: E731
    if approximate:  # 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        inner = ctx.mul(c(_C), ctx.add(x, ctx.mul(c(0.044715), ctx.mul(ctx.mul(x, x), x))))
        t = ctx.ca.tanh(inner)
        return ctx.mul(c(0.5), ctx.add(c(1), t)), t
    if erfc_lowers(ctx, dt):
        return ctx.mul(c(0.5), erfc_of(ctx, ctx.mul(x, c(-1 / math.sqrt(2.0))), dt)), None
    return ctx.mul(c(0.5), ctx.add(c(1), ctx.ca.erf(ctx.mul(x, c(1 / math.sqrt(2.0)))))), None


@rule("gelu")
def _gelu(ctx, node, ins):
    x, dt = ins[0], _t(node).dtype
    half_1pt, _ = _half_one_plus(ctx, x, node.params["approximate"], dt)
    return ctx.mul(x, half_1pt)


@rule("gelu_grad")
def _gelu_grad(ctx, node, ins):
    x, dy = ins
    dt = _t(node).dtype
    c = lambda v: ctx.scalar(v, dt)  # noqa: E731
    half_1pt, t = _half_one_plus(ctx, x, node.params["approximate"], dt)
    if node.params["approximate"]:
        # 0.5(1+t) + 0.5·x·(1−t²)·√(2/π)·(1 + 3·0.044715·x²)
        d_inner = ctx.mul(c(_C), ctx.add(c(1), ctx.mul(c(3 * 0.044715), ctx.mul(x, x))))
        rest = ctx.mul(ctx.mul(ctx.mul(c(0.5), x), ctx.sub(c(1), ctx.mul(t, t))), d_inner)
    else:  # 0.5·erfc(-x/√2) + x·exp(−x²/2)/√(2π)
        rest = ctx.mul(x, ctx.mul(ctx.ca.exp(ctx.mul(c(-0.5), ctx.mul(x, x))),
                                  c(1 / math.sqrt(2 * math.pi))))
    return ctx.mul(dy, ctx.add(half_1pt, rest))


@rule("silu")
def _silu(ctx, node, ins):
    return ctx.mul(ins[0], ctx.ca.sigmoid(ins[0]))


@rule("silu_grad")
def _silu_grad(ctx, node, ins):
    x, dy = ins  # dy·s·(1 + x·(1 − s))
    dt = _t(node).dtype
    s = ctx.ca.sigmoid(x)
    one = ctx.scalar(1, dt)
    return ctx.mul(ctx.mul(dy, s), ctx.add(one, ctx.mul(x, ctx.sub(one, s))))


# -- attention ---------------------------------------------------------------------------
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
