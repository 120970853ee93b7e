"""Recognise decomposed normalisations (flax, flax.nnx, equinox, hand-written) as RLX norm ops.

``recognize_norms(graph)`` rewrites ``graph`` in place (a region too: its node owns it, see
ir/graph.py) and returns ``{op: count}``. A pattern becomes a
norm node only when it is mathematically identical to the op: the same groups (checked
element by element, see :mod:`.norm_patterns.analysis`), a divisor equal to the group's
element count (biased variance), eps added inside the square root, and an affine that
varies only along the dims the op's gamma/beta span. The op computes the centred two-pass
variance; a library's ``max(0, E[x²] - E[x]²)`` is the same number up to rounding.
Everything else (eps outside the root, ``x / (std + eps)``, unbiased variance, a norm
over axes the ops cannot express, a stat through a dtype conversion) stays decomposed.

Roots are tried from the end of the graph backwards, so the outermost ``·gamma + beta`` is
taken before the bare normalisation inside it; an rsqrt/sqrt already rewritten is not
matched again. Old nodes whose values are still read elsewhere (a mean, a variance, the
normalised x) stay; ``dce`` drops the rest.
"""
from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..ir import Graph, Node, Value, verify
from .norm_patterns.analysis import Analysis, Elem, combine
from .norm_patterns.classify import (Candidate, ParamPlan, bn_axis, build_param, candidates,
                                     param_plan, running_update, shortest_float)
from .rewrite import Appender, dce, users

__all__ = ["recognize_norms"]

_MAX_LEAVES = 6  # factors of one product: x-part, inv, gamma, and a few constant 1s


@dataclass
class Match:
    root: Value
    op: str
    x: Tuple[Value, Optional[np.ndarray]]  # base, and the base flat index per element of y
    eps: float
    inv: int
    params: dict
    gamma: Optional[ParamPlan]
    beta: Optional[ParamPlan]
    extra: List = field(default_factory=list)  # operands after gamma/beta (Value/ParamPlan)
    more_outputs: List[Value] = field(default_factory=list)  # replaced by outputs 1, 2, ...


def recognize_norms(graph: Graph) -> Dict[str, int]:
    """Rewrite recognised normalisations into norm nodes; returns ``{op: count}``."""
    an = Analysis(graph)
    found: Counter = Counter()
    consumed: set = set()
    readers = _readers(graph)
    edits = _Edits(graph)
    for node in reversed(list(graph.nodes)):
        if not _root_candidate(node):
            continue
        y = node.output
        if not (y.dtype.is_float and y.type.is_static and y.type.rank >= 1):
            continue
        m = _match(an, edits, y, consumed, readers)
        if m is not None:
            _rewrite(graph, m, edits)
            consumed.add(m.inv)
            found[m.op] += 1
    if found:
        edits.place()
        _stable_toposort(graph)
        dce(graph)
        verify(graph)
    return dict(found)


# -- matching -----------------------------------------------------------------------------
def _root_candidate(node) -> bool:
    """Where a normalisation can end: its affine add/mul, the normalising mul/div, or a
    reshape back from a grouped layout (equinox's GroupNorm without affine)."""
    if len(node.outputs) != 1:
        return False
    if node.op in ("add", "mul", "div"):
        return True
    src = node.inputs[0].node if node.op in ("reshape", "transpose") else None
    return src is not None and src.op in ("mul", "div", "reshape", "transpose")


def _flatten(v: Value, power: int = 1, out=None, tree=None) -> List[Tuple[Value, int]]:
    """Factors of a mul/div tree with their power (+1 multiplied, -1 divided by); the
    products traversed are appended to ``tree``."""
    out = [] if out is None else out
    n = v.node
    if n is not None and n.op in ("mul", "div") and len(out) <= _MAX_LEAVES:
        if tree is not None:
            tree.append(v)
        _flatten(n.inputs[0], power, out, tree)
        _flatten(n.inputs[1], power if n.op == "mul" else -power, out, tree)
    else:
        out.append((v, power))
    return out


def _readers(graph: Graph) -> Dict[int, List[int]]:
    """value id -> ids of the values its readers define (-1 for a graph output, or for a
    reader with several outputs)."""
    out: Dict[int, List[int]] = {}
    for n in graph.nodes:
        me = n.outputs[0].id if len(n.outputs) == 1 else -1
        for v in n.inputs:
            out.setdefault(v.id, []).append(me)
    for _, v in graph.outputs:
        out.setdefault(v.id, []).append(-1)
    return out


def _read_elsewhere(readers, root: Value, tree: List[Value]) -> bool:
    """Whether a product inside the matched tree (other than the root) is read outside it:
    then a smaller root is the right match (e.g. ``y = norm(x)`` returned and also
    ``y * 2``), not a norm node with affine next to a still-decomposed ``y``. (``readers``
    is computed once; rewritten roots still read their trees, which only errs towards the
    smaller match.)"""
    inside = {v.id for v in tree} | {root.id}
    return any(r not in inside for v in tree if v.id != root.id for r in readers.get(v.id, ()))


def _match(an: Analysis, edits: "_Edits", y: Value, consumed, readers) -> Optional[Match]:
    splits = [(y, None)]
    if y.node.op == "add":
        a, b = y.node.inputs
        splits = [(a, b), (b, a), (y, None)]
    for prod, beta in splits:
        if prod.shape != y.shape or (beta is not None and beta.dtype != y.dtype):
            continue
        tree: List = []
        leaves = [(v, p) for v, p in _flatten(prod, tree=tree) if an.scalar(v) != 1.0]
        if not leaves or len(leaves) > _MAX_LEAVES:
            continue
        core = _statistics_core(an, leaves, y.shape, consumed)
        if core is not None:
            e, rest = core
            m = _choose(an, edits, y, e, rest, beta)
        else:
            m = _frozen_batch_norm(an, y, leaves, beta, consumed)
        if m is not None:
            if not _read_elsewhere(readers, y, tree + ([prod] if beta is not None else [])):
                return m
    return None


def _gamma(rest, dtype) -> Tuple[bool, Optional[Value]]:
    if not rest:
        return True, None
    if len(rest) == 1 and rest[0][1] == 1 and rest[0][0].dtype == dtype:
        return True, rest[0][0]
    return False, None


def _statistics_core(an: Analysis, leaves, shape, consumed):
    """-> (the normalised-x Elem, the other factors) or None. Either an inverse std factor
    and an x-part factor over the same groups, or one factor that is already normalised
    (equinox's GroupNorm normalises in the grouped layout and reshapes back)."""
    for i, (v, p) in enumerate(leaves):
        s = an.stat(v)
        if s is None or s.inv is None or s.inv in consumed:
            continue
        for j, (u, q) in enumerate(leaves):
            if j == i or q != 1 or u.shape != shape:
                continue
            e = combine(an.elem(u), s, p)
            if e is not None:
                return e, [lf for k, lf in enumerate(leaves) if k not in (i, j)]
    for i, (v, p) in enumerate(leaves):
        if p == 1 and v.shape == shape and v.node is not None and v.node.op in (
                "reshape", "transpose", "broadcast_in_dim", "mul", "div"):
            e = an.elem(v)
            if e.kind in ("norm", "rms") and e.inv not in consumed:
                return e, leaves[:i] + leaves[i + 1:]
    return None


def _x_operand(e: Elem, shape) -> Optional[Tuple[Value, Optional[np.ndarray]]]:
    """x in y's layout: the base itself, or a reshape of it (row-major order preserved)."""
    if e.pos is None:
        return (e.base, None) if tuple(e.base.shape) == tuple(shape) else None
    if np.array_equal(e.pos.ravel(), np.arange(e.pos.size)):
        return e.base, e.pos
    return None


def _pick(cands: List[Candidate], gamma, beta, shape):
    """-> (candidate, gamma plan, beta plan): the first candidate whose gamma/beta fit
    without a broadcast, else the first whose gamma/beta fit at all (e.g. a per-channel
    scale of a LayerNorm over (H, W, C))."""
    fitting = []
    for c in cands:
        plans = [param_plan(t, shape, c.keep) if t is not None else None for t in (gamma, beta)]
        if all(pl is not None for pl, t in zip(plans, (gamma, beta)) if t is not None):
            if not any(pl.broadcast for pl in plans if pl is not None):
                return (c, *plans)
            fitting.append((c, *plans))
    return fitting[0] if fitting else None


def _choose(an, edits, y, e: Elem, rest, beta) -> Optional[Match]:
    ok, gamma = _gamma(rest, y.dtype)
    xo = _x_operand(e, y.shape) if ok else None
    if xo is None:
        return None
    labels = e.groups[e.position()]
    cands = candidates(labels, e.kind)
    extra, more = [], []
    if e.kind == "norm":
        bn = _batch_stats_update(an, edits, e, labels)
        if bn is not None:
            cands.insert(0, bn[0])
            extra, more = bn[1], bn[2]
    picked = _pick(cands, gamma, beta, y.shape)
    if picked is None:
        return None
    c, gplan, bplan = picked
    if c.op != "batch_norm_train":
        extra, more = [], []
    return Match(y, c.op, xo, shortest_float(e.eps, y.dtype), e.inv, c.params,
                 gplan, bplan, extra, more)


def _batch_stats_update(an, edits, e: Elem, labels):
    """flax's BatchNorm(use_running_average=False): the graph must also compute
    ``m·running + (1-m)·batch_stat`` for the mean and the (biased) variance of these groups,
    with the same m; those values become the node's outputs 1 and 2."""
    a = bn_axis(labels)
    if a is None:
        return None
    reps = np.moveaxis(labels, a, 0).reshape(labels.shape[a], -1)[:, 0]
    found = {}
    for n in edits.adds(reps.shape):
        for want in ("mean", "var"):
            if want not in found:
                u = running_update(an, n.output, want, e, reps)
                if u is not None:
                    found[want] = u
    if len(found) < 2 or found["mean"].momentum != found["var"].momentum:
        return None
    cand = Candidate("batch_norm_train", {"axis": a, "momentum": found["mean"].momentum}, (a,))
    return (cand, [found["mean"].running, found["var"].running],
            [found["mean"].value, found["var"].value])


def _depends_on(v: Value, target: Value) -> bool:
    stack, seen = [v], set()
    while stack:
        u = stack.pop()
        if u.id == target.id:
            return True
        if u.id in seen or u.node is None:
            continue
        seen.add(u.id)
        stack.extend(u.node.inputs)
    return False


def _frozen_batch_norm(an: Analysis, y: Value, leaves, beta, consumed) -> Optional[Match]:
    """``(x - mean)·rsqrt(var + eps)`` (or ``/ sqrt(var + eps)``) with per-channel mean/var
    that do not depend on x (running statistics) -> batch_norm."""
    for i, (v, p) in enumerate(leaves):
        n = v.node
        if n is None or (n.op, p) not in (("rsqrt", 1), ("sqrt", -1)) or v.id in consumed:
            continue
        var, eps = n.inputs[0], 0.0
        t = var.node
        if t is not None and t.op == "add":
            for s, c in (t.inputs, t.inputs[::-1]):
                ce = an.scalar(c)
                if ce is not None and ce >= 0 and s.shape == var.shape:
                    var, eps = s, ce
                    break
        for j, (u, q) in enumerate(leaves):
            if j == i or q != 1 or u.shape != y.shape or u.node is None or u.node.op != "sub":
                continue
            x, mean = u.node.inputs
            ok, gamma = _gamma([lf for k, lf in enumerate(leaves) if k not in (i, j)], y.dtype)
            if not ok or x.shape != y.shape or _depends_on(mean, x) or _depends_on(var, x):
                continue
            if var.dtype != y.dtype or mean.dtype != y.dtype:
                continue
            for axis in range(len(y.shape) - 1, -1, -1):
                plans = [param_plan(t, y.shape, (axis,)) if t is not None else None
                         for t in (gamma, beta, mean, var)]
                if all(pl is not None for pl, t in zip(plans, (gamma, beta, mean, var))
                       if t is not None):
                    return Match(y, "batch_norm", (x, None), shortest_float(eps, y.dtype),
                                 v.id, {"axis": axis}, plans[0], plans[1], extra=plans[2:])
    return None


# -- rewriting ----------------------------------------------------------------------------
def _rewrite(graph: Graph, m: Match, edits: "_Edits") -> None:
    app = Appender(graph, source=m.root.node.source)
    shape = m.root.shape
    base, pos = m.x
    x = base if tuple(base.shape) == tuple(shape) else app.add("reshape", base, shape=shape)
    inputs = [x] + [build_param(app, p) for p in (m.gamma, m.beta) if p is not None]
    inputs += [build_param(app, t) if isinstance(t, ParamPlan) else t for t in m.extra]
    node = app.add_node(m.op, inputs, eps=m.eps, has_gamma=m.gamma is not None,
                        has_beta=m.beta is not None, **m.params)
    edits.place_before(m.root.node, app.nodes)
    mapping = {m.root.id: node.outputs[0]}
    mapping.update({old.id: new for old, new in zip(m.more_outputs, node.outputs[1:])})
    edits.substitute(mapping)


class _Edits:
    """The rewrites' edits at a cost linear in the graph, not in the graph times the number
    of norms (what ``place_before`` and ``substitute`` cost, each a pass over the graph):
    readers are found through a map of who reads each value (kept up to date), and the new
    nodes are moved before their roots in one pass at the end (``place``), giving the order
    the moves one by one would. Matching in between sees the new nodes at the end of the
    graph, which changes nothing: it reads producers and the graph's ``add`` nodes only
    (``_batch_stats_update``, through ``adds``, listed once), and a rewrite makes no
    ``add``."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._readers: Optional[Dict[int, List[Node]]] = None  # made at the first rewrite
        self.before: Dict[int, List[Node]] = {}  # id(root node) -> new nodes to go before it
        self._adds: Optional[Dict[tuple, List[Node]]] = None

    def adds(self, shape) -> List[Node]:
        """The graph's single-output ``add`` nodes of ``shape``, in graph order (made once:
        rewrites add no ``add`` node and remove none)."""
        if self._adds is None:
            self._adds = {}
            for n in self.graph.nodes:
                if n.op == "add" and len(n.outputs) == 1:
                    self._adds.setdefault(tuple(n.output.shape), []).append(n)
        return self._adds.get(tuple(shape), [])

    @property
    def readers(self) -> Dict[int, List[Node]]:
        """value id -> nodes that read it (or did: see ``substitute``); listed twice is
        harmless."""
        if self._readers is None:
            self._readers = users(self.graph)
        return self._readers

    def _reads(self, node: Node) -> None:
        readers = self.readers
        for v in node.inputs:
            readers.setdefault(v.id, []).append(node)

    def place_before(self, anchor: Node, nodes: List[Node]) -> None:
        for n in nodes:
            assert n.op != "add", "a norm rewrite made an add: adds() would miss it"
            self._reads(n)
        self.before.setdefault(id(anchor), []).extend(nodes)

    def substitute(self, mapping: Dict[int, Value]) -> None:
        """``substitute(graph, mapping)``. A node listed as a reader of a value it no longer
        reads is left as it is (the rewrite is ``mapping.get``, idempotent)."""
        done = set()
        readers = self.readers
        for old in mapping:
            for n in readers.get(old, ()):
                if id(n) not in done:
                    done.add(id(n))
                    n.inputs = tuple(mapping.get(v.id, v) for v in n.inputs)
                    self._reads(n)
        g = self.graph
        g.outputs = [(name, mapping.get(v.id, v)) for name, v in g.outputs]

    def place(self) -> None:
        """Move the new nodes (appended to the graph) before their roots."""
        new = {id(n) for ns in self.before.values() for n in ns}
        order: List[Node] = []
        for n in self.graph.nodes:
            if id(n) not in new:
                order.extend(self.before.get(id(n), ()))
                order.append(n)
        self.graph.nodes = order


def _stable_toposort(graph: Graph) -> None:
    """Restore topological order, moving as little as possible (a batch_norm_train placed
    at its y may define running statistics read earlier). An order that is already
    topological is what the sort would give back: it is kept without sorting."""
    defined = {v.id for _, v in graph.inputs}
    for n in graph.nodes:
        if not all(v.id in defined for v in n.inputs):
            break
        defined.update([v.id for v in n.outputs])
    else:
        return
    index = {id(n): i for i, n in enumerate(graph.nodes)}
    producer = {v.id: n for n in graph.nodes for v in n.outputs}
    waiting = {id(n): 0 for n in graph.nodes}
    readers: Dict[int, list] = {}
    for n in graph.nodes:
        for pred in {id(producer[v.id]): producer[v.id] for v in n.inputs
                     if v.id in producer}.values():
            waiting[id(n)] += 1
            readers.setdefault(id(pred), []).append(n)
    ready = [(index[id(n)], n) for n in graph.nodes if waiting[id(n)] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(n)
        for r in readers.get(id(n), ()):
            waiting[id(r)] -= 1
            if waiting[id(r)] == 0:
                heapq.heappush(ready, (index[id(r)], r))
    if len(order) == len(graph.nodes):
        graph.nodes = order
