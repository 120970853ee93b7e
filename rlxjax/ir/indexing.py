"""The indexing family of RLX ops: gathers, scatters, dynamic slices, cumulative sums.

JAX's general ``gather`` / ``scatter`` (dimension numbers, modes) are normalised by the
frontend (frontend/rules/indexing/) into the two canonical forms here, whose indices are
always in range: out-of-range handling (clip, fill, drop) is made explicit in the graph
before these ops see the indices.

- ``gather_nd(x, idx)``: ``idx`` int32 of shape ``B + (K,)``; the result has shape
  ``B + x.shape[K:]`` and ``out[b] = x[idx[b]]`` (a full slice over the trailing dims).
- ``scatter_nd(x, idx, upd; mode)``: ``upd`` of shape ``B + x.shape[K:]``; the result is x
  with ``upd[b]`` combined into ``x[idx[b]]`` by ``mode`` (add, update, mul, max, min).
  Duplicate indices accumulate for add/mul/max/min; for ``update`` the value left at a
  position written twice is unspecified (the frontend keeps JAX's last-wins rule by
  redirecting all but the last write to a scratch slot it slices away). ``unique`` says
  the indices are known to be unique (JAX's ``unique_indices``, needed by mul's gradient).
- ``cumsum(x; axis, reverse)``: inclusive prefix sum.
- ``dynamic_slice(x, *starts; sizes)``: one int32 scalar start per dim, in range
  (``0 <= start <= dim - size``; the frontend clamps them as JAX does).
- ``dynamic_update_slice(x, upd, *starts)``: x with the block at ``starts`` replaced by
  ``upd``; starts in range as for dynamic_slice.
- ``take_at(x, i; axis)``: entry ``i`` of ``x`` along ``axis``, the axis kept (size 1),
  ``i`` int32 in range: rank 0 (one index), or of x's rank with size 1 at ``axis`` and
  each other dim 1 or x's (an index per batch element, broadcast). Made by the legalize
  stage (transforms/legalize/linalg*.py: a loop reading row or column ``j``), after the
  grad transform: not differentiated.
"""
from __future__ import annotations

from .ops import _require, defop
from .schema import BOOL, INT, INTS, Param, one_of
from .types import DType

SCATTER_MODES = ("add", "update", "mul", "max", "min")


def _index_tensor(op, x, idx):
    _require(idx.dtype == DType.i32, f"{op}: indices must be i32, got {idx}")
    _require(idx.rank >= 1, f"{op}: indices need rank >= 1 (last dim = index depth), got {idx}")
    k = idx.shape[-1]
    _require(isinstance(k, int) and 1 <= k <= x.rank,
             f"{op}: index depth {k} out of range for {x}")
    return k


@defop("gather_nd", "indexing", 2, params={})
def _gather_nd(ts, p):
    x, idx = ts
    k = _index_tensor("gather_nd", x, idx)
    return [x.with_shape(tuple(idx.shape[:-1]) + tuple(x.shape[k:]))]


@defop("scatter_nd", "indexing", 3,
       params={"mode": Param(one_of(*SCATTER_MODES)), "unique": Param(BOOL)})
def _scatter_nd(ts, p):
    x, idx, upd = ts
    k = _index_tensor("scatter_nd", x, idx)
    _require(p.get("mode") in SCATTER_MODES, f"scatter_nd mode {p.get('mode')!r}")
    _require(isinstance(p.get("unique"), bool), "scatter_nd needs unique=bool")
    _require(upd.dtype == x.dtype, f"scatter_nd: updates {upd} vs data {x}")
    want = tuple(idx.shape[:-1]) + tuple(x.shape[k:])
    _require(tuple(upd.shape) == want, f"scatter_nd: updates {upd} should have shape {want}")
    if x.dtype == DType.bool:
        _require(p["mode"] in ("update", "max", "min"), f"scatter_nd {p['mode']} of bool")
    return [x]


@defop("cumsum", "indexing", 1, params={"axis": Param(INT), "reverse": Param(BOOL)})
def _cumsum(ts, p):
    (x,) = ts
    _require(0 <= p["axis"] < x.rank, f"cumsum: axis {p['axis']} for {x}")
    _require(isinstance(p.get("reverse"), bool), "cumsum needs reverse=bool")
    _require(x.dtype in (DType.f32, DType.f16, DType.i32), f"cumsum of {x}")
    return [x]


def _starts(op, x, starts):
    _require(len(starts) == x.rank, f"{op}: {len(starts)} start indices for {x}")
    for s in starts:
        _require(s.rank == 0 and s.dtype == DType.i32, f"{op}: start index must be i32[], got {s}")


@defop("dynamic_slice", "indexing", None, params={"sizes": Param(INTS)})
def _dynamic_slice(ts, p):
    x, starts = ts[0], ts[1:]
    _starts("dynamic_slice", x, starts)
    sizes = tuple(p["sizes"])
    _require(len(sizes) == x.rank and all(0 <= s <= d for s, d in zip(sizes, x.shape)),
             f"dynamic_slice sizes {sizes} for {x}")
    return [x.with_shape(sizes)]


@defop("dynamic_update_slice", "indexing", None, params={})
def _dynamic_update_slice(ts, p):
    x, upd, starts = ts[0], ts[1], ts[2:]
    _starts("dynamic_update_slice", x, starts)
    _require(upd.dtype == x.dtype and upd.rank == x.rank
             and all(u <= d for u, d in zip(upd.shape, x.shape)),
             f"dynamic_update_slice: update {upd} does not fit in {x}")
    return [x]



@defop("take_at", "indexing", 2, params={"axis": Param(INT)}, differentiable=False)
def _take_at(ts, p):
    x, i = ts
    ax = p["axis"]
    _require(0 <= ax < x.rank, f"take_at axis {ax} out of range for {x}")
    _require(i.dtype == DType.i32, f"take_at: the index must be i32, got {i}")
    _require(i.rank == 0 or (i.rank == x.rank and i.shape[ax] == 1 and all(
        a in (1, d) for a, d in zip(i.shape, x.shape))),
        f"take_at: index {i} is neither rank 0 nor x's {x} rank with size 1 at axis {ax}")
    return [x.with_shape(1 if k == ax else d for k, d in enumerate(x.shape))]
