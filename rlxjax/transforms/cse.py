"""Exact program-shrinking passes on the RLX graph (tests/transforms/test_passes.py checks each one
leaves every output bit-identical and equal to JAX's).

``cse``: a node with the same op, the same inputs and equal parameters as an earlier one
computes the same values (RLX ops are deterministic functions of their inputs and
parameters); its readers read the earlier node's outputs. Region ops (control flow) and
random draws are left alone.

``concat_pad_sums``: the backward pass of a split (``jnp.split``, slicing q/k/v out of one
projection) is a sum of zero-padded cotangents, one ``pad`` and one ``add`` per piece. When
the pieces sit in disjoint ranges of one axis, that sum is ``concatenate(pieces, zero gaps)
+ 0.0``: every position receives one piece's value plus zeros only, and ``v + 0.0`` is what
the sum of ``v`` with any number of ``+0.0`` gives (``v`` itself, or ``+0.0`` for ``-0.0``),
so the result is bit-identical with two ops instead of 2n - 1.

Cost, for n nodes and e inputs: ``cse`` one walk with a dict look-up per node (its key: op,
input ids, hashed params), then one ``substitute`` and one ``dce``: O(n + e).
``concat_pad_sums`` places each rewritten sum and substitutes its value with a pass over the
graph each: O(n x rewritten sums) (a split's backward per layer: quadratic in the depth).
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

from ..ir import Graph
from ..ir.ops import OPS
from .rewrite import Appender, dce, output_ids, substitute, users


def _mergeable(node) -> bool:
    """A pure op (not a random draw: a fresh value per op; not a state access) without
    regions (region graphs are compared by identity, never by content), as its record says."""
    opdef = OPS.get(node.op)
    return opdef is not None and opdef.pure and not opdef.regions


def cse(graph: Graph) -> int:
    """Merge duplicate nodes; returns how many were removed."""
    seen: Dict[tuple, object] = {}
    mapping: Dict[int, object] = {}
    outs = output_ids(graph)
    removed = 0
    for node in graph.nodes:
        if any(v.id in mapping for v in node.inputs):
            node.inputs = tuple(mapping.get(v.id, v) for v in node.inputs)
        if not _mergeable(node):
            continue
        try:
            key = (node.op, tuple(v.id for v in node.inputs), node.params.key())
        except TypeError:  # an unhashable parameter: leave the node alone
            continue
        prev = seen.get(key)
        if prev is None:
            seen[key] = node
            continue
        if any(v.id in outs for v in node.outputs):
            continue
        for v, p in zip(node.outputs, prev.outputs):
            mapping[v.id] = p
        removed += 1
    if removed:
        substitute(graph, mapping)
        dce(graph)
    return removed


def _zero_pad_axis(node, producer):
    """(axis, lo) if ``node`` pads its input with +0.0 along one axis only, else None."""
    if node.op != "pad":
        return None
    c = producer.get(node.inputs[1].id)
    if c is None or c.op != "constant":
        return None
    val = np.asarray(c.params["value"])
    if val.size != 1 or val.reshape(()) != 0 or np.signbit(val.reshape(())):
        return None
    axis = None
    for i, (lo, hi, interior) in enumerate(node.params["config"]):
        if interior != 0 or lo < 0 or hi < 0:
            return None
        if lo or hi:
            if axis is not None:
                return None
            axis = i
    return None if axis is None else (axis, node.params["config"][axis][0])


def concat_pad_sums(graph: Graph) -> int:
    """Rewrite add-trees of zero pads with disjoint support as concatenate + 0.0."""
    producer = {v.id: n for n in graph.nodes for v in n.outputs}
    readers = users(graph)
    outs = output_ids(graph)

    def single_use(v):
        return v.id not in outs and len(readers.get(v.id, ())) == 1

    leaves: Dict[int, List] = {}  # add node id -> the pad nodes under it (a pure tree)
    for node in graph.nodes:
        if node.op != "add" or not node.output.dtype.is_float:
            continue
        got = []
        for v in node.inputs:
            src = producer.get(v.id)
            if src is None or not single_use(v) or tuple(v.shape) != tuple(node.output.shape):
                got = None
                break
            if src.op == "add" and id(src) in leaves:
                got += leaves[id(src)]
            elif _zero_pad_axis(src, producer) is not None:
                got.append(src)
            else:
                got = None
                break
        if got:
            leaves[id(node)] = got
    inner = {id(producer[v.id]) for n in graph.nodes if id(n) in leaves for v in n.inputs
             if v.id in producer and producer[v.id].op == "add"}
    changed = 0
    for node in list(graph.nodes):
        if id(node) not in leaves or id(node) in inner:
            continue
        pads = leaves[id(node)]
        placed = [(_zero_pad_axis(p, producer), p.inputs[0]) for p in pads]
        axis = placed[0][0][0]
        if any(a != axis for (a, _), _ in placed):
            continue
        placed.sort(key=lambda t: t[0][1])
        shape, dt = tuple(node.output.shape), node.output.dtype.np
        plan, at, ok = [], 0, True  # values in order, or ints: the size of a zero gap
        for (_, lo), x in placed:
            if lo < at:
                ok = False
                break
            if lo > at:
                plan.append(lo - at)
            plan.append(x)
            at = lo + x.shape[axis]
        if not ok or at > shape[axis]:
            continue
        if at < shape[axis]:
            plan.append(shape[axis] - at)
        ap = Appender(graph, node.source)
        pieces = []
        for item in plan:
            if isinstance(item, int):
                gap = list(shape)
                gap[axis] = item
                item = ap.constant(np.zeros(gap, dt))
            pieces.append(item)
        cat = ap.add("concatenate", *pieces, axis=axis) if len(pieces) > 1 else pieces[0]
        y = ap.add("add", cat, ap.constant(np.zeros((), dt)))
        ap.place_before(node)
        substitute(graph, {node.output.id: y})
        changed += 1
    if changed:
        dce(graph)
    return changed
