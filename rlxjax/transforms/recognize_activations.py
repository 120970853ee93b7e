"""Recognise decomposed activations (jax.nn, flax, equinox, hand-written) as fused RLX ops.

``recognize_activations(graph)`` rewrites ``graph`` in place and returns ``{op: count}``.
A pattern becomes a fused node only when it is the op's function exactly (constants equal
to the op's to within one rounding in the value's dtype):

- ``softmax``: ``e / Σ e`` with ``e = exp(x − max(x))``, max and sum over the same single
  axis (jax.nn.softmax: the max through ``max(-inf, ·)`` and ``stop_gradient``, neither of
  which changes a value or, since softmax does not depend on the shift, a derivative);
- ``log_softmax``: ``s − log Σ exp(s)`` with ``s = x − max(x)`` (jax.nn.log_softmax);
- ``gelu``: ``½·x·erfc(−x/√2)`` (jax.nn.gelu(approximate=False)) or ``½·x·(1 + erf(x/√2))``;
  ``½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`` (approximate=True), factors in any order;
- ``silu``: ``x·sigmoid(x)`` (jax.nn.silu / swish).

An unshifted ``exp(x) / Σ exp(x)`` is left alone: the fused op would not overflow where the
user's code does, and that is a different function in floating point. Roots are tried from
the end of the graph backwards; the old nodes stay where something else reads them and
``dce`` drops the rest.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Dict, List, Optional, Tuple

import numpy as np

from ..ir import Graph, Value, verify
from ..ir.ops import OPS
from .norm_patterns.analysis import apply_shape_op
from .rewrite import Appender, dce, substitute
from . import fold as _fold  # noqa: F401  (registers the fold implementations)

__all__ = ["recognize_activations"]

_VIEW = ("reshape", "broadcast_in_dim", "stop_gradient")
_MAX_FACTORS = 5


def recognize_activations(graph: Graph) -> Dict[str, int]:
    """Rewrite recognised activations into fused nodes; returns ``{op: count}``."""
    found: Counter = Counter()
    matches: Dict[int, Tuple[str, Value, dict]] = {}  # id(root node) -> (op, x, params)
    for node in reversed(list(graph.nodes)):
        if len(node.outputs) != 1 or node.op not in ("div", "sub", "mul"):
            continue
        y = node.output
        if not (y.dtype.is_float and y.type.is_static and y.type.rank >= 0):
            continue
        m = _match(y)
        if m is not None:
            matches[id(node)] = m
            found[m[0]] += 1
    if not found:
        return {}
    order, mapping = [], {}
    for n in list(graph.nodes):  # (the Appender appends its nodes to graph.nodes)
        m = matches.get(id(n))
        if m is not None:
            op, x, params = m
            app = Appender(graph, source=n.source)
            fused = app.add(op, x, **params)
            order.extend(app.nodes)
            mapping[n.output.id] = fused
        order.append(n)
    graph.nodes = order
    substitute(graph, mapping)
    dce(graph)
    verify(graph)
    return dict(found)


def _match(y: Value) -> Optional[Tuple[str, Value, dict]]:
    op = y.node.op
    if op == "div":
        return _softmax(y) or _gelu(y)
    if op == "sub":
        return _log_softmax(y)
    return _silu(y) or _gelu(y)


# -- softmax / log_softmax ------------------------------------------------------------------
def _keepdims_source(v: Value, shape, axis: int) -> Optional[Value]:
    """The reduction result ``r`` (``shape`` without ``axis``) that ``v`` is a keep-dims
    view of (reshape / broadcast_in_dim / stop_gradient), checked element by element by
    moving an index array through the same ops."""
    chain = []
    while v.node is not None and v.node.op in _VIEW:
        chain.append(v.node)
        v = v.node.inputs[0]
        want = tuple(d for i, d in enumerate(shape) if i != axis)
        if tuple(v.shape) == want:
            idx = np.arange(v.type.size).reshape(want)
            for n in reversed(chain):
                if n.op != "stop_gradient":
                    idx = apply_shape_op(n, idx)
            expected = np.expand_dims(np.arange(v.type.size).reshape(want), axis)
            try:
                ok = np.array_equal(np.broadcast_to(expected, idx.shape), idx)
            except ValueError:
                ok = False
            return v if ok else None
    return None


def _reduced(v: Optional[Value], op: str) -> Optional[Tuple[Value, int]]:
    """(operand, axis) if ``v`` is ``op`` over exactly one axis."""
    if v is None or v.node is None or v.node.op != op or len(v.node.params["axes"]) != 1:
        return None
    return v.node.inputs[0], v.node.params["axes"][0]


def _row_max(v: Value) -> Optional[Tuple[Value, int]]:
    """(x, axis) if ``v`` is ``reduce_max(x)`` over one axis, or ``max(-inf, that)``."""
    n = v.node
    if n is not None and n.op == "max":
        for a, b in (n.inputs, n.inputs[::-1]):
            c = _const(a)
            if c is not None and c.size == 1 and np.isneginf(c).all():
                return _reduced(b, "reduce_max")
        return None
    return _reduced(v, "reduce_max")


def _shifted(s: Value) -> Optional[Tuple[Value, int]]:
    """(x, axis) if ``s = x − max(x, axis)`` (the max kept-dims, perhaps stop_gradient'ed),
    or ``x = transpose(f)`` and the max is taken over ``f``'s matching axis and moved to
    ``x``'s layout (jax.nn.dot_product_attention): the same number at every element."""
    n = s.node
    if n is None or n.op != "sub":
        return None
    x, m = n.inputs
    if tuple(x.shape) != tuple(s.shape) or x.dtype != s.dtype:
        return None
    for axis in range(x.type.rank):
        r = _keepdims_source(m, x.shape, axis)
        mx = _row_max(r) if r is not None else None
        if mx is not None and mx[0].id == x.id and mx[1] == axis:
            return x, axis
    t = x.node
    if t is not None and t.op == "transpose":
        return _transposed_max(x, t.inputs[0], tuple(t.params["perm"]), m)
    return None


def _transposed_max(x: Value, f: Value, perm, m: Value) -> Optional[Tuple[Value, int]]:
    """(x, axis) if ``x = transpose(f, perm)`` and ``m`` is ``max(f, perm[axis])`` moved by
    views and transposes so that ``m[j]`` is the max of the row of ``x[j]`` (checked element
    by element with an index array)."""
    chain = []
    v = m
    while v.node is not None and v.node.op in _VIEW + ("transpose",):
        chain.append(v.node)
        v = v.node.inputs[0]
    mx = _row_max(v)
    if mx is None or mx[0].id != f.id:
        return None
    f_axis = mx[1]
    want = tuple(d for i, d in enumerate(f.shape) if i != f_axis)
    if tuple(v.shape) != want or f_axis not in perm:
        return None
    idx = np.arange(v.type.size).reshape(want)
    for node in reversed(chain):
        if node.op != "stop_gradient":
            idx = apply_shape_op(node, idx)
    expected = np.broadcast_to(np.expand_dims(np.arange(v.type.size).reshape(want), f_axis),
                               f.shape).transpose(perm)
    try:
        ok = np.array_equal(np.broadcast_to(idx, expected.shape), expected)
    except ValueError:
        ok = False
    return (x, list(perm).index(f_axis)) if ok else None


def _softmax(y: Value):
    e, d = y.node.inputs
    if e.node is None or e.node.op != "exp" or tuple(e.shape) != tuple(y.shape):
        return None
    sh = _shifted(e.node.inputs[0])
    if sh is None:
        return None
    x, axis = sh
    total = _reduced(_keepdims_source(d, x.shape, axis), "reduce_sum")
    if total is None or total[0].id != e.id or total[1] != axis:
        return None
    return "softmax", x, {"axis": axis}


def _log_softmax(y: Value):
    s, lse = y.node.inputs
    sh = _shifted(s)
    if sh is None or tuple(s.shape) != tuple(y.shape):
        return None
    x, axis = sh
    if lse.node is not None and lse.node.op == "log":  # log of the kept-dims sum
        total = _keepdims_source(lse.node.inputs[0], x.shape, axis)
    else:  # kept-dims view of the log of the sum
        lg = _keepdims_source(lse, x.shape, axis)
        total = lg.node.inputs[0] if lg is not None and lg.node is not None \
            and lg.node.op == "log" else None
    red = _reduced(total, "reduce_sum")
    if red is None or red[1] != axis or red[0].node is None or red[0].node.op != "exp":
        return None
    inner = red[0].node.inputs[0]
    again = _shifted(inner) if inner.id != s.id else (x, axis)
    if again is None or again[0].id != x.id or again[1] != axis:
        return None
    return "log_softmax", x, {"axis": axis}


# -- silu / gelu ------------------------------------------------------------------------------
def _silu(y: Value):
    a, b = y.node.inputs
    for x, s in ((a, b), (b, a)):
        if (s.node is not None and s.node.op == "logistic" and s.node.inputs[0].id == x.id
                and tuple(x.shape) == tuple(y.shape)):
            return "silu", x, {}
    return None


def _const(v: Value, depth: int = 0) -> Optional[np.ndarray]:
    """``v``'s value if it is computed from constants alone (small values only; each op
    evaluated by its own fold implementation, e.g. ``jnp.sqrt(2.0)``)."""
    n = v.node
    if n is None or depth > 8 or not v.type.is_static or v.type.size > 64:
        return None
    if n.op == "constant":
        return np.asarray(n.params["value"])
    opdef = OPS.get(n.op)
    fn = opdef.impl("fold") if opdef is not None and opdef.pure else None
    if fn is None or not n.inputs or len(n.outputs) != 1:
        return None
    args = []
    for u in n.inputs:  # stops at the first input that is not a constant
        args.append(_const(u, depth + 1))
        if args[-1] is None:
            return None
    with np.errstate(all="ignore"):
        r = fn(n.params, *args)
    return None if r is None or isinstance(r, tuple) else np.asarray(r)


def _scalar(v: Value) -> Optional[float]:
    c = _const(v)
    return float(c.reshape(-1)[0]) if c is not None and c.size == 1 else None


def _close(got: float, want: float, dtype) -> bool:
    """Equal to within one rounding of ``dtype`` (a constant written in the user's dtype)."""
    return abs(got - want) <= float(np.spacing(np.asarray(abs(want), dtype.np)))


def _factors(v: Value, power=1, out=None) -> List[Tuple[Value, int]]:
    """Factors of a mul/div tree, with their power (+1 multiplied, −1 divided by)."""
    out = [] if out is None else out
    n = v.node
    if n is not None and n.op in ("mul", "div") and len(out) <= _MAX_FACTORS:
        _factors(n.inputs[0], power, out)
        _factors(n.inputs[1], power if n.op == "mul" else -power, out)
    elif n is not None and n.op == "neg":
        out.append((None, -1.0))  # a factor −1 (kept as a constant)
        _factors(n.inputs[0], power, out)
    else:
        out.append((v, power))
    return out


def _split(v: Value) -> Tuple[float, List[Value]]:
    """(product of the constant factors, the other factors, each multiplied once) or
    (nan, []) when a non-constant is divided by."""
    coef, rest = 1.0, []
    for f, p in _factors(v):
        if f is None:
            coef *= p
            continue
        c = _scalar(f)
        if c is not None:
            if p != 1 and c == 0:  # a division by a constant 0: no finite factor
                return math.nan, []
            coef *= c if p == 1 else 1.0 / c
        elif p == 1:
            rest.append(f)
        else:
            return math.nan, []
    return coef, rest


def _scaled(v: Value) -> Tuple[float, Optional[Value]]:
    """(c, x) if ``v = c·x`` (muls/divs by constants, negations)."""
    coef, rest = _split(v)
    return (coef, rest[0]) if len(rest) == 1 else (math.nan, None)


def _one_plus(v: Value, unary: str) -> Optional[Value]:
    """u if ``v = 1 + unary(u)`` (either order)."""
    n = v.node
    if n is None or n.op != "add":
        return None
    for one, t in (n.inputs, n.inputs[::-1]):
        if _scalar(one) == 1.0 and t.node is not None and t.node.op == unary:
            return t.node.inputs[0]
    return None


def _cube_of(v: Value) -> Optional[Value]:
    n = v.node
    if n is not None and n.op == "integer_pow" and n.params["y"] == 3:
        return n.inputs[0]
    return None


def _gelu(y: Value):
    coef, rest = _split(y)
    dt = y.dtype
    if len(rest) != 2 or not _close(coef, 0.5, dt):
        return None
    for x, g in (rest, rest[::-1]):
        if tuple(x.shape) != tuple(y.shape) or g.node is None:
            continue
        if g.node.op == "erfc":  # ½·x·erfc(−x/√2)
            c, u = _scaled(g.node.inputs[0])
            if u is not None and u.id == x.id and _close(c, -1 / math.sqrt(2), dt):
                return "gelu", x, {"approximate": False}
        inner = _one_plus(g, "erf")  # ½·x·(1 + erf(x/√2))
        if inner is not None:
            c, u = _scaled(inner)
            if u is not None and u.id == x.id and _close(c, 1 / math.sqrt(2), dt):
                return "gelu", x, {"approximate": False}
        inner = _one_plus(g, "tanh")  # ½·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
        if inner is not None and _tanh_argument(inner, x, dt):
            return "gelu", x, {"approximate": True}
    return None


def _tanh_argument(v: Value, x: Value, dt) -> bool:
    c, w = _scaled(v)
    if w is None or not _close(c, math.sqrt(2 / math.pi), dt):
        return False
    n = w.node
    if n is None or n.op != "add":
        return False
    for a, b in (n.inputs, n.inputs[::-1]):
        k, rest = _split(b)
        if a.id != x.id or not _close(k, 0.044715, dt):
            continue
        if len(rest) == 1:
            base = _cube_of(rest[0])
            if base is not None and base.id == x.id:
                return True
        if len(rest) == 3 and all(r.id == x.id for r in rest):
            return True
    return False
