"""Graph verifier, run after every transform: SSA order, parameters against each op's schema,
types, names, and regions (each verified as a graph of its own, and owned by one node only).
Errors name the op and, when known, the user's source line of the node.

Type inference is a function of a node's op, params (immutable) and input types: a node
whose three are those of its last inference (``Node.typed``, set when the node was built)
is not inferred again, only its outputs checked against that result. Nodes with regions
are always inferred (a pass may change a region in place)."""
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
        in_types = tuple([v.type for v in n.inputs])
        typed = n.typed  # the node's last inference (ir/graph.py Node): redone if changed
        if (typed is not None and typed[1] is n.params and typed[2] == in_types
                and typed[0] == n.op and not n.regions):
            expect = typed[3]
        else:
            try:  # infer_types checks the params against the op's schema first
                expect = tuple(infer_types(n.op, in_types, n.params, n.regions))
            except IRTypeError as e:
                raise GraphVerificationError(f"{n.op}: {e}{_at(n)}") from None
            n.typed = None if n.regions else (n.op, n.params, in_types, expect)
        if tuple([v.type for v in n.outputs]) != expect:
            raise GraphVerificationError(
                f"{n.op}: output types {[v.type for v in n.outputs]} but inference says "
                f"{list(expect)}{_at(n)}")
        for i, v in enumerate(n.outputs):
            if v.node is not n or v.index != i or v.id in defined:
                raise GraphVerificationError(f"{n.op}: output %{v.id} is not owned by the node")
            defined.add(v.id)
        for sub in n.subgraphs() if n.regions else ():
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
