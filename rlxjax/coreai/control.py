"""RLX control flow (ir/control.py) -> Core AI's ``while`` / ``if`` (ca_private.while_loop /
if_else: coreai-core's private dialect builders).

- ``cond`` with N branches: nested ``if`` on ``index == k``; the last branch also takes any
  out-of-range index (lax.switch clamps the index into range);
- ``while`` -> ``while`` over the carry (as JAX's: a loop JAX does not bound is not bounded
  here either; the worker's time limit ends a hung program, worker.py);
- ``scan`` -> ``while`` over (step, carry, stacked outputs), bounded by ``step < length``:
  step t reads slice t of every ``xs`` (``gather_nd``) and writes slice t of every stacked
  output (``scatter_nd`` update at one index), so the program does not grow with the length;
- ``custom_vjp``: the primal body (only differentiation reads the custom rule).
"""
from __future__ import annotations

import numpy as np

from ..ir import DType
from . import ca_private
from .ops_base import carried, rule


def lower_region(ctx, graph, args, loop: bool = False) -> list:
    """``graph``'s outputs lowered from ``args``; ``loop``: in a counted loop's region (its
    ``select``s widen their operands, ops_elementwise.py)."""
    env = {v.id: a for (_, v), a in zip(graph.inputs, args)}
    ctx.loops += loop
    try:
        ctx.lower_nodes(graph.nodes, env)
    finally:
        ctx.loops -= loop
    return [env[v.id] for _, v in graph.outputs]


def _types(node):
    return [ca_private.tensor_type(v.type.shape, carried(v.type.dtype).np.name)
            for v in node.outputs]


@rule("cond")
def _cond(ctx, node, ins):
    index, operands = ins[0], ins[1:]
    branches = node.regions["branches"]
    if len(branches) == 1:
        return lower_region(ctx, branches[0], operands)
    return _branch(ctx, node, index, operands, 0)


def _branch(ctx, node, index, operands, k):
    branches = node.regions["branches"]
    pred = ctx.eq(index, ctx.scalar(k, DType.i32))
    if k + 2 == len(branches):
        rest = lambda: lower_region(ctx, branches[k + 1], operands)  # noqa: E731
    else:
        rest = lambda: _branch(ctx, node, index, operands, k + 1)  # noqa: E731
    return ca_private.if_else(pred, _types(node),
                              lambda: lower_region(ctx, branches[k], operands), rest)


@rule("while")
def _while(ctx, node, ins):
    """A counted loop (``trip_count``) carries a second counter, tested too (``k < trips +
    1``): with its own test alone, Core AI's runtime never ended some loops (measured: the
    legalize stage's linalg loops, a product of a row with the carry written back into
    it; the same loop with the second test gives the right values); and its ``select``s
    widen their operands (``Ctx.widen``). A loop without a ``trip_count`` (JAX's own) is
    lowered as it is."""
    nc, nb = node.params["n_cond_consts"], node.params["n_body_consts"]
    cc, bc, init = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    trips = node.params.get("trip_count")
    if trips is None:
        return ca_private.while_loop(
            list(init),
            lambda carry: lower_region(ctx, node.regions["cond"], list(cc) + carry)[0],
            lambda carry: lower_region(ctx, node.regions["body"], list(bc) + carry))
    i32 = DType.i32

    def cond(carry):
        more = lower_region(ctx, node.regions["cond"], list(cc) + carry[1:], True)[0]
        return ctx.and_(more, ctx.lt(carry[0], ctx.scalar(trips + 1, i32)))

    def body(carry):
        return [ctx.add(carry[0], ctx.scalar(1, i32))] + lower_region(
            ctx, node.regions["body"], list(bc) + carry[1:], True)

    return ca_private.while_loop([ctx.const(np.int32(0))] + list(init), cond, body)[1:]


@rule("scan")
def _scan(ctx, node, ins):
    p = node.params
    length, nc, nk = p["length"], p["num_consts"], p["num_carry"]
    consts, init, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]
    y_types = [v.type for v in node.outputs[nk:]]
    bufs = [ctx.full(0, t) for t in y_types]
    i32 = DType.i32

    def cond(state):
        return ctx.lt(state[0], ctx.scalar(length, i32))

    def body(state):
        step, carry, acc = state[0], state[1:1 + nk], state[1 + nk:]
        t = ctx.sub(ctx.scalar(length - 1, i32), step) if p["reverse"] else step
        at = ctx.reshape(t, (1,))
        x_t = [ctx.ca.gather_nd(x, at) for x in xs]
        outs = lower_region(ctx, node.regions["body"], list(consts) + list(carry) + x_t)
        where = ctx.reshape(t, (1, 1))
        new_acc = [ctx.ca.scatter_nd(buf, where, ctx.reshape(y, (1,) + tuple(ty.shape[1:])))
                   for buf, y, ty in zip(acc, outs[nk:], y_types)]
        return [ctx.add(step, ctx.scalar(1, i32))] + list(outs[:nk]) + new_acc

    final = ca_private.while_loop([ctx.const(np.int32(0))] + list(init) + bufs, cond, body)
    return final[1:]


@rule("custom_vjp")
def _custom_vjp(ctx, node, ins):
    return lower_region(ctx, node.regions["primal"], ins)
