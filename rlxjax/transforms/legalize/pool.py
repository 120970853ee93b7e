"""The pool family decomposed into window taps (strided ``slice``s of the operand) combined
by elementwise ops: exact, any window / stride / dilation / rank / axes, for every format
(MIL's ``max_pool`` / ``avg_pool`` and Core AI's ``maxpool2d`` / ``sumpool2d`` pool only
the trailing spatial dims of an NC... layout, and an average's sum is not exact).

* ``reduce_window_max`` / ``min`` / ``sum``: separable, one axis at a time, ``k`` taps each
  (sum(k) taps instead of prod(k)). max/min are exact in any order; a sum is added tap by
  tap along each axis (another association than XLA's, a rounding-level difference);
* ``select_and_scatter_add`` / ``select_and_gather_add`` (max/min pooling's backward and
  forward-mode) follow XLA's select exactly: the taps are visited in row-major window
  order and the current choice is kept while ``select(current, tap)`` (ge / le) holds, so
  ties go to the first position. The scatter interleaves the per-tap contributions axis by
  axis (pad + concatenate + reshape).

A flexible axis (docs/flexible.md) has windows of one: its taps take it whole. A format
that carries fp16 (int8) values in fp32 (int32) sums them there and rounds (wraps) once
(policy.py's ``round_once``).
"""
from __future__ import annotations

import itertools

from ...ir import DType, Dyn
from ...ir.ops import register_impl
from ...ir.pool import WINDOW_REDUCTIONS, window_out_shape
from .policy import round_once

_COMBINE = {"reduce_window_max": "max", "reduce_window_min": "min", "reduce_window_sum": "add"}


def _tap(b, x, offsets, out_shape, strides):
    """x[o_a + i*s_a for i < n_out_a, per axis a] (a strided slice; a flexible axis whole)."""
    begin = tuple(int(o) for o in offsets)
    flex = [isinstance(n, Dyn) for n in out_shape]
    end = tuple(d if f else o + (n - 1) * s + 1
                for o, n, s, f, d in zip(begin, out_shape, strides, flex, x.shape))
    if begin == (0,) * len(begin) and set(strides) <= {1} and end == tuple(x.shape):
        return x
    return b.add("slice", x, start=begin, limit=end, strides=tuple(strides))


@register_impl("decompose", *WINDOW_REDUCTIONS)
@round_once
def _reduce_window(b, node, ins):
    p, (x,) = node.params, ins
    rank = x.type.rank
    for a in range(rank):
        k, s, d = p["window"][a], p["strides"][a], p["dilation"][a]
        if k == 1 and s == 1:
            continue
        n_out = (x.shape[a] - (k - 1) * d - 1) // s + 1
        shape = tuple(n_out if i == a else n for i, n in enumerate(x.shape))
        strides = tuple(s if i == a else 1 for i in range(rank))
        acc = None
        for j in range(k):
            t = _tap(b, x, tuple(j * d if i == a else 0 for i in range(rank)), shape, strides)
            acc = t if acc is None else b.add(_COMBINE[node.op], acc, t)
        x = acc
    return [x]


def _taps(b, operand, p):
    """Row-major window offsets (in operand positions) and the matching strided slices."""
    out = window_out_shape(operand.shape, p["window"], p["strides"], p["dilation"])
    offsets = [tuple(j * d for j, d in zip(js, p["dilation"]))
               for js in itertools.product(*(range(k) for k in p["window"]))]
    return offsets, [_tap(b, operand, o, out, p["strides"]) for o in offsets]


def _choose(b, select, taps, values):
    """XLA's select over the taps in order -> (index of the chosen tap (int32, None for one
    tap), the chosen ``values`` entry (None when values is None))."""
    best, idx, val = taps[0], None, (values[0] if values else None)
    for t in range(1, len(taps)):
        keep = b.add(select, best, taps[t])
        if t < len(taps) - 1:
            best = b.add("select", keep, taps[t], best)
        if values:
            val = b.add("select", keep, values[t], val)
        else:
            idx = (b.add("convert", b.add("not", keep), dtype=DType.i32) if idx is None
                   else b.add("select", keep, b.scalar(t, idx), idx))
    return idx, val


@register_impl("decompose", "select_and_gather_add")
def _select_and_gather_add(b, node, ins):
    tangents, operand = ins
    _, taps = _taps(b, operand, node.params)
    _, values = _taps(b, tangents, node.params)
    return [_choose(b, node.params["select"], taps, values)[1]]


@register_impl("decompose", "select_and_scatter_add")
@round_once
def _select_and_scatter_add(b, node, ins):
    source, operand = ins
    p = node.params
    offsets, taps = _taps(b, operand, p)
    idx, _ = _choose(b, p["select"], taps, None)
    zero = lambda: b.scalar(0, source)  # noqa: E731  (made where used: none for one tap)
    parts = {o: source if idx is None else
             b.add("select", b.add("eq", idx, b.scalar(t, idx)), zero(), source)
             for t, o in enumerate(offsets)}
    for a in range(operand.type.rank):
        parts = _spread_axis(b, parts, a, p["strides"][a], operand.shape[a], zero)
    (result,) = parts.values()
    return [result]


def _spread_axis(b, parts, axis, s, n, zero):
    """Put per-offset contributions back at their positions along ``axis``: a part with
    offset q (in operand positions) holds the values for positions i*s + q. Groups the parts
    by their offsets on the other axes; returns them keyed by offsets with ``axis`` set to 0,
    with ``axis`` now of length ``n``."""
    groups = {}
    for o, v in parts.items():
        groups.setdefault(o[:axis] + (0,) + o[axis + 1:], []).append((o[axis], v))
    return {key: _spread_1d(b, items, axis, s, n, zero) for key, items in groups.items()}


def _pad(b, x, axis, lo, hi, zero, interior=0):
    cfg = [(0, 0, 0)] * x.type.rank
    cfg[axis] = (lo, hi, interior)
    return x if lo == hi == interior == 0 else b.add("pad", x, zero(), config=tuple(cfg))


def _spread_1d(b, items, axis, s, n, zero):
    n_out = items[0][1].shape[axis]
    if len(items) == 1 and items[0][0] == 0 and s == 1:
        return _fit(b, items[0][1], axis, n, zero)
    planes = {}  # offset q = m*s + r lands on the residue-r plane, shifted by m windows
    for q, v in items:
        planes.setdefault(q % s, []).append((q // s, v))
    m_max = max(q // s for q, _ in items)
    residues = sorted(planes)
    if residues != list(range(len(residues))):  # gaps (window dilation): interior pads
        acc = None
        for q, v in items:
            v = _pad(b, v, axis, q, n - q - (v.shape[axis] - 1) * s - 1, zero, s - 1)
            acc = v if acc is None else b.add("add", acc, v)
        return acc
    stacked = []
    for r in residues:
        plane = None
        for m, v in planes[r]:
            v = _pad(b, v, axis, m, m_max - m, zero)
            plane = v if plane is None else b.add("add", plane, v)
        stacked.append(b.reshape(plane, plane.shape[:axis + 1] + (1,) + plane.shape[axis + 1:]))
    inter = stacked[0] if len(stacked) == 1 else b.add("concatenate", *stacked, axis=axis + 1)
    inter = _pad(b, inter, axis + 1, 0, s - len(stacked), zero)  # residues with no tap: 0
    merged = inter.shape[:axis] + ((n_out + m_max) * s,) + inter.shape[axis + 2:]
    return _fit(b, b.reshape(inter, merged), axis, n, zero)


def _fit(b, x, axis, n, zero):
    """Crop (only zeros lie past n) or zero-pad ``x`` to length n along ``axis``."""
    m = x.shape[axis]
    if m > n:
        end = tuple(n if i == axis else d for i, d in enumerate(x.shape))
        return b.add("slice", x, start=(0,) * x.type.rank, limit=end,
                     strides=(1,) * x.type.rank)
    return _pad(b, x, axis, 0, n - m, zero) if m < n else x
