"""Integer ``dot_general`` and ``conv`` decomposed exactly into int32 products and sums, for
a format whose matmul / convolution is float only (Core AI: its ``native`` leaves the
integer ones here, coreai/lower.py; Core ML runs its own, coreml/rules/conv_int.py). int32
arithmetic wraps modulo 2**32 as XLA's does, so any order of the sums gives XLA's result;
int8 / uint8 operands are computed in int32 and wrapped once (``round_once``).

* ``dot_general``: the operands in (batch, free, contract) / (batch, contract, free) order,
  every product of a [B, M, K, 1] by a [B, 1, K, N] tensor and a ``reduce_sum`` over K;
* ``conv``: batch groups as feature groups, padding and lhs dilation as an explicit zero
  ``pad``, then per kernel tap the strided slice of the input times that tap's
  [O, C / groups] weights, summed over C, the taps summed.

More than ``MAX_TERMS`` products (per tap, for conv) is refused by name.
"""
from __future__ import annotations

import itertools

import numpy as np

from ...errors import JAX_NAMES, UnsupportedPrimitiveError
from ...ir import DType
from ...ir.ops import register_impl
from .policy import round_once

#: the largest products tensor an integer dot_general (a conv tap) is composed with
MAX_TERMS = 1 << 24


def _refuse(node, why):
    return UnsupportedPrimitiveError(JAX_NAMES.get(node.op, node.op), node.source, why)


def _check(node, terms):
    if any(v.type.dtype == DType.bool for v in node.inputs):
        raise _refuse(node, f"a bool {node.op} is not lowered for this format")
    if terms > MAX_TERMS:
        raise _refuse(node, f"an integer {node.op} of {terms} products (more than "
                            f"{MAX_TERMS}) is not lowered for this format: it is composed "
                            "exactly from int32 products and sums")


def _size(shape, dims):
    return int(np.prod([shape[d] for d in dims], dtype=np.int64))


@register_impl("decompose", "dot_general")
@round_once
def _dot_general(b, node, ins):
    lhs, rhs = ins
    (lc, rc), (lb, rb) = node.params["contract"], node.params["batch"]
    lf = [d for d in range(lhs.type.rank) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.type.rank) if d not in rc and d not in rb]
    nb, m, k, n = (_size(lhs.shape, lb), _size(lhs.shape, lf), _size(lhs.shape, lc),
                   _size(rhs.shape, rf))
    _check(node, nb * m * k * n)
    lhs = b.reshape(b.transpose(lhs, list(lb) + lf + list(lc)), (nb, m, k, 1))
    rhs = b.reshape(b.transpose(rhs, list(rb) + list(rc) + rf), (nb, 1, k, n))
    out = b.add("reduce_sum", b.add("mul", lhs, rhs), axes=(2,))
    return [b.reshape(out, node.outputs[0].type.shape)]


@register_impl("decompose", "conv")
@round_once
def _conv(b, node, ins):
    x, w = ins
    p, out_t = node.params, node.outputs[0].type
    groups = p["feature_groups"]
    if p["batch_groups"] > 1:  # [G, N/G, C, *S] -> [N/G, G*C, *S]
        g = groups = p["batch_groups"]
        n, c, *sp = x.shape
        x = b.transpose(b.reshape(x, (g, n // g, c, *sp)), (1, 0) + tuple(range(2, 3 + len(sp))))
        x = b.reshape(x, (n // g, g * c, *sp))
    cfg = tuple((lo, hi, d - 1) for (lo, hi), d in zip(p["padding"], p["lhs_dilation"]))
    if any(c != (0, 0, 0) for c in cfg):
        x = b.add("pad", x, b.scalar(0, x), config=((0, 0, 0), (0, 0, 0)) + cfg)
    n, c = x.shape[:2]
    o, cg, *kernel = w.shape
    out_sp = tuple(out_t.shape[2:])
    npos, og = int(np.prod(out_sp, dtype=np.int64)), o // groups
    _check(node, n * o * cg * npos)
    wr = b.reshape(w, (groups, og, cg, int(np.prod(kernel, dtype=np.int64))))
    acc = None
    for t, tap in enumerate(itertools.product(*[range(k) for k in kernel])):
        begin = (0, 0) + tuple(k * d for k, d in zip(tap, p["rhs_dilation"]))
        end = (n, c) + tuple(s + (m - 1) * st + 1 for s, m, st in zip(begin[2:], out_sp,
                                                                       p["strides"]))
        xt = b.add("slice", x, start=begin, limit=end, strides=(1, 1) + tuple(p["strides"]))
        wt = b.add("slice", wr, start=(0, 0, 0, t), limit=(groups, og, cg, t + 1),
                   strides=(1, 1, 1, 1))
        y = b.add("reduce_sum", b.add("mul", b.reshape(xt, (n, groups, 1, cg, npos)),
                                      b.reshape(wt, (1, groups, og, cg, 1))), axes=(3,))
        acc = y if acc is None else b.add("add", acc, y)
    return [b.reshape(acc, out_t.shape)]
