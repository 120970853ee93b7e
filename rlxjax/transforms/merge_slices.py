"""``merge_slices``: slices of one value that cut one axis into pieces become one ``split``
node (one MIL ``split`` op with several outputs instead of one ``slice_by_index`` per
piece): q, k, v sliced by hand out of one projection, ``x[..., :d]`` and ``x[..., d:]``.

Which slices: stride 1, the whole of every axis but one, pairwise disjoint along it, of a
value with a static shape. The split's pieces are those ranges plus the gaps between and
around them (outputs nobody reads). Exact: a split only copies elements.

When it pays: the split replaces at least two slices (one slice alone stays a slice), and
the gaps hold at most as many elements as the pieces read: a split writes every piece, so
its gaps are copies nobody asked for; bounded so, the split moves at most twice the bytes
the slices did, for one op instead of two or more. Identical slices are merged by ``cse``
first. jnp.split / lax.split become a split in the frontend already (their VJP is then a
concatenate); the same rule then trims those whose read pieces do not pay (``trim_splits``:
one read piece of six is a slice again). This pass runs after the grad transform, so
slices keep their own VJP (tests/transforms/test_peephole.py).

Cost: O(nodes + slices log slices): the slices grouped in one walk, each group sorted, the
splits placed before their first slices in one pass at the end (``rewrite.place_all``; one
pass per split before: O(nodes x splits), quadratic in the depth), one ``substitute`` and
one ``dce``. ``trim_splits`` still places each of its (rare) slices with a pass.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List

from ..ir import Graph
from .rewrite import Appender, dce, output_ids, place_all, substitute, users


def _one_axis(node):
    """(axis, lo, hi) of a stride-1 slice that takes every other axis whole, else None."""
    x = node.inputs[0]
    if not x.type.is_static or set(node.params["strides"]) != {1}:
        return None
    cut = [(i, lo, hi) for i, (lo, hi, d) in enumerate(
        zip(node.params["start"], node.params["limit"], x.shape)) if (lo, hi) != (0, d)]
    return cut[0] if len(cut) == 1 and cut[0][2] > cut[0][1] else None


def _pays(read: int, total: int, pieces: int) -> bool:
    """A split is worth it for ``pieces`` read pieces holding ``read`` of ``total``."""
    return pieces >= 2 and total - read <= read


def trim_splits(graph: Graph) -> int:
    """The same rule for split nodes (jnp.split in the frontend) once the program is known:
    one whose read pieces are fewer than two, or smaller than its unread ones, becomes a
    slice per read piece. Returns how many splits were replaced."""
    readers = users(graph)
    outs = output_ids(graph)
    mapping, changed = {}, 0
    for node in list(graph.nodes):
        if node.op != "split":
            continue
        axis, sizes, x = node.params["axis"], node.params["sizes"], node.inputs[0]
        read = [v.id in outs or bool(readers.get(v.id)) for v in node.outputs]
        if _pays(sum(n for n, r in zip(sizes, read) if r), x.shape[axis], sum(read)):
            continue
        ap = Appender(graph, node.source)
        at = 0
        for v, n, r in zip(node.outputs, sizes, read):
            if r:
                lo, hi = [0] * x.type.rank, list(x.shape)
                lo[axis], hi[axis] = at, at + n
                mapping[v.id] = ap.add("slice", x, start=tuple(lo), limit=tuple(hi),
                                       strides=(1,) * x.type.rank)
            at += n
        ap.place_before(node)
        changed += 1
    if changed:
        substitute(graph, mapping)
        dce(graph)
    return changed


def merge_slices(graph: Graph) -> int:
    """Replace groups of slices by split nodes (and splits that do not pay by slices:
    ``trim_splits``); returns how many nodes were removed or replaced."""
    changed = trim_splits(graph)
    groups: Dict[tuple, List] = defaultdict(list)  # (x id, axis) -> [(lo, hi, node)]
    for node in graph.nodes:
        if node.op == "slice":
            cut = _one_axis(node)
            if cut is not None:
                groups[(node.inputs[0].id, cut[0])].append((cut[1], cut[2], node))
    mapping = {}
    before: Dict[int, List] = {}  # id(first slice of a group) -> its split, placed at the end
    position = None
    for (_, axis), cuts in groups.items():
        cuts.sort(key=lambda t: (t[0], t[1]))
        x = cuts[0][2].inputs[0]
        sizes, pieces, at, used = [], [], 0, 0  # pieces: the slice read as each piece
        for lo, hi, node in cuts:
            if lo < at:
                break  # overlapping (or a duplicate cse did not merge): leave the group
            if lo > at:
                sizes.append(lo - at)
                pieces.append(None)
            sizes.append(hi - lo)
            pieces.append(node)
            used += hi - lo
            at = hi
        else:
            if at < x.shape[axis]:
                sizes.append(x.shape[axis] - at)
                pieces.append(None)
            if not _pays(used, x.shape[axis], len(cuts)):
                continue
            if position is None:
                position = {id(n): i for i, n in enumerate(graph.nodes)}
            first = min((n for _, _, n in cuts), key=lambda n: position[id(n)])
            ap = Appender(graph, cuts[0][2].source)
            outs = ap.add_multi("split", [x], axis=axis, sizes=tuple(sizes))
            before[id(first)] = ap.nodes  # (each slice is in one group: anchors differ)
            for node, out in zip(pieces, outs):
                if node is not None:
                    mapping[node.output.id] = out
            changed += len(cuts) - 1
    place_all(graph, before)
    if changed:
        substitute(graph, mapping)
        dce(graph)
    return changed
