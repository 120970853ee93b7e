"""RLX reductions, shape, linear and indexing ops -> Core AI (exact: they move elements, or
reduce as Core AI's reductions do, sequentially):

* reductions keep their dims in Core AI: a ``reshape`` drops them; Core AI's
  ``reduce_max`` / ``reduce_min`` skip NaN (measured), JAX's propagate it: a NaN in the
  reduced elements is selected back; bool reductions run on int32;
* ``argmax`` / ``argmin``: the first index of the extreme value, a NaN counting as the
  extreme (JAX's rule), composed from the reduction, ``equal`` and a ``reduce_min`` of
  indices;
* ``dot_general``: both operands transposed to (batch, free, contract) / (batch, contract,
  free), reshaped to rank 3, one ``batch_matmul`` (no transpose flags in Core AI);
* ``slice`` / ``concatenate`` / ``split`` / ``rev`` are ``slice`` / ``concat`` / ``reverse``;
  ``pad`` (lax.pad: interior padding by a reshape + concat, negative edges by a slice);
* ``dynamic_slice`` / ``dynamic_update_slice``: the starts clamped as JAX clamps them, then
  ``gather_along_axis`` with the shifted index ranges (Core AI's ``slice`` with runtime
  starts has a dynamic result type); an update spanning all but one axis (a KV cache's
  new position) is one ``scatter_along_axis`` of its rows, another is placed by gathers
  and selected by the window's mask (the axes it spans whole left out: their start is 0);
* ``gather_nd`` is Core AI's; ``scatter_nd`` flattens the indexed dims to one and is a
  ``scatter_along_axis`` in the op's mode (Core AI's ``scatter_nd`` cannot combine);
* ``cumsum`` is Core AI's ``scan`` with the ``sum`` combiner for floats; an integer
  ``scan`` that wraps around kills the runtime (SIGILL, measured on int32), so an integer
  cumsum is a ``reduce_sum`` of the input times a triangular 0/1 mask (int32 sums wrap as
  JAX's do, measured), refused by name past ``_INT_CUMSUM_LIMIT`` mask elements.
"""
from __future__ import annotations

import numpy as np

from ..ir import DType
from .dynamic import prod
from .ops_base import carried, rule, unsupported

_REDUCE = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min",
           "reduce_prod": "product"}


def _t(node, i=0):
    return node.inputs[i].type


@rule(*_REDUCE)
def _reduce(ctx, node, ins):
    x, t, axes = ins[0], _t(node), node.params["axes"]
    out_t = node.outputs[0].type
    if not axes:
        return x
    kind = _REDUCE[node.op]
    if t.dtype == DType.bool:
        if kind not in ("max", "min"):
            raise unsupported(node, f"{node.op} of bool is not lowered for Core AI")
        r = ctx.reduce(kind, ctx.cast(x, DType.i32), axes, out_t.shape)
        return ctx.ne(r, ctx.scalar(0, DType.i32))
    r = ctx.reduce(kind, x, axes)
    if kind in ("max", "min") and t.dtype.is_float:  # Core AI skips NaN; JAX propagates it
        nan = ctx.reduce("max", ctx.cast(ctx.isnan(x), DType.i32), axes)
        r = ctx.where(ctx.ne(nan, ctx.scalar(0, DType.i32)), ctx.scalar(np.nan, t.dtype), r)
    return r if node.params.get("keep_dims") else ctx.reshape(r, out_t.shape)


@rule("argmax", "argmin")
def _arg(ctx, node, ins):
    x, t, axis = ins[0], _t(node), node.params["axis"]
    if t.dtype == DType.bool:
        x, t = ctx.cast(x, DType.i32), t.with_dtype(DType.i32)
    m = ctx.reduce("max" if node.op == "argmax" else "min", x, [axis])
    hit = ctx.eq(x, m)
    if t.dtype.is_float:  # the first NaN wins, as in JAX
        nan = ctx.isnan(x)
        any_nan = ctx.ne(ctx.reduce("max", ctx.cast(nan, DType.i32), [axis]),
                         ctx.scalar(0, DType.i32))
        hit = ctx.where(any_nan, nan, hit)
    n = t.shape[axis]
    idx = ctx.where(hit, ctx.iota(n, axis, t.rank), ctx.scalar(n, DType.i32))
    return ctx.reduce("min", idx, [axis],
                      None if node.params.get("keep_dims") else node.outputs[0].type.shape)


@rule("reshape")
def _reshape(ctx, node, ins):
    return ctx.reshape(ins[0], node.outputs[0].type.shape)


@rule("transpose")
def _transpose(ctx, node, ins):
    return ctx.transpose(ins[0], node.params["perm"])


@rule("rev")
def _rev(ctx, node, ins):
    axes = node.params["axes"]
    return ctx.ca.reverse(ins[0], ctx.i32(axes)) if axes else ins[0]


@rule("broadcast_in_dim")
def _broadcast_in_dim(ctx, node, ins):
    x, in_t, shape = ins[0], _t(node), node.outputs[0].type.shape
    padded = [1] * len(shape)  # x's dims go to ``dims``: size-1-padded, then broadcast
    for d, n in zip(node.params["dims"], in_t.shape):
        padded[d] = n
    v = ctx.reshape(x, padded) if tuple(padded) != tuple(in_t.shape) else x
    if tuple(padded) == tuple(shape):
        return v
    out = ctx.broadcast(v, shape, in_t.dtype)
    ctx.before_broadcast[node.outputs[0].id] = (v, out)  # what a broadcasting op reads instead
    return out


@rule("dot_general")
def _dot_general(ctx, node, ins):
    lhs, rhs = ins
    (lc, rc), (lb, rb) = node.params["contract"], node.params["batch"]
    lt, rt = _t(node, 0), _t(node, 1)
    if not (lt.dtype.is_float and rt.dtype.is_float):
        raise unsupported(node, "integer matmul is not lowered for Core AI yet")
    lf = [d for d in range(lt.rank) if d not in lc and d not in lb]
    rf = [d for d in range(rt.rank) if d not in rc and d not in rb]
    size = lambda t, ds: prod([t.shape[d] for d in ds])  # noqa: E731  (Dyn: dynamic.py)
    nb, m, k, n = size(lt, lb), size(lt, lf), size(lt, lc), size(rt, rf)
    lhs = ctx.transpose(lhs, list(lb) + lf + list(lc))
    rhs = ctx.transpose(rhs, list(rb) + list(rc) + rf)
    out = ctx.matmul(ctx.reshape(lhs, (nb, m, k)), ctx.reshape(rhs, (nb, k, n)))
    return ctx.reshape(out, node.outputs[0].type.shape)


@rule("concatenate")
def _concatenate(ctx, node, ins):
    parts = [v for v, t in zip(ins, node.inputs) if t.type.shape[node.params["axis"]] > 0]
    if len(parts) == 1:
        return parts[0]
    return ctx.ca.concat(ctx.const(np.int32(node.params["axis"])), parts)


@rule("slice")
def _slice(ctx, node, ins):
    p = node.params
    return ctx.slice(ins[0], p["start"], p["limit"], p["strides"])


@rule("split")
def _split(ctx, node, ins):
    axis, t, out, start = node.params["axis"], _t(node), [], 0
    for n in node.params["sizes"]:
        lo, hi = [0] * t.rank, list(t.shape)
        lo[axis], hi[axis] = start, start + n
        out.append(ctx.slice(ins[0], lo, hi))
        start += n
    return out


@rule("pad")
def _pad(ctx, node, ins):
    x, value = ins
    return lax_pad(ctx, x, list(_t(node).shape), node.params["config"], value, _t(node).dtype)


#: most elements of the padded trailing dims that ``lax_pad`` gathers in one op (its index
#: constant holds one int32 per element of those dims)
GATHER_PAD = 1 << 16


def lax_pad(ctx, x, shape, config, value, dt):
    """lax.pad of ``x`` (of ``shape``) by ``config`` ((lo, hi, interior) per axis, negative
    edges crop) with the rank-0 ``value``. Where the padded dims are trailing and small
    (``GATHER_PAD``), one ``gather_along_axis`` of the flattened trailing dims and one
    ``where`` for the fill: Core AI's ``pad`` and ``concat`` cost 10-70x an elementwise op
    of the same size on its runtime (a 32x32x28x28 conv input: 700 ms a padded axis
    against 53 ms a gather, bench/coreai_speed.py), and both are exact copies."""
    shape = list(shape)
    padded = [a for a, c in enumerate(config) if tuple(c) != (0, 0, 0)]
    if not padded:
        return x
    first = padded[0]
    sources = [_pad_sources(d, *c) for d, c in zip(shape[first:], config[first:])]
    n_out = int(np.prod([len(s) for s in sources], dtype=np.int64))
    if 0 < n_out <= GATHER_PAD and int(np.prod(shape[first:], dtype=np.int64)) > 0:
        return _gather_pad(ctx, x, shape, first, sources, value, dt)
    return _edge_pad(ctx, x, shape, config, value, dt)


def _pad_sources(d: int, lo: int, hi: int, k: int) -> np.ndarray:
    """For each position of one axis padded by (lo, hi, interior k): the index of ``x``
    it copies, or -1 where it holds the padding value."""
    inner = np.full(d + max(d - 1, 0) * k, -1, np.int64)
    inner[::k + 1] = np.arange(d)
    full = np.concatenate([np.full(max(lo, 0), -1), inner[max(-lo, 0):], np.full(max(hi, 0), -1)])
    return full[:len(full) - max(-hi, 0)] if hi < 0 else full


def _gather_pad(ctx, x, shape, first, sources, value, dt):
    """``x`` padded along its trailing dims from ``first`` on: their flat source indices
    (``_pad_sources`` per axis) gathered in one op, the fill positions then set to
    ``value``."""
    lead, inner = shape[:first], shape[first:]
    strides = np.cumprod([1] + inner[::-1][:-1])[::-1]
    grids = np.meshgrid(*sources, indexing="ij")
    fill = np.any([g < 0 for g in grids], axis=0).reshape(-1)
    flat_src = sum(np.maximum(g, 0) * st for g, st in zip(grids, strides)).reshape(-1)
    n_in, n_out = int(np.prod(inner, dtype=np.int64)), flat_src.size
    rank1 = [1] * len(lead)
    flat = ctx.reshape(x, lead + [n_in])
    idx = ctx.broadcast(ctx.const(flat_src.astype(np.int32).reshape(rank1 + [n_out])),
                        lead + [n_out], DType.i32)
    y = ctx.gather_along(flat, idx, len(lead), lead + [n_out], dt)
    if fill.any():
        y = ctx.where(ctx.const(fill.reshape(rank1 + [n_out])), value, y)
    return ctx.reshape(y, lead + [len(s) for s in sources])


def _edge_pad(ctx, x, shape, config, value, dt):
    for axis, (lo, hi, k) in enumerate(config):
        d = shape[axis]
        if k and d > 1:  # interior: [.., d, 1, ..] ++ [.., d, k, ..] -> [.., d*(k+1), ..], cut
            col = ctx.reshape(x, shape[:axis] + [d, 1] + shape[axis + 1:])
            fill = ctx.broadcast(value, shape[:axis] + [d, k] + shape[axis + 1:], dt)
            x = ctx.ca.concat(ctx.const(np.int32(axis + 1)), [col, fill])
            x = ctx.reshape(x, shape[:axis] + [d * (k + 1)] + shape[axis + 1:])
            shape[axis] = d + (d - 1) * k
            x = ctx.slice(x, [0] * len(shape), list(shape))
        if lo > 0 or hi > 0:
            widths = [0] * (2 * len(shape))
            widths[2 * axis], widths[2 * axis + 1] = max(lo, 0), max(hi, 0)
            x = ctx.ca.pad(x, ctx.u32(widths), value)
            shape[axis] += max(lo, 0) + max(hi, 0)
        if lo < 0 or hi < 0:
            start, end = [0] * len(shape), list(shape)
            start[axis], end[axis] = max(-lo, 0), shape[axis] - max(-hi, 0)
            x = ctx.slice(x, start, end)
            shape[axis] = end[axis] - start[axis]
    return x


def _clamped_start(ctx, s, dim: int, size: int):
    """JAX's clamp of a start index: min(max(s, 0), dim - size), as int32 (rank 0)."""
    i32 = DType.i32
    s = ctx.ca.broadcasting_maximum(s, ctx.scalar(0, i32))
    return ctx.ca.broadcasting_minimum(s, ctx.scalar(dim - size, i32))


def _gather_range(ctx, x, shape, axis, start, n, dt):
    """x[..., start:start+n, ...] along ``axis`` for a runtime ``start`` (rank 0)."""
    idx_shape = list(shape)
    idx_shape[axis] = n
    idx = ctx.add(ctx.iota(n, axis, len(shape)), start)
    return ctx.gather_along(x, ctx.broadcast(idx, idx_shape, DType.i32), axis, idx_shape, dt)


@rule("dynamic_slice")
def _dynamic_slice(ctx, node, ins):
    x, starts, t = ins[0], ins[1:], _t(node)
    sizes, shape = node.params["sizes"], list(t.shape)
    for axis, (s, n) in enumerate(zip(starts, sizes)):
        if n == shape[axis]:
            continue  # the start clamps to 0
        s = _clamped_start(ctx, _index(ctx, node, 1 + axis, s), shape[axis], n)
        x = _gather_range(ctx, x, shape, axis, s, n, t.dtype)
        shape[axis] = n
    return x


def _index(ctx, node, i, v):
    return v if node.inputs[i].type.dtype == DType.i32 else ctx.cast(v, DType.i32)


@rule("dynamic_update_slice")
def _dynamic_update_slice(ctx, node, ins):
    x, upd, starts = ins[0], ins[1], ins[2:]
    t, ut = _t(node), _t(node, 1)
    if any(n == 0 for n in ut.shape):
        return x
    # an axis the update spans whole clamps its start to 0: nothing to place along it
    axes = [a for a in range(t.rank) if ut.shape[a] != t.shape[a]]
    if not axes:
        return upd
    if len(axes) == 1:  # one window axis (a KV cache's position): one scatter, in place
        (axis,) = axes
        d, n = t.shape[axis], ut.shape[axis]
        s = _clamped_start(ctx, _index(ctx, node, 2 + axis, starts[axis]), d, n)
        rows = ctx.add(ctx.iota(n, axis, t.rank), s)   # distinct: "update" writes each once
        from . import ca_private

        out_t = ctx.ca.TensorType(tuple(t.shape), ca_private.dtype(carried(t.dtype).np.name))
        return ctx.ca.scatter_along_axis(out_t, x, ctx.broadcast(rows, ut.shape, DType.i32),
                                         upd, ctx.const(np.int32(axis)),
                                         scatter_mode="update")
    shape, mask = list(ut.shape), None
    for axis in axes:
        d, n = t.shape[axis], ut.shape[axis]
        s = _clamped_start(ctx, _index(ctx, node, 2 + axis, starts[axis]), d, n)
        pos = ctx.iota(d, axis, t.rank)
        rel = ctx.sub(pos, s)  # the update's row for each of x's rows (clamped into it)
        inside = ctx.and_(ctx.gt(rel, ctx.scalar(-1, DType.i32)),
                          ctx.lt(rel, ctx.scalar(n, DType.i32)))
        mask = inside if mask is None else ctx.and_(mask, inside)
        idx = ctx.ca.broadcasting_minimum(ctx.ca.broadcasting_maximum(
            rel, ctx.scalar(0, DType.i32)), ctx.scalar(n - 1, DType.i32))
        shape[axis] = d
        upd = ctx.gather_along(upd, ctx.broadcast(idx, shape, DType.i32), axis, shape, t.dtype)
    return ctx.where(mask, upd, x)


@rule("gather_nd")
def _gather_nd(ctx, node, ins):
    return ctx.ca.gather_nd(ins[0], _index(ctx, node, 1, ins[1]))


_SCATTER_MODES = {"update": "update", "add": "add", "mul": "mul", "max": "max", "min": "min"}


@rule("scatter_nd")
def _scatter_nd(ctx, node, ins):
    x, idx, upd = ins
    xt, it = _t(node), _t(node, 1)
    mode = node.params["mode"]
    if mode not in _SCATTER_MODES:
        raise unsupported(node, f"scatter mode {mode!r} is not lowered for Core AI")
    if mode == "update" and not node.params.get("unique", False):
        raise unsupported(node, "a scatter (update) with possibly repeated indices: Core AI "
                                "writes any one of the repeated updates, JAX the last")
    k = it.shape[-1]
    lead, rest = xt.shape[:k], xt.shape[k:]
    p = int(np.prod(lead, dtype=np.int64))
    r = int(np.prod(rest, dtype=np.int64))
    m = int(np.prod(it.shape[:-1], dtype=np.int64))
    if m == 0:
        return x
    strides = np.array([int(np.prod(lead[i + 1:], dtype=np.int64)) for i in range(k)], np.int32)
    idx = _index(ctx, node, 1, idx)
    lin = ctx.reduce("sum", ctx.mul(ctx.reshape(idx, (m, k)), ctx.const(strides.reshape(1, k))),
                     [1])  # [m, 1]
    flat = ctx.reshape(x, (p, r))
    from . import ca_private

    out_t = ctx.ca.TensorType((p, r), ca_private.dtype(carried(xt.dtype).np.name))
    out = ctx.ca.scatter_along_axis(out_t, flat, ctx.broadcast(lin, (m, r), DType.i32),
                                    ctx.reshape(upd, (m, r)), ctx.const(np.int32(0)),
                                    scatter_mode=_SCATTER_MODES[mode])
    return ctx.reshape(out, xt.shape)


#: the most elements an integer cumsum's masked product may have (n * n * the other dims)
_INT_CUMSUM_LIMIT = 1 << 24


@rule("cumsum")
def _cumsum(ctx, node, ins):
    t, axis, reverse = _t(node), node.params["axis"], node.params["reverse"]
    if t.dtype.is_float:
        return ctx.ca.scan(ins[0], ctx.const(np.uint32(axis)), ctx.const(np.bool_(reverse)),
                           combiner="sum")
    shape = tuple(t.shape) or (1,)
    axis, n = (axis if t.shape else 0), shape[axis if t.shape else 0]
    size = int(np.prod(shape, dtype=np.int64)) * n
    if size > _INT_CUMSUM_LIMIT:
        raise unsupported(node, f"an integer cumsum over an axis of {n} ({size} mask elements "
                          f"> {_INT_CUMSUM_LIMIT}): Core AI's integer scan dies when a sum "
                          "wraps around, and the exact composition is quadratic in the axis; "
                          "cumsum in float32, or over a shorter axis")
    j, i = np.meshgrid(np.arange(n), np.arange(n))  # mask[i, j]: x[j] counts into out[i]
    mask = (j >= i) if reverse else (j <= i)
    mask = mask.astype(np.int32).reshape((1,) * axis + (n, n) + (1,) * (len(shape) - axis - 1))
    x = ctx.reshape(ins[0], shape[:axis] + (1,) + shape[axis:])
    out = ctx.reduce("sum", ctx.mul(x, ctx.const(mask)), [axis + 1])
    return ctx.reshape(out, tuple(t.shape))


@rule("take_at")
def _take_at(ctx, node, ins):
    """The one-hot ``where`` of entry ``i`` (the rest -0.0; int: 0) summed along the axis
    (exact: v + -0.0 is v, signed zeros and NaN included; a NaN elsewhere is not read).
    Core AI's runtime read garbage indices (and hung) on a ``gather_along_axis`` at an
    index computed from a loop's counter (measured)."""
    x, i = ins
    t, ax = _t(node), node.params["axis"]
    hit = ctx.eq(ctx.iota(t.shape[ax], ax, t.rank), i)
    fill = ctx.scalar(-0.0 if carried(t.dtype).is_float else 0, t.dtype)
    return ctx.reduce("sum", ctx.select_in_loop(hit, x, fill, t.dtype), [ax])
