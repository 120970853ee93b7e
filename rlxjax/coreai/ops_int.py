"""Integer ``dot_general`` -> Core AI, exactly, in int32 arithmetic that wraps
modulo 2**32 as XLA's does (int8 / uint8 carried as int32 and wrapped by ops_base.py).

- ``dot_general`` (int): the operands in (batch, free, contract) / (batch, contract,
  free) order as for floats (ops_shape.py), then every product of a [B, M, K, 1] by a
  [B, 1, K, N] tensor and a ``reduce_sum`` over K: int32 multiplies and adds, no fp32
  matmul (whose products and sums are exact only below 2**24). The products tensor has
  B·M·K·N entries: more than ``MAX_TERMS`` is refused by name;

- ``conv`` (int32, int8 / uint8): per kernel tap, the strided slice of the padded input
  times that tap's [O, C / groups] weights as int32 products summed over C, the taps
  summed (the Core ML lowering's int32 tap scheme, coreml/rules/conv_int.py, with
  products and ``reduce_sum`` for its int32 matmul). Refused past ``MAX_TERMS`` products
  per tap, as dot_general.

(An integer ``pow`` does not reach the lowering: ``lax.pow`` takes float bases only, and
``jnp.power`` of integers is JAX's own square-and-multiply of lax ops.)
"""
from __future__ import annotations

import itertools

import numpy as np

from ..ir import DType
from .ops_base import RULES, rule, unsupported

I32 = DType.i32
#: the largest B·M·K·N products tensor an integer dot_general is composed with
MAX_TERMS = 1 << 24


def int_dot_general(ctx, node, ins):
    """An integer ``dot_general`` (both operands integers)."""
    lhs, rhs = ins
    (lc, rc), (lb, rb) = node.params["contract"], node.params["batch"]
    lt, rt = node.inputs[0].type, node.inputs[1].type
    lf = [d for d in range(lt.rank) if d not in lc and d not in lb]
    rf = [d for d in range(rt.rank) if d not in rc and d not in rb]
    size = lambda t, ds: int(np.prod([t.shape[d] for d in ds], dtype=np.int64))  # noqa: E731
    nb, m, k, n = size(lt, lb), size(lt, lf), size(lt, lc), size(rt, rf)
    if nb * m * k * n > MAX_TERMS:
        raise unsupported(node, f"an integer dot_general of {nb * m * k * n} products "
                                f"(more than {MAX_TERMS}) is not lowered for Core AI: it "
                                "is composed exactly from int32 products and sums")
    lhs = ctx.transpose(lhs, list(lb) + lf + list(lc))
    rhs = ctx.transpose(rhs, list(rb) + list(rc) + rf)
    prod = ctx.mul(ctx.reshape(lhs, (nb, m, k, 1)), ctx.reshape(rhs, (nb, 1, k, n)))
    return ctx.reduce("sum", prod, [2], node.outputs[0].type.shape)


# The float rule stays where it is (ops_shape.py); this one wraps it, taking the integer
# operands (this module is imported after it, ops.py).
_FLOAT = {op: RULES[op] for op in ("dot_general", "conv")}


@rule("dot_general", replace=True)
def _dot_general(ctx, node, ins):
    if node.inputs[0].type.dtype == DType.bool or node.inputs[1].type.dtype == DType.bool:
        raise unsupported(node, "a bool dot_general is not lowered for Core AI")
    if all(not v.type.dtype.is_float for v in node.inputs):
        return int_dot_general(ctx, node, ins)
    return _FLOAT["dot_general"](ctx, node, ins)


def int_conv(ctx, node, ins):
    """An integer ``conv`` (both operands int32-carried)."""
    from .ops_conv import conv_layout

    x, w = ins
    p, out_t = node.params, node.outputs[0].type
    x, xs, groups = conv_layout(ctx, node, x, I32)
    n, c = xs[:2]
    o, cg, *kernel = node.inputs[1].type.shape
    out_sp = tuple(out_t.shape[2:])
    npos = int(np.prod(out_sp, dtype=np.int64))
    og = o // groups
    if n * o * cg * npos > MAX_TERMS:
        raise unsupported(node, f"an integer convolution of {n * o * cg * npos} products per "
                                f"kernel tap (more than {MAX_TERMS}) is not lowered for Core "
                                "AI: it is composed exactly from int32 products and sums")
    nk = int(np.prod(kernel, dtype=np.int64))
    wr = ctx.reshape(w, (groups, og, cg, nk))
    acc = None
    for t, tap in enumerate(itertools.product(*[range(k) for k in kernel])):
        begin = [0, 0] + [k * d for k, d in zip(tap, p["rhs_dilation"])]
        end = [n, c] + [s + (m - 1) * st + 1 for s, m, st in zip(begin[2:], out_sp,
                                                                p["strides"])]
        xt = ctx.slice(x, begin, end, [1, 1] + list(p["strides"]))
        xt = ctx.reshape(xt, (n, groups, 1, cg, npos))
        wt = ctx.reshape(ctx.slice(wr, [0, 0, 0, t], [groups, og, cg, t + 1]),
                         (1, groups, og, cg, 1))
        y = ctx.reduce("sum", ctx.mul(xt, wt), [3])
        acc = y if acc is None else ctx.add(acc, y)
    return ctx.reshape(acc, out_t.shape)


@rule("conv", replace=True)
def _conv(ctx, node, ins):
    if not node.inputs[0].type.dtype.is_float and node.inputs[0].type.dtype != DType.bool:
        return int_conv(ctx, node, ins)
    return _FLOAT["conv"](ctx, node, ins)
