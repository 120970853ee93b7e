"""Graph verifier, run after every transform: SSA order, parameters against each op's schema,
types, names, and regions (each verified as a graph of its own, and owned by one node only).
Errors name the op and, when known, the user's source line of the node."""
from __future__ import annotations

from .graph import Graph
from .ops import IRTypeError, infer_types


class GraphVerificationError(ValueError):
    pass


def _at(node) -> str:
    return f" (node at {node.source})" if node.source else ""


def verify(g: Graph) -> Graph:
    _verify(g, {id(g)})
    return g


def _verify(g: Graph, owned: set) -> None:
    """``owned``: ids of the region graphs seen so far (a region belongs to one node)."""
    defined = set()
    names = set()
    for name, v in g.inputs:
        if name in names:
            raise GraphVerificationError(f"duplicate input name {name!r}")
        names.add(name)
        if v.node is not None:
            raise GraphVerificationError(f"input {name} is produced by a node")
        defined.add(v.id)
    for n in g.nodes:
        for v in n.inputs:
            if v.id not in defined:
                raise GraphVerificationError(f"{n.op} reads %{v.id} before it is defined{_at(n)}")
        try:  # infer_types checks the params against the op's schema first
            expect = infer_types(n.op, [v.type for v in n.inputs], n.params, n.regions)
        except IRTypeError as e:
            raise GraphVerificationError(f"{n.op}: {e}{_at(n)}") from None
        if [v.type for v in n.outputs] != expect:
            raise GraphVerificationError(
                f"{n.op}: output types {[v.type for v in n.outputs]} but inference says {expect}"
                f"{_at(n)}")
        for i, v in enumerate(n.outputs):
            if v.node is not n or v.index != i or v.id in defined:
                raise GraphVerificationError(f"{n.op}: output %{v.id} is not owned by the node")
            defined.add(v.id)
        for sub in n.subgraphs():
            if id(sub) in owned:
                raise GraphVerificationError(
                    f"{n.op}: region {sub.name} also belongs to another node (copy it)")
            owned.add(id(sub))
            try:
                _verify(sub, owned)
            except GraphVerificationError as e:
                raise GraphVerificationError(f"in a region of {n.op}: {e}") from None
    out_names = set()
    for name, v in g.outputs:
        if name in out_names:
            raise GraphVerificationError(f"duplicate output name {name!r}")
        out_names.add(name)
        if v.id not in defined:
            raise GraphVerificationError(f"output {name} (%{v.id}) is not defined")
