"""Working with region-carrying ops (ir/control.py): inlining and unrolling.

``unroll_scans`` rewrites every ``scan`` of a graph into straight-line code (one inlined copy
of the body per step, static slices of ``xs`` and a concatenation of the ``ys``). It is exact,
and it is what the grad transform differentiates: a scan's backward pass needs every step's
intermediate values, which the unrolled form simply keeps. The forward program keeps the
compact loop (coreml/rules/control.py).
"""
from __future__ import annotations

from typing import List, Sequence

from ..errors import UnsupportedPrimitiveError
from ..ir import Graph, Node, Value

# Unrolling beyond this many body nodes in total is refused with a clear error rather than
# building a program Core ML (and this compiler) would struggle with.
MAX_UNROLLED_NODES = 200_000


def all_regions(graph: Graph) -> List[Graph]:
    """Every region graph nested in ``graph``, at any depth (outer before inner)."""
    from ..ir.control import regions

    out: List[Graph] = []
    stack = [graph]
    while stack:
        for n in stack.pop().nodes:
            for sub in regions(n):
                out.append(sub)
                stack.append(sub)
    return out


def inline(graph: Graph, region: Graph, inputs: Sequence[Value], source=None) -> List[Value]:
    """Append a copy of ``region``'s nodes to ``graph`` reading ``inputs``; returns the
    copies of its outputs."""
    env = {v.id: x for (_, v), x in zip(region.inputs, inputs)}
    for n in region.nodes:
        new = graph.add_node(n.op, [env[v.id] for v in n.inputs], n.params,
                             n.source or source)
        env.update((v.id, w) for v, w in zip(n.outputs, new.outputs))
    return [env[v.id] for _, v in region.outputs]


def inline_custom_calls(graph: Graph) -> bool:
    """Replace every ``custom_vjp`` node of ``graph`` by its primal region, in place: once
    the grad transform has run, the custom rule has done its job and the simplification
    passes should see plain ops. Returns whether anything changed."""
    return _expand(graph, "custom_vjp",
                   lambda n: inline(graph, n.params["primal"], n.inputs, n.source))


def _expand(graph: Graph, op: str, fn) -> bool:
    changed = False
    while any(n.op == op for n in graph.nodes):
        old, graph.nodes, mapping = graph.nodes, [], {}
        for n in old:
            if mapping and any(v.id in mapping for v in n.inputs):
                n.inputs = tuple(mapping.get(v.id, v) for v in n.inputs)
            if n.op != op:
                graph.nodes.append(n)
                continue
            mapping.update((v.id, o) for v, o in zip(n.outputs, fn(n)))
        graph.outputs = [(name, mapping.get(v.id, v)) for name, v in graph.outputs]
        changed = True
    return changed


def unroll_scans(graph: Graph) -> bool:
    """Replace every ``scan`` in ``graph`` (not inside other regions) by its unrolled body,
    in place; scans nested in a scan body are unrolled too. Returns whether anything changed."""
    return _expand(graph, "scan", lambda n: _unroll(graph, n))


def _unroll(graph: Graph, node: Node) -> List[Value]:
    p = node.params
    body, length, nc, nk = p["body"], p["length"], p["num_consts"], p["num_carry"]
    if length * max(1, len(body.nodes)) > MAX_UNROLLED_NODES:
        raise UnsupportedPrimitiveError(
            "scan", node.source,
            f"differentiating a scan of length {length} with a {len(body.nodes)}-op body would "
            f"unroll to more than {MAX_UNROLLED_NODES} ops; shorten the scan or split it "
            "(e.g. jax.checkpoint over chunks does not help here: Core ML has no autodiff)")
    ins = list(node.inputs)
    consts, carry, xs = ins[:nc], ins[nc:nc + nk], ins[nc + nk:]

    def add(op, *inputs, **params):
        return graph.add_node(op, inputs, params, node.source).output

    steps = range(length - 1, -1, -1) if p["reverse"] else range(length)
    ys: List[List[Value]] = []
    for t in steps:
        x_t = []
        for x in xs:
            shape = tuple(x.shape)
            piece = add("slice", x, start=(t,) + (0,) * (len(shape) - 1),
                        limit=(t + 1,) + shape[1:], strides=(1,) * len(shape))
            x_t.append(add("reshape", piece, shape=shape[1:]))
        outs = inline(graph, body, consts + carry + x_t, node.source)
        carry = outs[:nk]
        ys.append([add("reshape", y, shape=(1,) + tuple(y.shape)) for y in outs[nk:]])
    if p["reverse"]:
        ys.reverse()
    stacked = []
    for k in range(len(node.outputs) - nk):
        pieces = [step[k] for step in ys]
        stacked.append(pieces[0] if len(pieces) == 1 else add("concatenate", *pieces, axis=0))
    return carry + stacked
