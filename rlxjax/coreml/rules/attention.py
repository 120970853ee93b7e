"""Lowering: fused attention (rlxjax/ir/attention.py).

From iOS18 the forward is MIL ``scaled_dot_product_attention``, which scales by a fixed
1/sqrt(E): a different scale is folded into q first (``q·(scale·sqrt(E))``, one mul of
q, the same function). Before iOS18 it is written out: matmul, scale, mask, softmax,
matmul. The backward recomputes the probabilities ``P`` from q, k and the mask:

    dv = Pᵀ·dout,  dP = dout·vᵀ,  dS = P·(dP − Σ_S dP·P)
    dq = dS·k·scale,  dk = dSᵀ·q·scale,  dmask = dS summed to the mask's shape

A bool mask goes to SDPA as it is (False -> -inf there, so a row with no True is NaN):
such rows are replaced by the mean of v over S, the op's value for them, by a select on
"the row has a True" (a constant mask with a True in every row needs none). Written out,
the left-out scores become the dtype's lowest float, below any fill the recogniser
accepted, so their weight is 0 and a row with no True is uniform, as in JAX; the backward
zeroes dS where the mask is False (no gradient reaches a left-out score, as through
``where``).
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import DType, TensorType
from ..registry import lowering
from .common import Ew, scalar_like
from .norm_grad import sum_to


_MIL_FLOAT = {DType.f32: "fp32", DType.f16: "fp16"}


def _matmul(b, x, y, tx=False, ty=False):
    xs = list(x.shape)
    ys = list(y.shape)
    if tx:
        xs[-2], xs[-1] = xs[-1], xs[-2]
    if ty:
        ys[-2], ys[-1] = ys[-1], ys[-2]
    shape = tuple(xs[:-1]) + (ys[-1],)
    return b.op("matmul", TensorType(shape, x.dtype), x=x, y=y, transpose_x=tx, transpose_y=ty)


def _split(node, inputs):
    q, k, v = inputs[:3]
    mask = inputs[3] if node.params["has_mask"] else None
    return q, k, v, mask, list(inputs[3 + int(node.params["has_mask"]):])


def _is_bool(mask) -> bool:
    return mask is not None and mask.dtype == DType.bool


def probabilities(b, q, k, mask, scale):
    """softmax(q·kᵀ·scale + mask) over the last axis (a bool mask: module docstring)."""
    e = Ew(b)
    s = e.binary("mul", _matmul(b, q, k, ty=True), scalar_like(q, scale))
    if _is_bool(mask):
        s = e.select(mask, s, scalar_like(q, np.finfo(q.dtype.np).min))
    elif mask is not None:
        s = e.binary("add", s, mask)
    return b.op("softmax", s.type, x=s, axis=np.int32(-1))


def _empty_rows_to_mean(b, out, mask, v):
    """``out`` with each row whose bool mask has no True replaced by mean_S(v)."""
    e = Ew(b)
    known = b.known(mask)
    if known is not None:  # a constant: its rows are known (no reduction of a const)
        has = np.asarray(known).any(axis=-1, keepdims=True)
        if has.all():
            return out
        has = b.const(has)
    else:
        m = b.op("cast", mask.type.with_dtype(v.dtype), x=mask, dtype=_MIL_FLOAT[v.dtype])
        red = tuple(mask.shape[:-1]) + (1,)
        has = e.compare("greater", b.op("reduce_max", TensorType(red, v.dtype), x=m,
                                        axes=np.asarray([-1], np.int32), keep_dims=True),
                        scalar_like(v, 0))
    kv = b.known(v)
    mean = (b.const(np.mean(kv, axis=-2, keepdims=True, dtype=np.float64).astype(kv.dtype))
            if kv is not None else
            b.op("reduce_mean", TensorType(tuple(v.shape[:-2]) + (1, v.shape[-1]), v.dtype),
                 x=v, axes=np.asarray([-2], np.int32), keep_dims=True))
    return e.select(has, out, mean)


def _sdpa_scale_matches(scale, depth, dtype) -> bool:
    want = 1.0 / math.sqrt(depth)
    return abs(scale - want) <= float(np.spacing(np.asarray(want, dtype.np)))


@lowering("attention")
def _attention(ctx, node, *inputs):
    q, k, v, mask, _ = _split(node, inputs)
    b, scale = ctx.b, node.params["scale"]
    if not ctx.target.at_least("iOS18"):
        return _matmul(b, probabilities(b, q, k, mask, scale), v)
    if not _sdpa_scale_matches(scale, q.shape[-1], q.dtype):
        q = Ew(b).binary("mul", q, scalar_like(q, scale * math.sqrt(q.shape[-1])))
    out = b.op("scaled_dot_product_attention", ctx.out_type(node), query=q, key=k, value=v,
               attn_mask=mask)
    return _empty_rows_to_mean(b, out, mask, v) if _is_bool(mask) else out


@lowering("attention_grad")
def _attention_grad(ctx, node, *inputs):
    q, k, v, mask, (dout,) = _split(node, inputs)
    b, e, scale = ctx.b, Ew(ctx.b), node.params["scale"]
    want = node.params["outputs"]
    p = probabilities(b, q, k, mask, scale)
    res = {}
    if "dv" in want:
        res["dv"] = _matmul(b, p, dout, tx=True)
    if {"dq", "dk", "dmask"} & set(want):
        dp = _matmul(b, dout, v, ty=True)
        red = p.shape[:-1] + (1,)
        row = b.op("reduce_sum", TensorType(red, p.dtype), x=e.binary("mul", dp, p),
                   axes=np.asarray([-1], np.int32), keep_dims=True)
        ds = e.binary("mul", p, e.binary("sub", dp, row))
        if _is_bool(mask):
            ds = e.select(mask, ds, scalar_like(ds, 0))
        if "dmask" in want:
            res["dmask"] = sum_to(b, ds, mask.shape)
        if "dq" in want or "dk" in want:
            dss = e.binary("mul", ds, scalar_like(ds, scale))
            if "dq" in want:
                res["dq"] = _matmul(b, dss, k)
            if "dk" in want:
                res["dk"] = _matmul(b, dss, q, tx=True)
    return tuple(res[g] for g in want)
