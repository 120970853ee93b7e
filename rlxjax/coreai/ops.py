"""RLX ops -> Core AI ops (used by lower.py, which owns the function boundary and states).

Each RLX op becomes Core AI ops with the same result:

* elementwise ops broadcast implicitly (``broadcasting_*``); ``lt`` / ``le`` are ``greater``
  with the operands swapped (Core AI has no ``less``), ``ge`` / ``le`` add ``equal``;
* ``dot_general``: both operands transposed to (batch, free, contract) / (batch, contract,
  free), reshaped to rank 3, one ``batch_matmul`` (no transpose flags in Core AI);
* reductions keep their dims in Core AI: a ``reshape`` drops them;
* ``rev`` is ``reverse``;
* every other op is refused, naming the JAX primitive and the user's line.
"""
from __future__ import annotations

from typing import Dict

import numpy as np

from ..errors import JAX_NAMES, UnsupportedPrimitiveError
from ..ir import DType, TensorType
from . import ca_private

_NP = {DType.f32: np.float32, DType.f16: np.float16, DType.i32: np.int32, DType.bool: np.bool_}


class Ctx:
    def __init__(self, ca):
        self.ca = ca

    def const(self, value, dtype=None):
        return ca_private.constant(np.asarray(value, dtype))

    def i32(self, values):
        return self.const(np.asarray(values, np.int32).reshape(-1))

    def u32(self, values):
        return self.const(np.asarray(values, np.uint32).reshape(-1))

    def reshape(self, x, shape):
        return self.ca.reshape(x, self.i32(shape) if len(shape) else
                               self.const(np.zeros((0,), np.int32)))


def _unsupported(node, detail="no Core AI lowering for this RLX op (yet)"):
    return UnsupportedPrimitiveError(JAX_NAMES.get(node.op, node.op), node.source, detail)


_BINARY = {"add": "broadcasting_add", "sub": "broadcasting_sub", "mul": "broadcasting_mul",
           "div": "broadcasting_divide", "max": "broadcasting_maximum",
           "min": "broadcasting_minimum", "pow": "broadcasting_pow"}
_UNARY = {"exp": "exp", "log": "log", "tanh": "tanh", "sqrt": "sqrt", "rsqrt": "rsqrt",
          "logistic": "sigmoid", "sin": "sin", "cos": "cos", "erf": "erf"}
_REDUCE = {"reduce_sum": "reduce_sum", "reduce_max": "reduce_max", "reduce_min": "reduce_min",
           "reduce_prod": "reduce_product"}


def _lower(ctx: Ctx, node, ins):
    ca, op, p = ctx.ca, node.op, node.params
    out_t = node.outputs[0].type
    if op in _BINARY:
        if op in ("div",) and out_t.dtype.is_int:
            raise _unsupported(node, "integer division is not lowered for Core AI yet (its "
                                     "runtime dies on a division by zero)")
        return getattr(ca, _BINARY[op])(*ins)
    if op in _UNARY:
        return getattr(ca, _UNARY[op])(ins[0])
    if op == "neg":
        return ca.broadcasting_sub(ctx.const(0, _NP[out_t.dtype]), ins[0])
    if op in ("and", "or", "xor", "not"):
        if out_t.dtype != DType.bool:
            raise _unsupported(node, "bitwise ops on integers are not lowered for Core AI yet")
        if op == "not":
            return ca.not_(ins[0])
        return getattr(ca, f"broadcasting_{op}")(*ins)
    if op == "abs":
        return ca.abs_(ins[0])
    if op == "square":
        return ca.broadcasting_mul(ins[0], ins[0])
    if op == "integer_pow":
        return _integer_pow(ctx, ins[0], p["y"], out_t)
    if op in ("eq", "ne", "gt", "lt", "ge", "le"):
        return _compare(ctx, op, *ins)
    if op == "select":  # select(pred, on_false, on_true), as lax.select_n with two cases
        if len(ins) != 3:
            raise _unsupported(node, "select_n with more than two cases")
        return ca.broadcasting_where(ins[0], ins[2], ins[1])
    if op == "constant":
        return ctx.const(p["value"], _NP[out_t.dtype])
    if op == "convert":
        return ca.cast(ins[0], ca_private.dtype(out_t.dtype.np.name))
    if op == "reshape":
        return ctx.reshape(ins[0], out_t.shape)
    if op == "transpose":
        return ca.transpose(ins[0], ctx.u32(p["perm"]))
    if op == "rev":
        return ca.reverse(ins[0], ctx.i32(p["axes"])) if p["axes"] else ins[0]
    if op == "broadcast_in_dim":
        return _broadcast_in_dim(ctx, ins[0], node.inputs[0].type, p["dims"], out_t.shape)
    if op in _REDUCE:
        kept = getattr(ca, _REDUCE[op])(ins[0], ctx.i32(p["axes"]))
        return ctx.reshape(kept, out_t.shape)
    if op == "dot_general":
        return _dot_general(ctx, node, *ins)
    if op == "stop_gradient":
        return ins[0]
    raise _unsupported(node)


def _integer_pow(ctx, x, y: int, t: TensorType):
    if y == 0:
        return ctx.ca.broadcast_to(ctx.const(1, _NP[t.dtype]), ctx.i32(t.shape)) if t.shape \
            else ctx.const(1, _NP[t.dtype])
    acc, base, n = None, x, abs(y)
    while n:  # square and multiply: the products XLA's integer_pow computes
        if n & 1:
            acc = base if acc is None else ctx.ca.broadcasting_mul(acc, base)
        n >>= 1
        if n:
            base = ctx.ca.broadcasting_mul(base, base)
    if y < 0:
        acc = ctx.ca.broadcasting_divide(ctx.const(1, _NP[t.dtype]), acc)
    return acc


def _compare(ctx, op, a, b):
    ca = ctx.ca
    if op == "eq":
        return ca.broadcasting_equal(a, b)
    if op == "ne":
        return ca.broadcasting_not_equal(a, b)
    if op == "gt":
        return ca.broadcasting_greater(a, b)
    if op == "lt":
        return ca.broadcasting_greater(b, a)
    gt = ca.broadcasting_greater(a, b) if op == "ge" else ca.broadcasting_greater(b, a)
    return ca.broadcasting_or(gt, ca.broadcasting_equal(a, b))


def _broadcast_in_dim(ctx, x, in_t: TensorType, dims, shape):
    # x's dims go to ``dims`` of the result: put them there as size-1-padded, then broadcast
    padded = [1] * len(shape)
    for d, n in zip(dims, in_t.shape):
        padded[d] = n
    v = ctx.reshape(x, padded) if tuple(padded) != tuple(in_t.shape) else x
    if tuple(padded) == tuple(shape):
        return v
    return ctx.ca.broadcast_to(v, ctx.i32(shape))


def _dot_general(ctx, node, lhs, rhs):
    (lc, rc), (lb, rb) = node.params["contract"], node.params["batch"]
    lt, rt = node.inputs[0].type, node.inputs[1].type
    if not (lt.dtype.is_float and rt.dtype.is_float):
        raise _unsupported(node, "integer matmul is not lowered for Core AI yet")
    lf = [d for d in range(lt.rank) if d not in lc and d not in lb]
    rf = [d for d in range(rt.rank) if d not in rc and d not in rb]
    size = lambda t, ds: int(np.prod([t.shape[d] for d in ds], dtype=np.int64))  # noqa: E731
    nb, m, k, n = size(lt, lb), size(lt, lf), size(lt, lc), size(rt, rf)
    lhs = _permuted(ctx, lhs, list(lb) + lf + list(lc), lt.rank)
    rhs = _permuted(ctx, rhs, list(rb) + list(rc) + rf, rt.rank)
    out = ctx.ca.batch_matmul(ctx.reshape(lhs, (nb, m, k)), ctx.reshape(rhs, (nb, k, n)))
    return ctx.reshape(out, node.outputs[0].type.shape)


def _permuted(ctx, x, perm, rank):
    return x if list(perm) == list(range(rank)) else ctx.ca.transpose(x, ctx.u32(perm))


def lower_nodes(ctx: Ctx, nodes, env: Dict[int, object]) -> None:
    """Lowers ``nodes`` in order; ``env`` maps RLX value ids to Core AI values (in and out)."""
    for node in nodes:
        if node.regions or len(node.outputs) != 1:
            raise _unsupported(node)
        env[node.outputs[0].id] = _lower(ctx, node, [env[v.id] for v in node.inputs])
