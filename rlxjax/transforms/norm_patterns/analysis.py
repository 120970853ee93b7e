"""What a value computes, in terms of one tensor ``base``: the analysis behind norm recognition.

Two kinds of facts are derived, bottom-up and memoised per value:

- :class:`Elem`: every element of the value is a function of ONE element of ``base``
  (``pos`` says which, as a base flat index): ``x`` itself (through reshapes/transposes),
  ``x²``, ``x - mean(group)``, its square, or the finished normalisation ``(x - mean)·rstd``
  / ``x·rrms``.
- :class:`Stat`: every element of the value is a statistic of one GROUP of ``base``
  elements (``at`` says which group): a sum, mean, mean of squares, variance (centred or
  ``E[x²] - E[x]²``), and ``rsqrt``/``sqrt`` of a variance or mean square plus eps.

Groups are named by their representative, the smallest base flat index in the group, so two
facts about the same partition compare with ``np.array_equal``. Index arrays are computed
by running the shape ops themselves (reshape, transpose, broadcast_in_dim) on ``arange``:
data movement applied to indices is exactly the movement of the data, so no case analysis of
reshape layouts (flax's grouped ``[N, H, W, G, C/G]``, equinox's vmapped ``[N, G, C/G, L]``)
is needed, and no approximation is made.

Every rule is an exact algebraic identity; the only mathematically neutral wrappers seen
through are ``max(0, var)`` (a variance is non-negative), ``select`` on a constant predicate
(``jnp.var``'s ``where(count > 0, var, nan)``), and ``x - 0`` (flax's RMSNorm).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, Optional

import numpy as np

from ...ir import Graph, Value

_SHAPE_OPS = ("reshape", "transpose", "broadcast_in_dim")
_FOLDABLE = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "max": np.maximum, "min": np.minimum, "gt": np.greater, "ge": np.greater_equal,
    "lt": np.less, "le": np.less_equal, "eq": np.equal, "ne": np.not_equal,
}
_FOLD_LIMIT = 64  # constants larger than this are not folded (stats never need them)


@dataclass(frozen=True)
class Elem:
    kind: str                  # x | x2 | xc | xc2 | norm | rms
    base: Value
    pos: Optional[np.ndarray]  # value shape -> base flat index; None: the value is base
    groups: Optional[np.ndarray] = None  # base flat -> group rep (xc, xc2, norm, rms)
    eps: Optional[float] = None          # norm, rms
    inv: Optional[int] = None            # norm, rms: id of the rsqrt/sqrt value used

    def position(self) -> np.ndarray:
        if self.pos is not None:
            return self.pos
        return np.arange(_size(self.base.shape)).reshape(self.base.shape)


@dataclass(frozen=True)
class Stat:
    kind: str            # sum sumsq sumdev2 | mean meansq var sqmean | rstd rrms std rootms
    base: Value
    groups: np.ndarray   # base flat -> group rep
    at: np.ndarray       # value shape -> group rep
    count: int           # elements per group
    eps: Optional[float] = None
    inv: Optional[int] = None  # rstd/rrms/std/rootms: id of the rsqrt/sqrt value


_SUM_TO_MEAN = {"sum": "mean", "sumsq": "meansq", "sumdev2": "var"}
_ROOT = {("rsqrt", "var"): "rstd", ("rsqrt", "meansq"): "rrms",
         ("sqrt", "var"): "std", ("sqrt", "meansq"): "rootms"}


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def apply_shape_op(node, arr: np.ndarray) -> np.ndarray:
    """Run a shape op on an index array (exactly the op's data movement)."""
    p = node.params
    if node.op == "reshape":
        return arr.reshape(p["shape"])
    if node.op == "transpose":
        return arr.transpose(p["perm"])
    dims = list(p["dims"])  # broadcast_in_dim: operand dim i -> output dim dims[i]
    order = np.argsort(dims)
    expanded = [1] * len(p["shape"])
    moved = arr.transpose(order)
    for i, d in enumerate(sorted(dims)):
        expanded[d] = moved.shape[i]
    return np.broadcast_to(moved.reshape(expanded), p["shape"])


def _self_square(node) -> bool:
    """square(a), integer_pow(a, 2) or mul(a, a)."""
    return (node.op == "square" or (node.op == "integer_pow" and node.params["y"] == 2)
            or (node.op == "mul" and node.inputs[0].id == node.inputs[1].id))


class Analysis:
    """Memoised Elem/Stat analysis of the values of one graph."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self._elem: Dict[int, Elem] = {}
        self._stat: Dict[int, Optional[Stat]] = {}
        self._const: Dict[int, Optional[np.ndarray]] = {}

    # -- constants ----------------------------------------------------------------
    def const(self, v: Value) -> Optional[np.ndarray]:
        """The value of ``v`` if it is computed from constants only (small tensors)."""
        if v.id not in self._const:
            self._const[v.id] = self._fold(v)
        return self._const[v.id]

    def _fold(self, v: Value) -> Optional[np.ndarray]:
        n = v.node
        if n is None or (v.type.is_static and _size(v.shape) > _FOLD_LIMIT):
            return None
        if n.op == "constant":
            return np.asarray(n.params["value"])
        args = [self.const(u) for u in n.inputs]
        if any(a is None for a in args):
            return None
        with np.errstate(all="ignore"):
            if n.op == "convert":
                out = args[0].astype(n.params["dtype"].np)
            elif n.op in _SHAPE_OPS:
                out = apply_shape_op(n, args[0])
            elif n.op == "neg":
                out = -args[0]
            elif n.op in _FOLDABLE:
                out = _FOLDABLE[n.op](*args)
            else:
                return None
        return np.asarray(out, dtype=v.dtype.np)

    def scalar(self, v: Value) -> Optional[float]:
        """``v``'s value if it is a constant of one element (it broadcasts like a scalar)."""
        c = self.const(v)
        if c is None or c.size != 1:
            return None
        return float(c.reshape(()))

    def is_zero(self, v: Value) -> bool:
        while v.node is not None and v.node.op in _SHAPE_OPS:  # a moved/broadcast zero
            v = v.node.inputs[0]
        c = self.const(v)
        return c is not None and c.size > 0 and not np.any(c)

    # -- element-wise facts --------------------------------------------------------
    def elem(self, v: Value) -> Elem:
        e = self._elem.get(v.id)
        if e is None:
            e = self._elem_rule(v) or Elem("x", v, None)
            self._elem[v.id] = e
        return e

    def _elem_rule(self, v: Value) -> Optional[Elem]:
        n = v.node
        if n is None or not all(u.type.is_static for u in (v, *n.inputs)):
            return None
        if n.op in _SHAPE_OPS and _size(n.inputs[0].shape) == _size(v.shape):
            e = self.elem(n.inputs[0])
            return replace(e, pos=apply_shape_op(n, e.position()))
        if _self_square(n):
            e = self.elem(n.inputs[0])
            kind = {"x": "x2", "xc": "xc2"}.get(e.kind)
            return replace(e, kind=kind) if kind else None
        if n.op == "sub":
            return self._centred(v, *n.inputs)
        if n.op in ("mul", "div"):
            a, b = n.inputs
            pairs = [(a, b)] if n.op == "div" else [(a, b), (b, a)]
            for xs, inv in pairs:
                if xs.shape == v.shape:
                    e = combine(self.elem(xs), self.stat(inv), -1 if n.op == "div" else 1)
                    if e is not None:
                        return e
        return None

    def _centred(self, v: Value, a: Value, b: Value) -> Optional[Elem]:
        if a.shape != v.shape:
            return None
        e = self.elem(a)
        if e.kind != "x":
            return None
        if self.is_zero(b):
            return e  # x - 0 (flax's RMSNorm subtracts a zero "mean")
        s = self.stat(b)
        if s is None or s.kind != "mean" or s.base.id != e.base.id:
            return None
        at = np.broadcast_to(s.at, v.shape)
        if not np.array_equal(s.groups[e.position()], at):
            return None  # the mean subtracted is not the mean of the element's own group
        return Elem("xc", e.base, e.pos, s.groups)

    # -- per-group statistics ------------------------------------------------------
    def stat(self, v: Value) -> Optional[Stat]:
        if v.id not in self._stat:
            self._stat[v.id] = self._stat_rule(v)
        return self._stat[v.id]

    def _stat_rule(self, v: Value) -> Optional[Stat]:
        n = v.node
        if n is None or not v.dtype.is_float or not all(
                u.type.is_static for u in (v, *n.inputs)):
            return None
        op, ins = n.op, n.inputs
        if op in _SHAPE_OPS:
            s = self.stat(ins[0])
            return replace(s, at=apply_shape_op(n, s.at)) if s else None
        if op == "reduce_sum":
            return self._reduction(n)
        if op == "div":
            s, c = self.stat(ins[0]), self.scalar(ins[1])
            if s and s.kind in _SUM_TO_MEAN and c == s.count and ins[0].shape == v.shape:
                return replace(s, kind=_SUM_TO_MEAN[s.kind])
            return None
        if _self_square(n):
            s = self.stat(ins[0])
            return replace(s, kind="sqmean") if s and s.kind == "mean" else None
        if op == "sub":  # E[x²] - E[x]²
            sa, sb = self.stat(ins[0]), self.stat(ins[1])
            if sa and sb and sa.kind == "meansq" and sb.kind == "sqmean" and same_groups(sa, sb):
                at = np.broadcast_to(sa.at, v.shape)
                if np.array_equal(at, np.broadcast_to(sb.at, v.shape)):
                    return replace(sa, kind="var", at=at)
            return None
        if op == "max":  # max(0, var) == var
            for z, s in ((ins[0], ins[1]), (ins[1], ins[0])):
                st = self.stat(s)
                if self.is_zero(z) and st and st.kind == "var" and st.eps is None:
                    return replace(st, at=np.broadcast_to(st.at, v.shape))
            return None
        if op == "select":  # select(pred, on_false, on_true) with a constant predicate
            pred = self.const(ins[0])
            if pred is None or pred.size == 0 or not (pred.all() or not pred.any()):
                return None
            st = self.stat(ins[2] if pred.all() else ins[1])
            return replace(st, at=np.broadcast_to(st.at, v.shape)) if st else None
        if op == "add":  # var + eps
            for s, c in ((ins[0], ins[1]), (ins[1], ins[0])):
                st, eps = self.stat(s), self.scalar(c)
                if (st and eps is not None and eps >= 0 and st.eps is None
                        and st.kind in ("var", "meansq") and s.shape == v.shape):
                    return replace(st, eps=eps)
            return None
        if op in ("rsqrt", "sqrt"):
            s = self.stat(ins[0])
            if s and (op, s.kind) in _ROOT:
                return replace(s, kind=_ROOT[op, s.kind], eps=s.eps or 0.0, inv=v.id)
        return None

    def _reduction(self, n) -> Optional[Stat]:
        u = n.inputs[0]
        e = self.elem(u)
        kind = {"x": "sum", "x2": "sumsq", "xc2": "sumdev2"}.get(e.kind)
        if kind is None:
            return None
        axes = tuple(n.params["axes"])
        pos = e.position()
        rep = pos.min(axis=axes) if axes else pos
        groups = np.empty(_size(e.base.shape), dtype=pos.dtype)
        groups[pos.ravel()] = np.broadcast_to(np.expand_dims(rep, axes), u.shape).ravel()
        if kind == "sumdev2" and not np.array_equal(groups, e.groups):
            return None  # deviations from another partition's means
        count = _size([u.shape[a] for a in axes])
        return Stat(kind, e.base, groups, rep, count)


def same_groups(a: Stat, b: Stat) -> bool:
    return a.base.id == b.base.id and np.array_equal(a.groups, b.groups)


def combine(e: Elem, s: Optional[Stat], power: int) -> Optional[Elem]:
    """``(x - mean)·rstd`` / ``(x - mean) / std`` -> norm, ``x·rrms`` / ``x / rootms`` -> rms,
    when the statistic is over the very groups the element belongs to."""
    if s is None or s.base.id != e.base.id:
        return None
    want = {("xc", "rstd", 1): "norm", ("xc", "std", -1): "norm",
            ("x", "rrms", 1): "rms", ("x", "rootms", -1): "rms"}.get((e.kind, s.kind, power))
    if want is None or (e.kind == "xc" and not np.array_equal(e.groups, s.groups)):
        return None
    pos = e.position()
    if not np.array_equal(np.broadcast_to(s.at, pos.shape), s.groups[pos]):
        return None
    return Elem(want, e.base, e.pos, s.groups, s.eps, s.inv)
