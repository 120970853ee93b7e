"""Graph rewriting utilities shared by the transforms: use lists, substitution, DCE.

Cost, for n nodes and e inputs: ``users``, ``substitute``, ``dce`` and ``place_all`` one
pass each, O(n + e); ``insert_before`` (``Appender.place_before``) one pass per call, so a
pass calling it per match is O(n x matches): collect the placements and ``place_all`` once.
"""
from __future__ import annotations

from typing import Dict, Iterable, List, Sequence

from ..ir import Graph, Node, Value
from ..ir.builder import Builder


def users(graph: Graph) -> Dict[int, List[Node]]:
    """value id -> nodes reading it (each node once per value)."""
    out: Dict[int, List[Node]] = {}
    for n in graph.nodes:
        ins = n.inputs
        for v in (ins if len(ins) < 2 or (len(ins) == 2 and ins[0] is not ins[1])
                  else dict.fromkeys(ins)):
            out.setdefault(v.id, []).append(n)
    return out


def output_ids(graph: Graph) -> set:
    return {v.id for _, v in graph.outputs}


def substitute(graph: Graph, mapping: Dict[int, Value]) -> None:
    """Make every reader of value id k read mapping[k] instead (inputs and outputs)."""
    if not mapping:
        return
    for n in graph.nodes:
        if any(v.id in mapping for v in n.inputs):
            n.inputs = tuple(mapping.get(v.id, v) for v in n.inputs)
    graph.outputs = [(name, mapping.get(v.id, v)) for name, v in graph.outputs]


def dce(graph: Graph) -> int:
    """Drop nodes whose outputs nobody reads; returns how many were removed."""
    live = output_ids(graph)
    kept: List[Node] = []
    for n in reversed(graph.nodes):
        for v in n.outputs:
            if v.id in live:
                kept.append(n)
                live.update([v.id for v in n.inputs])
                break
    removed = len(graph.nodes) - len(kept)
    graph.nodes = kept[::-1]
    return removed


def insert_before(graph: Graph, anchor: Node, new_nodes: Sequence[Node]) -> None:
    """Move the (just appended) ``new_nodes`` to just before ``anchor``."""
    ids = {id(n) for n in new_nodes}
    rest = [n for n in graph.nodes if id(n) not in ids]
    i = next(k for k, n in enumerate(rest) if n is anchor)
    graph.nodes = rest[:i] + list(new_nodes) + rest[i:]


def place_all(graph: Graph, before: Dict[int, List[Node]]) -> None:
    """Move the (appended) nodes of ``before[id(anchor)]`` to just before each ``anchor`` in
    one pass: the order ``insert_before`` one anchor at a time gives (for anchors that are
    not themselves moved), at O(nodes) instead of O(nodes) per anchor."""
    if not before:
        return
    new = {id(n) for ns in before.values() for n in ns}
    order: List[Node] = []
    for n in graph.nodes:
        if id(n) not in new:
            order.extend(before.get(id(n), ()))
            order.append(n)
    graph.nodes = order


class Appender(Builder):
    """A Builder for replacements: it builds under the source line of the node being
    replaced (pass it as ``source``), remembers what it built, and ``place_before`` moves
    those nodes in front of that node."""

    def __init__(self, graph: Graph, source=None):
        super().__init__(graph, source)
        self.nodes: List[Node] = []

    def build(self, op: str, inputs: Iterable[Value], params: dict) -> Node:
        n = super().build(op, tuple(inputs), params)
        self.nodes.append(n)
        return n

    def place_before(self, anchor: Node) -> None:
        insert_before(self.graph, anchor, self.nodes)
        self.nodes = []
