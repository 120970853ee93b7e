"""Legalize: composite RLX ops decomposed once, in the RLX graph, into the simpler RLX ops a
format runs, for a format that does not run them natively.

A composite op (a norm and its backward, ...) has one decomposition, registered into its
op record (``register_impl("decompose", op)``, rlxjax/ir/ops.py) by the family modules of
this package and written with ``ir.Builder``: ``fn(b, node, ins) -> [values]``, one value
per output of ``node``, built from ``ins`` (the node's inputs in the new graph). A format
says which ops it runs natively (``native(node) -> bool``: an op it lowers itself, such as
Core ML's fused ``layer_norm`` chosen for numerics); :func:`legalize` decomposes every
other op that has a decomposition, in region graphs too, and leaves the rest for the
format to lower or refuse by name. The model: torch-mlir's ``DecomposeComplexOps`` with its
``backendLegalOps``.
"""
from __future__ import annotations

from typing import Callable, Dict

from ...ir import Graph, Node, verify
from ...ir.builder import Builder
from ...ir.ops import OPS
from . import activation, int_linear, norm, pool, reduce_precision, special  # noqa: F401
from . import linalg, linalg_qr, linalg_svd, linalg_tri  # noqa: F401  (register them)
from .policy import decompose

Native = Callable[[Node], bool]


def decomposition(op: str):
    """The registered decomposition of ``op``, or None."""
    d = OPS.get(op)
    return d.impl("decompose") if d is not None else None


def needs_legalizing(graph: Graph, native: Native) -> bool:
    """Whether some node of ``graph`` (or of a region in it) is decomposed for ``native``."""
    return any((decomposition(n.op) is not None and not native(n))
               or any(needs_legalizing(g, native) for g in n.subgraphs())
               for n in graph.nodes)


def legalize(graph: Graph, native: Native, carried_f16: bool = False) -> Graph:
    """``graph`` with every op that has a decomposition and is not ``native`` decomposed;
    ``graph`` itself when there is none (it is never changed: a new graph is built).
    ``carried_f16``: the format carries fp16 values in fp32 (policy.py's fp16 policy)."""
    if not needs_legalizing(graph, native):
        return graph
    new = _copy(graph, native, {}, carried_f16)
    verify(new)
    return new


def _copy(graph: Graph, native: Native, env: Dict[int, object], carried_f16=False) -> Graph:
    new = Graph(graph.name)
    for name, v in graph.inputs:
        env[v.id] = new.add_input(name, v.type)
    b = Builder(new)
    for node in graph.nodes:
        ins = [env[v.id] for v in node.inputs]
        fn = decomposition(node.op)
        if fn is not None and not native(node):
            with b.at(node.source):
                outs = list(decompose(fn, b, node, ins, carried_f16))
        else:
            regions = {k: (tuple(_copy(g, native, {}, carried_f16) for g in r)
                           if isinstance(r, tuple) else _copy(r, native, {}, carried_f16))
                       for k, r in node.regions.items()}
            outs = new.add_node(node.op, ins, node.params, node.source,
                                regions or None).outputs
        if len(outs) != len(node.outputs) or any(
                o.type != v.type for o, v in zip(outs, node.outputs)):
            raise AssertionError(f"internal: the decomposition of {node.op} gives "
                                 f"{[o.type for o in outs]} for {[v.type for v in node.outputs]}")
        env.update((v.id, o) for v, o in zip(node.outputs, outs))
    for name, v in graph.outputs:
        new.add_output(name, env[v.id])
    return new
