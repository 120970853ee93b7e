"""Lowering: the pool family, with window taps (strided ``slice_by_index`` of the operand)
combined by elementwise MIL ops — exact, any window / stride / dilation / rank / axes.

Why not MIL's ``max_pool`` / ``avg_pool``: they pool only the trailing spatial dims of an
NC... layout, ``avg_pool`` divides by the window count (a sum recovered from it is not
exact), and their padding values cannot be checked off a Mac (no value_inference to
cross-check the reference interpreter against). Taps use only ops whose semantics are
already cross-checked.

- Window reductions are separable: one axis at a time, ``k`` taps each (sum(k) taps
  instead of prod(k)). max/min are exact in any order; a sum is added tap by tap along each
  axis (a different association than XLA's, a rounding-level difference).
- ``select_and_scatter_add`` / ``select_and_gather_add`` follow XLA's select exactly:
  the taps are visited in row-major window order and the current choice is kept while
  ``select(current, tap)`` (ge / le) holds, so ties go to the first position.
  The scatter interleaves the per-tap contributions axis by axis (pad + concat + reshape).
"""
from __future__ import annotations

import itertools

import numpy as np

from ...ir import DType, Dyn, TensorType
from ...ir.pool import window_out_shape
from ..registry import lowering
from .common import Ew, lax_pad, pad_edges, reshape, slice_axis

_COMBINE = {"reduce_window_max": "maximum", "reduce_window_min": "minimum",
            "reduce_window_sum": "add"}
_SELECT = {"ge": "greater_equal", "le": "less_equal"}


def _tap(b, x, offsets, out_shape, strides):
    """x[o_a + i*s_a for i < n_out_a, per axis a] (a strided slice)."""
    begin = tuple(int(o) for o in offsets)
    flex = [isinstance(n, Dyn) for n in out_shape]  # a flexible axis, taken whole
    end = tuple(0 if f else o + (n - 1) * s + 1
                for o, n, s, f in zip(begin, out_shape, strides, flex))
    if begin == (0,) * len(begin) and set(strides) <= {1} and all(
            f or e == n for e, n, f in zip(end, x.shape, flex)):
        return x
    mask = {"end_mask": np.asarray(flex, bool)} if any(flex) else {}
    return b.op("slice_by_index", TensorType(tuple(out_shape), x.dtype), x=x,
                begin=np.asarray(begin, np.int32), end=np.asarray(end, np.int32),
                stride=np.asarray(strides, np.int32), **mask)


@lowering(*_COMBINE)
def _reduce_window(ctx, node, x):
    p, ew = node.params, Ew(ctx.b)
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
            offs = tuple(j * d if i == a else 0 for i in range(rank))
            t = _tap(ctx.b, x, offs, shape, strides)
            acc = t if acc is None else ew.binary(_COMBINE[node.op], acc, t)
        x = acc
    return x


def _taps(b, operand, p):
    """Row-major window offsets (in operand positions) and the matching strided slices."""
    out = window_out_shape(operand.shape, p["window"], p["strides"], p["dilation"])
    offsets = [tuple(j * d for j, d in zip(js, p["dilation"]))
               for js in itertools.product(*(range(k) for k in p["window"]))]
    return out, offsets, [_tap(b, operand, o, out, p["strides"]) for o in offsets]


def _choose(ew, select, taps, values):
    """XLA's select over the taps in order; returns (index of the chosen tap (int32, or None
    when there is one tap), the chosen ``values`` entry (or None when values is None))."""
    best, idx, val = taps[0], None, (values[0] if values else None)
    for t in range(1, len(taps)):
        keep = ew.compare(_SELECT[select], best, taps[t])
        if t < len(taps) - 1:
            best = ew.select(keep, best, taps[t])
        if values:
            val = ew.select(keep, val, values[t])
        else:
            idx = (ew.b.op("cast", TensorType(keep.shape, DType.i32), x=ew.unary(
                "logical_not", keep), dtype="int32") if idx is None
                   else ew.select(keep, idx, np.int32(t)))
    return idx, val


@lowering("select_and_gather_add")
def _select_and_gather_add(ctx, node, tangents, operand):
    _, _, taps = _taps(ctx.b, operand, node.params)
    _, _, values = _taps(ctx.b, tangents, node.params)
    return _choose(Ew(ctx.b), node.params["select"], taps, values)[1]


@lowering("select_and_scatter_add")
def _select_and_scatter_add(ctx, node, source, operand):
    p, ew = node.params, Ew(ctx.b)
    out, offsets, taps = _taps(ctx.b, operand, p)
    idx, _ = _choose(ew, p["select"], taps, None)
    zero = np.zeros((), source.dtype.np)
    parts = {o: source if idx is None else
             ew.select(ew.compare("equal", idx, np.int32(t)), source, zero)
             for t, o in enumerate(offsets)}
    for a in range(operand.type.rank):
        parts = _spread_axis(ctx.b, parts, a, p["strides"][a], operand.shape[a], zero)
    (result,) = parts.values()
    return result


def _spread_axis(b, parts, axis, s, n, zero):
    """Put per-offset contributions back at their positions along ``axis``: a part with
    offset q (in operand positions) holds the values for positions i*s + q. Groups the parts
    by their offsets on the other axes; returns them keyed by offsets with ``axis`` set to 0,
    with ``axis`` now of length ``n``."""
    groups = {}
    for o, v in parts.items():
        groups.setdefault(o[:axis] + (0,) + o[axis + 1:], []).append((o[axis], v))
    return {key: _spread_1d(b, items, axis, s, n, zero) for key, items in groups.items()}


def _spread_1d(b, items, axis, s, n, zero):
    n_out = items[0][1].shape[axis]
    if len(items) == 1 and items[0][0] == 0 and s == 1:
        return _fit(b, items[0][1], axis, n, zero)
    # Offset q = m*s + r lands on the residue-r plane of the output, shifted by m windows.
    planes = {}
    for q, v in items:
        planes.setdefault(q % s, []).append((q // s, v))
    m_max = max(q // s for q, _ in items)
    length = n_out + m_max
    residues = sorted(planes)
    if residues != list(range(len(residues))):
        return _spread_interior(b, items, axis, s, n, zero)
    stacked = []
    for r in residues:
        plane = None
        for m, v in planes[r]:
            pads = [(0, 0)] * v.type.rank
            pads[axis] = (m, m_max - m)
            v = pad_edges(b, v, pads, zero)
            plane = v if plane is None else Ew(b).binary("add", plane, v)
        split = plane.shape[:axis + 1] + (1,) + plane.shape[axis + 1:]
        stacked.append(reshape(b, plane, split))
    if len(stacked) == 1:
        inter = stacked[0]
    else:
        shape = list(stacked[0].shape)
        shape[axis + 1] = len(stacked)
        inter = b.op("concat", TensorType(tuple(shape), stacked[0].dtype), values=stacked,
                     axis=np.int32(axis + 1), interleave=False)
    if len(stacked) < s:  # residues with no tap are zero
        pads = [(0, 0)] * inter.type.rank
        pads[axis + 1] = (0, s - len(stacked))
        inter = pad_edges(b, inter, pads, zero)
    merged = inter.shape[:axis] + (length * s,) + inter.shape[axis + 2:]
    return _fit(b, reshape(b, inter, merged), axis, n, zero)


def _spread_interior(b, items, axis, s, n, zero):
    """Fallback for offsets whose residues mod s leave gaps (window dilation): one interior
    pad per part."""
    acc = None
    for q, v in items:
        n_out = v.shape[axis]
        cfg = [(0, 0, 0)] * v.type.rank
        cfg[axis] = (q, n - q - (n_out - 1) * s - 1, s - 1)
        v = lax_pad(b, v, cfg, zero)
        acc = v if acc is None else Ew(b).binary("add", acc, v)
    return acc


def _fit(b, x, axis, n, zero):
    """Crop (only zeros lie past n) or zero-pad ``x`` to length n along ``axis``."""
    m = x.shape[axis]
    if m > n:
        return slice_axis(b, x, axis, 0, n)
    if m < n:
        pads = [(0, 0)] * x.type.rank
        pads[axis] = (0, n - m)
        return pad_edges(b, x, pads, zero)
    return x
