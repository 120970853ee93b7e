"""Exact simplifications of the RLX graph before lowering (each keeps every value
bit-identical; tests/transforms/test_simplify.py checks the numerics are unchanged).

``drop_broadcasts``: a ``broadcast_in_dim`` read only by elementwise binary ops whose other
operand already has the full shape is replaced by a reshape that only inserts size-1
dims: the binary op broadcasts implicitly (MIL does too), so the values are identical and
the program no longer materialises (tiles) the broadcast tensor; where x only lacks
leading size-1 dims, x itself is the operand (``drop_unit_reshapes`` does the same for
explicit reshapes, e.g. flax's bias reshape). ``simplify`` then runs the passes of
``cse.py`` (common subexpressions, split backward as concatenate) and ``merge_slices``
(slices cutting one axis -> one split); tests/transforms/test_passes.py, tests/transforms/test_peephole.py.

Cost, for n nodes and e inputs: ``collapse_reshapes`` and ``drop_unit_reshapes`` one walk
with a producer / reader map, then one ``substitute`` and one ``dce``: O(n + e).
``drop_broadcasts`` one walk, its reshapes placed in one pass at the end
(``rewrite.place_all``): O(n + e) (one pass per replaced broadcast before: quadratic in
the depth). tests/memory/test_compile_work.py bounds the whole compile's work on a doubled depth.

Every pass here changes the graph it is given, in place (and returns a count); run on a
region (``all_regions``), it changes a graph that its node owns (ir/graph.py), never a
region shared with another node.
"""
from __future__ import annotations

from ..ir import Graph, verify
from ..ir.ops import ARITH_BINARY, COMPARE, LOGIC_BINARY
from .cse import concat_pad_sums, cse
from .merge_slices import merge_slices
from .rewrite import Appender, dce, output_ids, place_all, substitute, users

_IMPLICIT = set(ARITH_BINARY) | set(COMPARE) | set(LOGIC_BINARY)


def drop_broadcasts(graph: Graph) -> int:
    readers = users(graph)
    outs = output_ids(graph)
    changed = 0
    before = {}  # id(broadcast) -> its reshape, placed before it in one pass at the end
    for node in list(graph.nodes):
        if node.op != "broadcast_in_dim":
            continue
        b = node.output
        if b.id in outs:
            continue
        uses = readers.get(b.id, [])
        if not uses or not all(_full_partner(u, b) for u in uses):
            continue
        x, shape, dims = node.inputs[0], node.params["shape"], node.params["dims"]
        placed = [1] * len(shape)
        for i, d in enumerate(dims):
            placed[d] = x.shape[i]
        ap = Appender(graph, node.source)
        # Only size-1 dims in front of x's own: implicit (numpy / MIL) broadcasting aligns
        # trailing dims, so x itself is the operand.
        lead = len(placed) - len(x.shape)
        y = (x if all(d == 1 for d in placed[:lead]) and tuple(placed[lead:]) == tuple(x.shape)
             else ap.add("reshape", x, shape=tuple(placed)))
        if ap.nodes:
            before[id(node)] = ap.nodes
        for u in uses:
            u.inputs = tuple(y if v is b else v for v in u.inputs)
        changed += 1
    place_all(graph, before)
    if changed:
        dce(graph)
    return changed


def _full_partner(user, b) -> bool:
    if user.op not in _IMPLICIT or len(user.inputs) != 2:
        return False
    a, c = user.inputs
    other = c if a is b else a
    return other is not b and tuple(other.shape) == tuple(b.shape)


def collapse_reshapes(graph: Graph) -> int:
    """reshape(reshape(x)) -> reshape(x); a reshape to x's own shape -> x. Exact: a
    reshape only relabels the row-major element order."""
    producer = {v.id: n for n in graph.nodes for v in n.outputs}
    mapping, changed = {}, 0
    for node in graph.nodes:
        if node.op != "reshape":
            continue
        src = node.inputs[0]
        src = mapping.get(src.id, src)
        inner = producer.get(src.id)
        if inner is not None and inner.op == "reshape":
            src = inner.inputs[0]
        if tuple(src.shape) == tuple(node.output.shape):
            mapping[node.output.id] = src
            changed += 1
        elif src is not node.inputs[0]:
            node.inputs = (src,)
            changed += 1
    if changed:
        substitute(graph, mapping)
        dce(graph)
    return changed


def drop_unit_reshapes(graph: Graph) -> int:
    """A reshape that only puts size-1 dims in front of x, read only by elementwise binary
    ops whose other operand has at least the reshape's rank: the binary op broadcasts x
    implicitly to the same result shape, so it reads x itself. Exact (no value changes)."""
    readers = users(graph)
    outs = output_ids(graph)
    changed = 0
    for node in graph.nodes:
        if node.op != "reshape" or node.output.id in outs:
            continue
        x, r = node.inputs[0], node.output
        lead = len(r.shape) - len(x.shape)
        if lead <= 0 or any(d != 1 for d in r.shape[:lead]) or \
                tuple(r.shape[lead:]) != tuple(x.shape):
            continue
        uses = readers.get(r.id, [])
        if not uses or not all(_higher_rank_partner(u, r) for u in uses):
            continue
        for u in uses:
            u.inputs = tuple(x if v is r else v for v in u.inputs)
        changed += 1
    if changed:
        dce(graph)
    return changed


def _higher_rank_partner(user, r) -> bool:
    if user.op not in _IMPLICIT or len(user.inputs) != 2:
        return False
    a, c = user.inputs
    other = c if a is r else a
    return other is not r and len(other.shape) >= len(r.shape)


def simplify(graph: Graph) -> Graph:
    # The passes do not verify one by one: one check when any of them changed.
    if (drop_broadcasts(graph) + collapse_reshapes(graph) + drop_unit_reshapes(graph)
            + concat_pad_sums(graph) + cse(graph) + merge_slices(graph)):
        verify(graph)
    return graph
