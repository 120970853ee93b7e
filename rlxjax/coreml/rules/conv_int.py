"""Lowering: integer ``conv`` (int32, and int8 / uint8 carried as int32), exactly.

MIL's conv takes fp16 / fp32 only. Two exact ways, chosen per node:

- **fp32**, when a bound on the operands proves it exact: with |x| <= bx, |w| <= bw and
  K = C_in / groups * prod(kernel) terms per output, every product is an integer of
  magnitude <= bx * bw and every partial sum -- in whatever order or association the
  kernel adds them -- an integer of magnitude <= K * bx * bw. Integers up to 2**24 are
  fp32 values, and an fp32 product or sum whose exact result is an fp32 value is exact; so
  if K * bx * bw <= 2**24 the fp32 convolution is the integer one. The bounds come from the
  RLX values (:func:`magnitude_bound`): int8 128, uint8 255, bool 1, constants their
  largest magnitude, and a conversion from one of those keeps its bound (int8 x int8 ->
  int32 convolutions are int8 values converted to int32). int8 x int8 with K <= 1024
  (e.g. 3x3 kernels over 113 channels) qualifies.
- **int32 taps** otherwise: for each kernel tap, the strided slice of the (padded,
  dilated) input times that tap's [O, C / groups] weights as an int32 batched matmul,
  summed over taps: the same sums in int32 arithmetic, which wraps modulo 2**32 as XLA's
  does.

int8 / uint8 results are then wrapped into range by the lowering (coreml/smallint.py).
"""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from ...ir import DType, TensorType
from .common import reshape
from .conv_layout import batch_groups_to_feature_groups, spatial_pad

FP32_EXACT = 2 ** 24
_DTYPE_BOUND = {DType.i8: 128, DType.u8: 255, DType.bool: 1}


def magnitude_bound(v) -> Optional[int]:
    """A bound on |values| of the RLX value ``v``, or None if unknown."""
    if v.type.dtype in _DTYPE_BOUND:
        return _DTYPE_BOUND[v.type.dtype]
    node = v.node
    if node is None:
        return None
    if node.op == "constant":
        val = np.asarray(node.params["value"])
        return int(np.abs(val.astype(np.int64)).max()) if val.size else 0
    if node.op == "convert" and not node.inputs[0].type.dtype.is_float:
        return magnitude_bound(node.inputs[0])
    return None


def fp32_exact(node) -> bool:
    """Whether the fp32 convolution of this node's operands is provably exact."""
    bx, bw = (magnitude_bound(v) for v in node.inputs)
    if bx is None or bw is None:
        return False
    terms = int(np.prod(node.inputs[1].type.shape[1:], dtype=np.int64))
    return terms * bx * bw <= FP32_EXACT


def to_fp32(b, v):
    """An int32 MIL value as fp32 (a constant stays one)."""
    known = b.known(v)
    if known is not None:
        return b.const(np.asarray(known, np.float32))
    return b.op("cast", v.type.with_dtype(DType.f32), x=v, dtype="fp32")


def tap_conv(b, p, x, w, out_t):
    """The convolution of int32 ``x``, ``w`` (RLX conv params ``p``) as int32 per-tap
    batched matmuls, summed."""
    groups = p["feature_groups"]
    if p["batch_groups"] > 1:
        x = batch_groups_to_feature_groups(b, x, p["batch_groups"])
        groups = p["batch_groups"]
    x = spatial_pad(b, x, [(lo, hi, d - 1) for (lo, hi), d in zip(p["padding"],
                                                                   p["lhs_dilation"])])
    n, c = x.shape[:2]
    o, cg, *kernel = w.shape
    out_sp = tuple(out_t.shape[2:])
    npos = int(np.prod(out_sp, dtype=np.int64))
    og = o // groups
    # [O, C/G, *K] -> [G, O/G, C/G, prod(K)]: groups are the major part of O (as in XLA)
    wr = reshape(b, w, (groups, og, cg, int(np.prod(kernel, dtype=np.int64))))
    known_w = b.known(wr)
    acc = None
    for t, tap in enumerate(itertools.product(*[range(k) for k in kernel])):
        begin = [0, 0] + [k * d for k, d in zip(tap, p["rhs_dilation"])]
        end = [n, c] + [s + (m - 1) * st + 1 for s, m, st in zip(begin[2:], out_sp,
                                                                p["strides"])]
        xs = b.op("slice_by_index", TensorType((n, c) + out_sp, x.dtype), x=x,
                  begin=np.asarray(begin, np.int32), end=np.asarray(end, np.int32),
                  stride=np.asarray([1, 1] + list(p["strides"]), np.int32))
        xs = reshape(b, xs, (n, groups, cg, npos))
        if known_w is not None:
            wt = b.const(np.ascontiguousarray(known_w[..., t]))
        else:
            wt = b.op("slice_by_index", TensorType((groups, og, cg, 1), wr.dtype), x=wr,
                      begin=np.asarray([0, 0, 0, t], np.int32),
                      end=np.asarray([groups, og, cg, t + 1], np.int32),
                      stride=np.ones(4, np.int32))
            wt = reshape(b, wt, (groups, og, cg))
        y = b.op("matmul", TensorType((n, groups, og, npos), DType.i32), x=wt, y=xs)
        acc = y if acc is None else b.op("add", y.type, x=acc, y=y)
    return reshape(b, acc, out_t.shape)
