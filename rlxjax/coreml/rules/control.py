"""Lowering: control flow (ir/control.py) onto MIL's ``cond`` and ``while_loop``.

Regions become nested MIL blocks. Values of the enclosing scope are visible in a block,
so region operands that are not loop-carried are simply referenced; constants always live
in the function's top block (MilBuilder.const).

- ``cond`` with N branches: nested two-way MIL ``cond``s on ``index == k``; the last
  branch also takes any out-of-range index (XLA's convention). A constant index picks its
  branch at compile time.
- ``while`` -> ``while_loop`` over the carry.
- ``scan`` -> ``while_loop`` over (step, carry, stacked outputs): step t reads slice t of
  every ``xs`` (``slice_by_size``) and writes slice t of every stacked output
  (``scatter_nd`` "update" on a [1, 1] index), so the program does not grow with the
  length. (Gradients of ``scan`` are taken on its unrolled form, transforms/regions.py.)
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, TensorType
from ..registry import lowering
from .common import bool_as_int32, reshape, restore_bool

_I32 = TensorType((), DType.i32)
_BOOL = TensorType((), DType.bool)


def _out_types(ctx, node):
    return [ctx.out_type(node, i) for i in range(len(node.outputs))]


@lowering("cond")
def _cond(ctx, node, index, *operands):
    b = ctx.b
    branches = node.regions["branches"]
    k0 = b.known(index)
    if k0 is not None:  # a constant index: only that branch is compiled
        k = int(np.asarray(k0))
        k = k if 0 <= k < len(branches) else len(branches) - 1
        return tuple(ctx.lower_region(branches[k], operands))
    return _select_branch(ctx, node, index, operands, 0)


def _select_branch(ctx, node, index, operands, k):
    b = ctx.b
    branches = node.regions["branches"]
    pred = b.op("equal", _BOOL, x=index, y=np.int32(k))
    b.begin_block()
    true_blk = b.end_block(ctx.lower_region(branches[k], operands))
    b.begin_block()
    if k + 2 == len(branches):
        rest = ctx.lower_region(branches[k + 1], operands)
    else:
        rest = list(_select_branch(ctx, node, index, operands, k + 1))
    false_blk = b.end_block(rest)
    return b.op_with_blocks("cond", _out_types(ctx, node), [true_blk, false_blk], pred=pred)


@lowering("while")
def _while(ctx, node, *args):
    b, p = ctx.b, node.params
    nc, nb = p["n_cond_consts"], p["n_body_consts"]
    cc, bc, init = list(args[:nc]), list(args[nc:nc + nb]), list(args[nc + nb:])
    types = [v.type for v in init]
    carry = b.begin_block(types)
    (pred,) = ctx.lower_region(node.regions["cond"], cc + carry)
    cond_blk = b.end_block([pred])
    carry = b.begin_block(types)
    body_blk = b.end_block(ctx.lower_region(node.regions["body"], bc + carry))
    return b.op_with_blocks("while_loop", _out_types(ctx, node), [cond_blk, body_blk],
                            loop_vars=init)


@lowering("scan")
def _scan(ctx, node, *args):
    b, p = ctx.b, node.params
    length, nc, nk = p["length"], p["num_consts"], p["num_carry"]
    consts, init, xs = list(args[:nc]), list(args[nc:nc + nk]), list(args[nc + nk:])
    out_types = _out_types(ctx, node)
    y_types = out_types[nk:]
    bufs = [_zeros(b, t) for t in y_types]
    loop_types = [_I32] + [v.type for v in init] + [v.type for v in bufs]

    state = b.begin_block(loop_types)
    cond_blk = b.end_block([b.op("less", _BOOL, x=state[0], y=np.int32(length))])

    state = b.begin_block(loop_types)
    step, carry, acc = state[0], state[1:1 + nk], state[1 + nk:]
    t = (b.op("sub", _I32, x=np.int32(length - 1), y=step) if p["reverse"] else step)
    x_t = [_read_slice(b, x, t) for x in xs]
    outs = ctx.lower_region(node.regions["body"], consts + list(carry) + x_t)
    new_acc = [_write_slice(b, buf, y, t) for buf, y in zip(acc, outs[nk:])]
    nxt = b.op("add", _I32, x=step, y=np.int32(1))
    body_blk = b.end_block([nxt] + list(outs[:nk]) + new_acc)

    final = b.op_with_blocks("while_loop", loop_types, [cond_blk, body_blk],
                             loop_vars=[b.const(np.int32(0))] + init + bufs)
    return tuple(final[1:])


def _zeros(b, t: TensorType):
    return b.full(t, 0)


def _begin(b, t, rank):
    """[t, 0, ..., 0] as an int32 vector of length ``rank``."""
    first = reshape(b, t, (1,))
    if rank == 1:
        return first
    return b.op("concat", TensorType((rank,), DType.i32),
                values=[first, b.const(np.zeros(rank - 1, np.int32))],
                axis=np.int32(0), interleave=False)


def _read_slice(b, x, t):
    shape = tuple(x.shape)
    piece = b.op("slice_by_size", x.type.with_shape((1,) + shape[1:]), x=x,
                 begin=_begin(b, t, len(shape)), size=np.asarray((1,) + shape[1:], np.int32))
    return reshape(b, piece, shape[1:])


def _write_slice(b, buf, y, t):
    data, upd = bool_as_int32(b, buf), bool_as_int32(b, y)
    upd = reshape(b, upd, (1,) + tuple(y.shape))
    idx = reshape(b, t, (1, 1))
    out = b.op("scatter_nd", data.type, data=data, indices=idx, updates=upd, mode="update")
    return restore_bool(b, out, buf.dtype)


@lowering("custom_vjp")
def _custom_vjp(ctx, node, *args):
    # Only differentiation looks at the custom rule; the program computes the primal.
    return tuple(ctx.lower_region(node.regions["primal"], args))


@lowering("remat")
def _remat(ctx, node, *args):
    # inlined after the grad transform (transforms/regions.py); a remat left in a region
    # computes its body: its outputs and the values its policy saves
    return tuple(ctx.lower_region(node.regions["body"], args))


@lowering("remat_barrier")
def _remat_barrier(ctx, node, *xs):
    """One MIL ``identity`` per value: what the backward pass recomputes reads these, so
    the MIL CSE does not merge it with the forward pass's ops (coreml/mil_cse.py)."""
    return tuple(ctx.b.op("identity", ctx.out_type(node, i), x=x) for i, x in enumerate(xs))
