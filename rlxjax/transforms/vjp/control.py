"""VJP rules for control flow (ir/control.py).

- ``cond``: the backward pass is another ``cond`` on the same index whose branches are the
  VJPs of the forward branches (each recomputes its branch's forward values, then runs its
  backward pass), so only the taken branch's derivative is evaluated — unlike a ``select``
  of both, which lets an untaken branch's inf/NaN derivative leak into the gradient.
- ``while``: reverse-mode differentiation is an error, as in JAX.
- ``scan`` never reaches this module: the grad transform unrolls scans first
  (transforms/regions.py).
"""
from __future__ import annotations

from ...errors import UnsupportedPrimitiveError
from ...ir import Graph
from ..regions import inline
from ..rewrite import dce
from .registry import vjp_rule


@vjp_rule("cond")
def _cond(ctx, node, cts, needs):
    from ..grad import backward_seeded  # late import: grad imports the vjp rules

    operands = node.inputs[1:]
    want = [need and v.dtype.is_float for need, v in zip(needs[1:], operands)]
    live = [(i, c) for i, c in enumerate(cts) if c is not None]
    if not any(want) or not live:
        return [None] * len(node.inputs)
    branches = []
    for k, g in enumerate(node.params["branches"]):
        bg = Graph(f"{g.name}_vjp")
        ins = [bg.add_input(f"in{i}", v.type) for i, v in enumerate(operands)]
        ct_ins = [bg.add_input(f"ct{i}", c.type) for i, c in live]
        outs = inline(bg, g, ins)
        seeds = [(outs[i], ct) for (i, _), ct in zip(live, ct_ins)]
        wrt = [v for v, w in zip(ins, want) if w]
        for j, grad in enumerate(backward_seeded(bg, seeds, wrt)):
            bg.add_output(f"ct_in{j}", grad)
        dce(bg)
        branches.append(bg)
    grads = iter(ctx.add_multi("cond", [node.inputs[0], *operands, *[c for _, c in live]],
                               branches=tuple(branches)))
    return [None] + [next(grads) if w else None for w in want]


@vjp_rule("while")
def _while(ctx, node, cts, needs):
    raise UnsupportedPrimitiveError(
        "while", node.source,
        "reverse-mode differentiation of a while_loop is not supported (JAX refuses it too): "
        "use lax.scan, or lax.fori_loop with bounds known at trace time (JAX turns that into "
        "a scan), for a loop you need gradients through")


@vjp_rule("scan")
def _scan(ctx, node, cts, needs):
    raise UnsupportedPrimitiveError("scan", node.source,
                                    "internal: scans are unrolled before differentiation")


@vjp_rule("custom_vjp")
def _custom_vjp(ctx, node, cts, needs):
    bwd = node.params["bwd"]()
    ct_vals = [ctx.instantiate(c, v.type) for c, v in zip(cts, node.outputs)
               if v.dtype.is_float]
    grads = iter(inline(ctx.graph, bwd, list(node.inputs) + ct_vals, ctx.source))
    return [next(grads) if v.dtype.is_float else None for v in node.inputs]
