"""Constant folding on the RLX graph, with numpy semantics of the RLX op.

A node whose op is pure, carries no regions and has a ``fold`` implementation in its op
record (``register_impl("fold", ...)``, one module per op family here) is evaluated when
all its inputs are known constants, and replaced by a ``constant`` node carrying the
folded node's source line. Ops without a fold implementation (norms, pooling, conv,
random draws, state, control flow) are never folded.

The compile path folds here, not with the reference interpreter: the interpreter is an
oracle for the lowering, and a bug the two shared would vanish from every program whose
inputs happened to be constant.

What a fold computes is the RLX op's own semantics, evaluated in the value's dtype (never
through float64, except erf/erfc, which numpy lacks: math.erf in float64, rounded once):
bit-exact for arithmetic, comparisons, shapes, indexing, rounding and integer powers;
within an ulp of Core ML for transcendentals (exp, log, tanh, ...), the same numpy
functions the MIL-level folding computed before. An evaluator returns None where the op's
result is implementation-defined (integer division by zero, float -> int conversion of
NaN or out-of-range values, mixed-dtype matmul): the op then stays in the program.

Size policy (as the MIL builder's folding had it): a folded value replaces its node only
if it has at most ``FOLD_MAX_GROWTH`` elements or no more than the largest input, so
broadcasting a scalar to a large shape stays an op; its value is still known, and nodes
that read it fold. Constant operands of ``cond``/``while``/``scan`` are propagated into
the regions (the MIL lowering references them from the enclosing block), which are then
folded too.

``precision="fp16"``: the program computes f32 values in f16, so the fold does too
(inputs rounded to f16, results rounded to f16 and stored as f32, which the lowering
converts back exactly).
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from ...ir import Graph, Node
from ...ir.ops import OPS
from . import elementwise, indexing, linear, reduction, shape  # noqa: F401  (register)
from . import special  # noqa: F401  (register)
from . import linalg  # noqa: F401  (register)
from . import bitwise  # noqa: F401
from . import activation, attention  # noqa: F401  (register)

FOLD_MAX_GROWTH = 256


def _region_consts(node: Node):
    """(region, operand positions, region input positions) of the operands of a region op
    that reach the region unchanged in every iteration (not loop-carried)."""
    p, r = node.params, node.regions
    if node.op == "cond":
        n = len(node.inputs) - 1
        return [(g, list(range(1, 1 + n)), list(range(n))) for g in r["branches"]]
    if node.op == "while":
        nc, nb = p["n_cond_consts"], p["n_body_consts"]
        return [(r["cond"], list(range(nc)), list(range(nc))),
                (r["body"], list(range(nc, nc + nb)), list(range(nb)))]
    if node.op == "scan":
        nc = p["num_consts"]
        return [(r["body"], list(range(nc)), list(range(nc)))]
    return []


def fold_constants(graph: Graph, precision: str = "fp32") -> int:
    """Fold ``graph`` and every region in it, in place; returns how many nodes were
    replaced by constants. Each region belongs to one node (ir/verify.py), so the constant
    operands of that node may be carried into it."""
    return _Folder(precision).fold(graph)


class _Folder:
    def __init__(self, precision: str):
        self.fp16 = precision == "fp16"

    def compute(self, arr: np.ndarray) -> np.ndarray:
        """A value as the program holds it (f32 as f16 in an fp16 program)."""
        if self.fp16 and arr.dtype == np.float32:
            return arr.astype(np.float16)
        return arr

    def compute_dtype(self, dtype: np.dtype) -> np.dtype:
        return np.dtype(np.float16) if self.fp16 and dtype == np.float32 else dtype

    def fold(self, graph: Graph) -> int:
        known: Dict[int, np.ndarray] = {}
        nodes: List[Node] = []
        mapping: Dict[int, object] = {}
        count = 0
        for node in graph.nodes:
            if mapping and any(v.id in mapping for v in node.inputs):
                node.inputs = tuple(mapping.get(v.id, v) for v in node.inputs)
            if node.op == "constant":
                known[node.output.id] = self.compute(node.params["value"])
                nodes.append(node)
                continue
            if node.regions:
                for region, outer, inner in _region_consts(node):
                    count += self._propagate(region, node, outer, inner, known)
            for v in node.inputs:  # the common case, checked first: an input not known
                if v.id not in known:
                    nodes.append(node)
                    break
            else:
                values = self._evaluate(node, known)
                if values is not None:
                    count += self._replace(graph, node, values, known, nodes, mapping)
                    continue
                nodes.append(node)
        graph.nodes = nodes
        if mapping:
            graph.outputs = [(name, mapping.get(v.id, v)) for name, v in graph.outputs]
            _drop_unread_known(graph, known)
        return count

    def _replace(self, graph, node, values, known, nodes, mapping) -> int:
        """Put ``node``'s folded ``values`` in its place (in ``nodes``), unless they are too
        large; returns 1 if it was replaced."""
        largest = max((known[v.id].size for v in node.inputs), default=0)
        if any(v.size > max(FOLD_MAX_GROWTH, largest) for v in values):
            known.update((o.id, v) for o, v in zip(node.outputs, values))
            nodes.append(node)  # stays an op, its value feeds later folds
            return 0
        for out, val in zip(node.outputs, values):
            if not val.flags.c_contiguous:  # a broadcast view
                val = np.array(val, order="C")
            if val.flags.writeable and val.flags.owndata:  # computed here: frozen in place,
                val.setflags(write=False)  # so the constant node does not copy it again
            const = graph.add_node("constant", (), {"value": self._stored(val, out)},
                                   node.source)
            graph.nodes.pop()  # add_node appended it; it goes where the node was
            nodes.append(const)
            mapping[out.id] = const.output
            known[const.output.id] = val
        return 1

    def _evaluate(self, node: Node, known) -> Optional[List[np.ndarray]]:
        opdef = OPS.get(node.op)
        if opdef is None or not opdef.pure or opdef.regions or not node.inputs:
            return None
        if not all(v.type.is_static for v in node.outputs):  # a flexible size: runtime
            return None
        fn = opdef.impl("fold")
        if fn is None or any(v.id not in known for v in node.inputs):
            return None
        with np.errstate(all="ignore"):
            res = fn(node.params, *[known[v.id] for v in node.inputs])
        if res is None:
            return None
        outs = []
        for r, v in zip(res if isinstance(res, tuple) else (res,), node.outputs):
            r = np.asarray(r)
            want = self.compute_dtype(v.type.dtype.np)
            if r.dtype == np.float32 and want == np.float16:
                r = r.astype(np.float16)  # e.g. a convert to f32 in an fp16 program
            if r.shape != tuple(v.type.shape) or r.dtype != want:
                raise TypeError(f"internal: folding {node.op} gave {r.dtype}{list(r.shape)}, "
                                f"the graph declares {v.type}")
            outs.append(r)
        return outs

    def _stored(self, val: np.ndarray, out) -> np.ndarray:
        """The constant's value in the graph's dtype (the lowering converts it back)."""
        return val.astype(out.type.dtype.np, copy=False)

    def _propagate(self, region: Graph, node: Node, outer, inner, known) -> int:
        """Replace region inputs fed by constant operands with constants; fold the region."""
        read = {v.id for n in region.nodes for v in n.inputs}
        read.update(v.id for _, v in region.outputs)
        mapping = {}
        consts = []
        for o, i in zip(outer, inner):
            v = node.inputs[o]
            if v.node is None or v.node.op != "constant" or region.inputs[i][1].id not in read:
                continue
            const = region.add_node("constant", (), {"value": v.node.params["value"]},
                                    v.node.source)
            region.nodes.pop()
            consts.append(const)
            mapping[region.inputs[i][1].id] = const.output
        if consts:
            for n in region.nodes:
                if any(v.id in mapping for v in n.inputs):
                    n.inputs = tuple(mapping.get(v.id, v) for v in n.inputs)
            region.outputs = [(name, mapping.get(v.id, v)) for name, v in region.outputs]
            region.nodes = consts + region.nodes
        return self.fold(region)


def _drop_unread_known(graph: Graph, known) -> None:
    """Remove nodes whose value is known at compile time and that nobody reads any more
    (the inputs of folded nodes); other nodes are left alone."""
    live = {v.id for _, v in graph.outputs}
    kept: List[Node] = []
    for n in reversed(graph.nodes):
        unread = not any(v.id in live for v in n.outputs)
        if unread and all(v.id in known for v in n.outputs):
            continue
        kept.append(n)
        live.update(v.id for v in n.inputs)
    graph.nodes = kept[::-1]
