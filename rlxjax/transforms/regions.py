"""Working with region-carrying ops (ir/control.py): listing, copying, inlining, and
preparing scans for the grad transform (``save_scan_carries``).

Regions belong to their node (``Node.regions``, see ir/graph.py): a pass given a graph may
change the regions of its nodes in place, as it changes the graph; whatever copies a node
into another graph (``inline``) copies its regions too, so no region has two owners.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

from ..ir import Graph, Node, Value
from .rewrite import substitute


def all_regions(graph: Graph) -> List[Graph]:
    """Every region graph nested in ``graph``, at any depth (outer before inner)."""
    out: List[Graph] = []
    stack = [graph]
    while stack:
        for n in stack.pop().nodes:
            if n.regions:  # few nodes have any: skip the generator for the others
                for sub in n.subgraphs():
                    out.append(sub)
                    stack.append(sub)
    return out


def copy_graph(g: Graph, name: str | None = None) -> Graph:
    """A copy of ``g`` (its regions copied too) under ``name``."""
    new = Graph(g.name if name is None else name)
    ins = [new.add_input(n, v.type) for n, v in g.inputs]
    for (n, _), v in zip(g.outputs, inline(new, g, ins)):
        new.add_output(n, v)
    return new


def copy_regions(node: Node) -> dict:
    """Copies of ``node``'s regions, for a node made from it in another place."""
    return {k: tuple(copy_graph(s) for s in r) if isinstance(r, tuple) else copy_graph(r)
            for k, r in node.regions.items()}


def inline(graph: Graph, region: Graph, inputs: Sequence[Value], source=None) -> List[Value]:
    """Append a copy of ``region``'s nodes (their regions copied) to ``graph`` reading
    ``inputs``; returns the copies of its outputs."""
    env = {v.id: x for (_, v), x in zip(region.inputs, inputs)}
    for n in region.nodes:
        new = graph.add_node(n.op, [env[v.id] for v in n.inputs], n.params,
                             n.source or source, copy_regions(n) if n.regions else None)
        env.update((v.id, w) for v, w in zip(n.outputs, new.outputs))
    return [env[v.id] for _, v in region.outputs]


def inline_custom_calls(graph: Graph) -> bool:
    """Replace every ``custom_vjp`` node of ``graph`` by its primal region, in place: once
    the grad transform has run, the custom rule has done its job and the simplification
    passes should see plain ops. Returns whether anything changed."""
    changed = False
    while any(n.op == "custom_vjp" for n in graph.nodes):
        _replace(graph, lambda n: n.op == "custom_vjp",
                 lambda n: inline(graph, n.regions["primal"], n.inputs, n.source))
        changed = True
    return changed


def inline_remat(graph: Graph) -> bool:
    """Replace every ``remat`` node of ``graph`` by its body, in place: once the grad
    transform has recomputed what the checkpoint's policy did not save, the forward pass
    is plain ops (the saved values are among them). Returns whether anything changed."""
    changed = False
    while any(n.op == "remat" for n in graph.nodes):
        _replace(graph, lambda n: n.op == "remat",
                 lambda n: inline(graph, n.regions["body"], n.inputs, n.source))
        changed = True
    return changed


def drop_remat_barriers(graph: Graph) -> bool:
    """Remove every ``remat_barrier`` of ``graph``, its readers reading its inputs, for a
    format that has no lowering for it: the recomputation stays (nothing merges it any
    more at this stage), the values are the same. Returns whether anything changed."""
    barriers = [n for n in graph.nodes if n.op == "remat_barrier"]
    if not barriers:
        return False
    mapping = {o.id: i for n in barriers for o, i in zip(n.outputs, n.inputs)}
    graph.nodes = [n for n in graph.nodes if n.op != "remat_barrier"]
    substitute(graph, mapping)
    return True


def save_scan_carries(graph: Graph, active: set) -> Dict[int, Value]:
    """Make every ``scan`` that reads an ``active`` value also return the carry each step
    starts from, stacked (param ``saved_carries``): its VJP (vjp/control.py) replays the
    steps backwards from those, so the gradient is a loop too and the program does not
    grow with the scan's length. Returns the replaced values: old value id -> new value."""
    def wanted(n):
        return (n.op == "scan" and not n.params.get("saved_carries")
                and any(v.id in active for v in n.inputs))

    if not any(wanted(n) for n in graph.nodes):
        return {}
    return _replace(graph, wanted, lambda n: _with_saved_carries(graph, n))


def _with_saved_carries(graph: Graph, node: Node) -> List[Value]:
    p = node.params
    body, nc, nk = node.regions["body"], p["num_consts"], p["num_carry"]
    g = Graph(f"{body.name}_saving")
    ins = [g.add_input(name, v.type) for name, v in body.inputs]
    for i, v in enumerate(inline(g, body, ins)):
        g.add_output(f"out{i}", v)
    for i, v in enumerate(ins[nc:nc + nk]):
        g.add_output(f"saved{i}", v)
    new = graph.add_node("scan", node.inputs, dict(p, saved_carries=True), node.source,
                         regions={"body": g})
    return list(new.outputs[:len(node.outputs)])


def _replace(graph: Graph, pred, fn) -> Dict[int, Value]:
    """One pass: every node matching ``pred`` is replaced, in place in the node order, by
    the nodes ``fn(node)`` appends; its outputs by the values ``fn`` returns (the returned
    mapping)."""
    old, graph.nodes, mapping = graph.nodes, [], {}
    for n in old:
        if mapping and any(v.id in mapping for v in n.inputs):
            n.inputs = tuple(mapping.get(v.id, v) for v in n.inputs)
        if not pred(n):
            graph.nodes.append(n)
            continue
        mapping.update((v.id, o) for v, o in zip(n.outputs, fn(n)))
    graph.outputs = [(name, mapping.get(v.id, v)) for name, v in graph.outputs]
    return mapping
