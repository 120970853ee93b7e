"""Frontend rules: gather / scatter (JAX's general dimension numbers and modes),
dynamic slices, cumulative reductions, sort / top_k.

JAX's ``gather`` and ``scatter`` are normalised onto the RLX ops ``gather_nd`` and
``scatter_nd`` (ir/indexing.py), whose indices are always in range:

1. the operand is transposed to ``batching dims + indexed dims + the other dims``;
2. operand batching dims (take_along_axis, vmap) become explicit index components built
   from iota constants, so one depth-K index addresses ``x[b..., i...]``;
3. out-of-range indices get JAX's meaning explicitly: ``clip`` clamps; gather
   ``fill`` clamps and then selects the fill value where any component was out of range;
   scatter ``fill``/``promise_in_bounds`` drop the update (XLA drops out-of-range scatter
   updates, and clamps out-of-range gather starts, which is what promise_in_bounds does
   on CPU);
4. the result is reshaped and transposed into JAX's layout (offset dims).

Windows wider than 1 on indexed dims (vmap of dynamic_slice / dynamic_update_slice,
``lax.gather`` of blocks, and JAX's gradients of these) become extra index batch axes
counting along each window, so gather_nd / scatter_nd still move one element per position;
JAX clamps (clip) or range-checks (fill / drop: the whole window) the window *start* into
``[0, dim - window]``.

Supported: every gather; every scatter whose dims that are not scattered to have full
windows (take, x[idx], x[:, idx], x[i, j], take_along_axis, embeddings,
x.at[...].set/add/mul/min/max, windowed forms, JAX's gradients of these). Other scatters
raise UnsupportedPrimitiveError naming the dimension numbers. ``sort`` takes any number of
lexicographic keys (``num_keys``, jnp.lexsort) and carries the other operands along.
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax

from ... import _jax_compat as jc
from ...ir import DType, constant_value
from ..registry import rule

_Mode = lax.GatherScatterMode


# -- small graph helpers ----------------------------------------------------------------
def _reshape(ctx, x, shape):
    shape = tuple(shape)
    return x if tuple(x.shape) == shape else ctx.add("reshape", x, shape=shape)


def _transpose(ctx, x, perm):
    perm = tuple(perm)
    return x if perm == tuple(range(len(perm))) else ctx.add("transpose", x, perm=perm)


def _broadcast(ctx, x, shape, dims):
    shape, dims = tuple(shape), tuple(dims)
    if tuple(x.shape) == shape and dims == tuple(range(len(shape))):
        return x
    return ctx.add("broadcast_in_dim", x, shape=shape, dims=dims)


def _i32(ctx, v):
    return v if v.dtype == DType.i32 else ctx.add("convert", v, dtype=DType.i32)


def _iota(shape, axis):
    """int32 array of ``shape`` counting along ``axis``."""
    ramp = np.arange(shape[axis], dtype=np.int32).reshape(
        [-1 if i == axis else 1 for i in range(len(shape))])
    return np.broadcast_to(ramp, shape).copy()


def _all_last(ctx, m):
    """bool[..., K] -> bool[...]: every component true."""
    k = m.shape[-1]
    n = ctx.add("reduce_sum", ctx.add("convert", m, dtype=DType.i32), axes=(m.type.rank - 1,))
    return ctx.add("eq", n, ctx.constant(np.int32(k)))


def _in_range(ctx, idx, hi):
    """idx i32[..., K] -> bool[...]: 0 <= idx[..., k] <= hi[k] for every k."""
    ok = ctx.add("and", ctx.add("ge", idx, ctx.constant(np.zeros(len(hi), np.int32))),
                 ctx.add("le", idx, ctx.constant(np.asarray(hi, np.int32))))
    return _all_last(ctx, ok)


def _clamp(ctx, idx, hi):
    return ctx.add("clamp", ctx.constant(np.zeros(len(hi), np.int32)), idx,
                   ctx.constant(np.asarray(hi, np.int32)))


def _const_in_range(idx, hi) -> bool:
    c = constant_value(idx)
    return c is not None and bool(np.all((c >= 0) & (c <= np.asarray(hi))))


def _with_batch_iotas(ctx, idx, ib):
    """Prepend one index component per indices batching dim (its iota)."""
    if not ib:
        return idx
    bshape = tuple(idx.shape[:-1])
    parts = [ctx.constant(_iota(bshape, d)[..., None]) for d in ib]
    return ctx.add("concatenate", *parts, idx, axis=len(bshape))


def _dnums_str(dn) -> str:
    return str(dn).replace("\n", " ")


def _default_fill(dtype: DType):
    """JAX's gather fill for fill_value=None: NaN, the most negative int, or True."""
    if dtype.is_float:
        return np.nan
    if dtype == DType.bool:
        return True
    return np.iinfo(dtype.np).min if dtype.np.kind == "i" else np.iinfo(dtype.np).max


# -- gather --------------------------------------------------------------------------------
def _window_offsets(ctx, idx, sizes_k):
    """Starts i32[B..., K] -> element indices i32[B..., W..., K]: one axis per component
    whose window is wider than 1 (in component order), counting along it."""
    wide = [k for k, w in enumerate(sizes_k) if w > 1]
    if not wide:
        return idx, ()
    wshape = tuple(sizes_k[k] for k in wide)
    n, kdim = idx.type.rank - 1, idx.shape[-1]
    off = np.zeros(wshape + (kdim,), np.int32)
    for j, k in enumerate(wide):
        off[..., k] = _iota(wshape, j)
    full = tuple(idx.shape[:-1]) + wshape + (kdim,)
    b = _broadcast(ctx, idx, full, tuple(range(n)) + (len(full) - 1,))
    return ctx.add("add", b, ctx.constant(off)), wshape


@rule("gather")
def _gather(ctx, eqn, x, idx):
    """Windows on indexed dims (vmap of dynamic_slice, x[i:i+k] per row) become extra
    index batch axes counting along each window, so gather_nd reads one element per
    position; JAX clamps (clip) or range-checks (fill) the window *start* into
    [0, dim - window]."""
    p = eqn.params
    dn, sizes, mode = p["dimension_numbers"], tuple(p["slice_sizes"]), p["mode"]
    sim, ob = tuple(dn.start_index_map), tuple(dn.operand_batching_dims)
    ib, collapsed = tuple(dn.start_indices_batching_dims), set(dn.collapsed_slice_dims)
    offset_dims = tuple(dn.offset_dims)
    if mode not in (_Mode.CLIP, _Mode.FILL_OR_DROP, _Mode.PROMISE_IN_BOUNDS):
        raise ctx.unsupported(f"gather mode {mode}")
    idx = _i32(ctx, idx)
    bshape = tuple(idx.shape[:-1])
    rest = [d for d in range(x.type.rank) if d not in sim and d not in ob]
    if any(sizes[d] < x.shape[d] for d in rest):  # windows starting at 0 on the other dims
        limit = tuple(sizes[d] if d in rest else x.shape[d] for d in range(x.type.rank))
        x = ctx.add("slice", x, start=(0,) * x.type.rank, limit=limit,
                    strides=(1,) * x.type.rank)
    hi = [x.shape[d] - sizes[d] for d in sim]  # largest start whose window fits
    valid = None
    if not _const_in_range(idx, hi):
        if mode == _Mode.FILL_OR_DROP:
            valid = _in_range(ctx, idx, hi)
        idx = _clamp(ctx, idx, hi)
    idx, wshape = _window_offsets(ctx, idx, [sizes[d] for d in sim])
    wide = [d for d in sim if sizes[d] > 1]
    full = _with_batch_iotas(ctx, idx, ib)
    g = ctx.add("gather_nd", _transpose(ctx, x, ob + sim + tuple(rest)), full)
    # g: bshape + window axes (sim order) + rest dims; bring them into operand order
    od = [d for d in range(x.type.rank) if d not in collapsed and d not in ob]
    n = len(bshape)
    axis_of = {d: n + j for j, d in enumerate(wide)}
    axis_of.update({d: n + len(wide) + j for j, d in enumerate(rest)})
    present = [d for d in od if d in axis_of]
    g = _transpose(ctx, g, list(range(n)) + [axis_of[d] for d in present])
    g = _reshape(ctx, g, bshape + tuple(sizes[d] for d in od))
    perm, bi = [], 0
    for pos in range(n + len(od)):
        if pos in offset_dims:
            perm.append(n + offset_dims.index(pos))
        else:
            perm.append(bi)
            bi += 1
    out = _transpose(ctx, g, perm)
    if valid is not None:
        fill = p["fill_value"]
        fill = _default_fill(x.dtype) if fill is None else fill
        batch_pos = [q for q in range(out.type.rank) if q not in offset_dims]
        keep = _broadcast(ctx, valid, out.shape, batch_pos)
        out = ctx.add("select", keep, ctx.constant(np.asarray(fill, x.dtype.np)), out)
    return out


# -- scatter -------------------------------------------------------------------------------
_SCATTER_MODE = {"scatter": "update", "scatter-add": "add", "scatter_add": "add",
                 "scatter-mul": "mul", "scatter_mul": "mul", "scatter-min": "min",
                 "scatter_min": "min", "scatter-max": "max", "scatter_max": "max",
                 "scatter-sub": "sub", "scatter_sub": "sub"}


def _neutral(mode, dtype: DType):
    """Update value that leaves the operand unchanged (a dropped update), if any."""
    if mode == "add" and dtype != DType.bool:
        return 0
    if mode == "mul" and dtype != DType.bool:
        return 1
    return None


@rule(*_SCATTER_MODE)
def _scatter(ctx, eqn, x, idx, upd):
    p = eqn.params
    dn, jmode = p["dimension_numbers"], p["mode"]
    mode = _SCATTER_MODE[eqn.primitive.name]
    if mode == "sub":
        mode, upd = "add", ctx.add("neg", upd)
    uwd, iwd = tuple(dn.update_window_dims), set(dn.inserted_window_dims)
    sdod, ob = tuple(dn.scatter_dims_to_operand_dims), tuple(dn.operand_batching_dims)
    ib = tuple(dn.scatter_indices_batching_dims)
    if jmode not in (_Mode.CLIP, _Mode.FILL_OR_DROP, _Mode.PROMISE_IN_BOUNDS):
        raise ctx.unsupported(f"scatter mode {jmode}")
    if p.get("update_jaxpr") is not None and mode == "update":
        raise ctx.unsupported("scatter with a custom combiner (lax.scatter_apply)")
    rank = x.type.rank
    wd = [d for d in range(rank) if d not in iwd and d not in ob]  # window dims of updates
    wsize = {d: upd.shape[uwd[j]] for j, d in enumerate(wd)}
    rest = [d for d in range(rank) if d not in sdod and d not in ob]
    if any(wsize.get(d, 1) != x.shape[d] for d in rest):
        raise ctx.unsupported(
            f"scatter with update windows {wsize} ({_dnums_str(dn)}) into {x.type}: only "
            "full windows on the dims that are not scattered to are supported")
    # Windows wider than 1 on scattered dims (the gradient of a windowed gather, vmap of
    # dynamic_update_slice) become extra index batch axes, one element per position; JAX
    # clamps (clip) or range-checks (drop) the window *start* into [0, dim - window].
    sizes_k = [wsize.get(d, 1) for d in sdod]
    wide = [d for d, w in zip(sdod, sizes_k) if w > 1]
    wshape = tuple(wsize[d] for d in wide)
    idx = _i32(ctx, idx)
    bshape0 = tuple(idx.shape[:-1])
    # updates -> index batch dims + window axes (scatter order) + the other dims (operand order)
    upd_batch = [q for q in range(upd.type.rank) if q not in uwd]
    uwd_of = {d: uwd[j] for j, d in enumerate(wd)}
    ones = [uwd_of[d] for d in wd if d not in wide and d not in rest]  # size-1 windows
    u = _transpose(ctx, upd, upd_batch + [uwd_of[d] for d in wide]
                   + [uwd_of[d] for d in rest] + ones)
    u = _reshape(ctx, u, bshape0 + wshape + tuple(x.shape[d] for d in rest))
    perm = ob + sdod + tuple(rest)
    xt = _transpose(ctx, x, perm)
    hi_start = [x.shape[d] - w for d, w in zip(sdod, sizes_k)]
    hi = [x.shape[d] - 1 for d in sdod]
    unique = bool(p.get("unique_indices", False))
    trash = False  # redirect some updates to a scratch slot just past the end
    valid = None
    if not _const_in_range(idx, hi_start):
        if jmode == _Mode.CLIP:
            idx = _clamp(ctx, idx, hi_start)
        else:
            valid = _in_range(ctx, idx, hi_start)
    idx, _ = _window_offsets(ctx, idx, sizes_k)
    bshape = bshape0 + wshape
    if valid is not None:
        valid = _broadcast(ctx, valid, bshape, range(len(bshape0)))
        neutral = _neutral(mode, x.dtype)
        if neutral is not None:  # a dropped add/mul contributes its neutral element
            keep = _broadcast(ctx, valid, u.shape, range(len(bshape)))
            u = ctx.add("select", keep, ctx.constant(np.asarray(neutral, x.dtype.np)), u)
            idx, valid = _clamp(ctx, idx, hi), None
        else:
            trash = True
    c = constant_value(idx)
    const_unique = c is not None and len({tuple(r) for r in c.reshape(-1, c.shape[-1])}) \
        == int(np.prod(bshape, dtype=np.int64))
    unique = unique or const_unique
    dedupe = mode == "update" and not unique and int(np.prod(bshape, dtype=np.int64)) > 1
    trash = trash or dedupe
    k0 = len(ob)
    if trash:
        for axis in range(k0, k0 + len(sdod)):  # concat, not pad: MIL's pad is float-only
            slab = list(xt.shape)
            slab[axis] = 1
            zeros = _broadcast(ctx, ctx.constant(np.zeros((), x.dtype.np)), slab, ())
            xt = ctx.add("concatenate", xt, zeros, axis=axis)
        spot = ctx.constant(np.asarray([h + 1 for h in hi], np.int32))
        if valid is not None:
            vk = _broadcast(ctx, valid, idx.shape, range(len(bshape)))
            idx = ctx.add("select", vk, spot, idx)
    full = _with_batch_iotas(ctx, idx, ib)
    if dedupe:
        full = _last_writes_win(ctx, full, tuple(xt.shape[:full.shape[-1]]), bshape, ib, spot)
    y = ctx.add("scatter_nd", xt, full, u, mode=mode, unique=unique)
    if trash:
        y = ctx.add("slice", y, start=(0,) * rank, limit=tuple(x.shape[d] for d in perm),
                    strides=(1,) * rank)
    return _transpose(ctx, y, tuple(int(i) for i in np.argsort(perm)))


def _last_writes_win(ctx, full, lead, bshape, ib, spot):
    """JAX (XLA on CPU) applies duplicate ``.set`` updates in order, so the last one wins.
    Make that deterministic: scatter each update's position number with 'max' into an
    index-space buffer, read it back, and send every update that is not the last one for
    its position to the scratch slot."""
    ids = ctx.constant(np.arange(int(np.prod(bshape, dtype=np.int64)),
                                 dtype=np.int32).reshape(bshape))
    init = _broadcast(ctx, ctx.constant(np.int32(-1)), lead, ())
    winner = ctx.add("scatter_nd", init, full, ids, mode="max", unique=False)
    last = ctx.add("eq", ctx.add("gather_nd", winner, full), ids)
    loser_at = _with_batch_iotas(ctx, _broadcast(ctx, spot, full.shape[:-1] + spot.shape,
                                                 (len(bshape),)), ib)
    keep = _broadcast(ctx, last, full.shape, range(len(bshape)))
    return ctx.add("select", keep, loser_at, full)


# -- dynamic slices ------------------------------------------------------------------------
def _clamped_starts(ctx, x, starts, sizes):
    """JAX clamps each start into [0, dim - size]; constant starts are clamped here."""
    out, static = [], []
    for s, d, n in zip(starts, x.shape, sizes):
        c = constant_value(s)
        if c is not None:
            v = int(np.clip(int(c), 0, d - n))
            static.append(v)
            out.append(ctx.constant(np.int32(v)))
        else:
            static.append(None)
            out.append(ctx.add("clamp", ctx.constant(np.int32(0)), _i32(ctx, s),
                               ctx.constant(np.int32(d - n))))
    return out, static


@rule("dynamic_slice")
def _dynamic_slice(ctx, eqn, x, *starts):
    sizes = tuple(int(s) for s in eqn.params["slice_sizes"])
    starts = starts[:x.type.rank]
    if x.type.rank == 0:
        return x
    vals, static = _clamped_starts(ctx, x, starts, sizes)
    if all(s is not None for s in static):
        return ctx.add("slice", x, start=tuple(static),
                       limit=tuple(s + n for s, n in zip(static, sizes)),
                       strides=(1,) * len(sizes))
    return ctx.add("dynamic_slice", x, *vals, sizes=sizes)


@rule("dynamic_update_slice")
def _dynamic_update_slice(ctx, eqn, x, upd, *starts):
    if x.type.rank == 0:
        return upd
    vals, _ = _clamped_starts(ctx, x, starts, upd.shape)
    return ctx.add("dynamic_update_slice", x, upd, *vals)


# -- cumulative reductions -----------------------------------------------------------------
@rule("cumsum")
def _cumsum(ctx, eqn, x):
    if x.dtype not in (DType.f32, DType.f16, DType.i32):
        raise ctx.unsupported(f"cumsum of {x.dtype} (Core ML's cumsum takes fp16/fp32/int32)")
    return ctx.add("cumsum", x, axis=int(eqn.params["axis"]),
                   reverse=bool(eqn.params["reverse"]))


def _combine(name):
    return {"cumprod": lax.mul, "cummax": lax.max, "cummin": lax.min,
            "cumlogsumexp": jc.logaddexp()}[name]


def _interleave(a, b, axis):
    """JAX's loops._interleave: a at even, b at odd positions (pad + add)."""
    a_pad, b_pad = [(0, 0, 0)] * a.ndim, [(0, 0, 0)] * b.ndim
    same = a.shape[axis] == b.shape[axis]
    a_pad[axis] = (0, 1 if same else 0, 1)
    b_pad[axis] = (1, 0 if same else 1, 1)
    op = lax.bitwise_or if a.dtype == np.bool_ else lax.add
    return op(lax.pad(a, np.zeros((), a.dtype), a_pad), lax.pad(b, np.zeros((), b.dtype), b_pad))


def _prefix_scan(fn, x, axis):
    """lax.associative_scan(fn, x, axis=axis) for one array, step for step, except that the
    combine of two empty slices (length 2) is skipped: zero-size tensors are not something
    to put in a Core ML program, and the skipped op contributes nothing, to values or
    gradients."""
    n = x.shape[axis]
    if n < 2:
        return x
    sl = lax.slice_in_dim
    odd = _prefix_scan(fn, fn(sl(x, 0, n - 1, 2, axis), sl(x, 1, n, 2, axis)), axis)
    if n % 2 == 0:
        m = odd.shape[axis]
        even = fn(sl(odd, 0, m - 1, 1, axis), sl(x, 2, n, 2, axis)) if m > 1 else None
    else:
        even = fn(odd, sl(x, 2, n, 2, axis))
    head = sl(x, 0, 1, 1, axis)
    even = head if even is None else lax.concatenate([head, even], axis)
    return _interleave(even, odd, axis)


@rule("cumprod", "cummax", "cummin", "cumlogsumexp")
def _cumulative(ctx, eqn, x):
    """MIL has no cumprod/cummax/...: inline JAX's own parallel prefix scan
    (lax.associative_scan, replicated by _prefix_scan), which is also what JAX
    differentiates for these primitives, so gradients (ties included) follow JAX's."""
    name, p = eqn.primitive.name, eqn.params
    axis, reverse = int(p["axis"]), bool(p["reverse"])

    def scan(v):
        v = lax.rev(v, (axis,)) if reverse else v
        out = _prefix_scan(_combine(name), v, axis)
        return lax.rev(out, (axis,)) if reverse else out

    closed = jax.make_jaxpr(scan)(jax.ShapeDtypeStruct(tuple(x.shape), x.dtype.np))
    (out,) = ctx.eval_jaxpr(closed.jaxpr, closed.consts, [x])
    return out


# -- sort / top_k --------------------------------------------------------------------------
def _lt(ctx, a, b):
    """a < b in lax.sort's order: NaNs last and equal to each other, -0 == +0."""
    lt = ctx.add("lt", a, b)
    if not a.dtype.is_float:
        return lt
    a_nan, b_nan = ctx.add("ne", a, a), ctx.add("ne", b, b)
    return ctx.add("or", lt, ctx.add("and", b_nan, ctx.add("not", a_nan)))


def _ranks(ctx, keys, descending):
    """Stable rank of every element along the last axis, ordered lexicographically by
    ``keys`` (one tensor, or a list: first key first). O(n^2) comparisons: exact,
    deterministic and tie-stable as JAX, which MIL's argsort/topk do not promise."""
    keys = keys if isinstance(keys, (list, tuple)) else [keys]
    keys = [ctx.add("convert", k, dtype=DType.i32) if k.dtype == DType.bool else k
            for k in keys]
    s, n = tuple(keys[0].shape[:-1]), keys[0].shape[-1]
    j_lt_i = i_lt_j = None
    for k in reversed(keys):  # lt = lt_1 or (eq_1 and (lt_2 or (eq_2 and ...)))
        xi = _reshape(ctx, k, s + (n, 1))
        xj = _reshape(ctx, k, s + (1, n))
        a, b = _lt(ctx, xj, xi), _lt(ctx, xi, xj)   # [.., i, j]: x_j before / after x_i
        if j_lt_i is not None:
            tie = ctx.add("not", ctx.add("or", a, b))
            a = ctx.add("or", a, ctx.add("and", tie, j_lt_i))
            b = ctx.add("or", b, ctx.add("and", tie, i_lt_j))
        j_lt_i, i_lt_j = a, b
    if descending:
        j_lt_i, i_lt_j = i_lt_j, j_lt_i
    before = ctx.constant(np.tril(np.ones((n, n), bool), -1))  # j < i
    tie_before = ctx.add("and", before, ctx.add("not", i_lt_j))
    count = ctx.add("or", j_lt_i, tie_before)
    return ctx.add("reduce_sum", ctx.add("convert", count, dtype=DType.i32),
                   axes=(len(s) + 1,))


def _perm(ctx, ranks, m):
    """perm[..., r] = the i with ranks[..., i] == r, for r < m."""
    s, n = tuple(ranks.shape[:-1]), ranks.shape[-1]
    r = _reshape(ctx, ranks, s + (1, n))
    hit = ctx.add("eq", r, ctx.constant(np.arange(m, dtype=np.int32).reshape(m, 1)))
    which = ctx.add("mul", ctx.add("convert", hit, dtype=DType.i32),
                    ctx.constant(np.arange(n, dtype=np.int32)))
    return ctx.add("reduce_sum", which, axes=(len(s) + 1,))


def _take_last(ctx, x, perm):
    """x[..., perm[..., r]] along the last axis (a gather; its gradient a scatter-add)."""
    s = tuple(perm.shape[:-1])
    idx = _reshape(ctx, perm, tuple(perm.shape) + (1,))
    full = _with_batch_iotas(ctx, idx, tuple(range(len(s))))
    return ctx.add("gather_nd", x, full)


def _is_iota(v, axis) -> bool:
    c = constant_value(v)
    return c is not None and c.dtype == np.int32 and np.array_equal(c, _iota(c.shape, axis))


def _to_last(ctx, x, axis):
    perm = [d for d in range(x.type.rank) if d != axis] + [axis]
    return _transpose(ctx, x, perm), tuple(int(i) for i in np.argsort(perm))


@rule("sort")
def _sort(ctx, eqn, *operands):
    """Lexicographic over the first ``num_keys`` operands (jnp.lexsort), stable; the other
    operands are carried along by the same permutation."""
    p = eqn.params
    axis, nk = int(p["dimension"]), int(p["num_keys"])
    key = operands[0]
    if key.type.rank == 0 or key.shape[axis] <= 1:
        return list(operands)
    keys = [_to_last(ctx, k, axis) for k in operands[:nk]]
    back = keys[0][1]
    perm = _perm(ctx, _ranks(ctx, [k for k, _ in keys], descending=False), key.shape[axis])
    outs = []
    for op in operands:
        if _is_iota(op, axis):  # argsort's index operand: the permutation itself
            outs.append(_transpose(ctx, perm, back))
            continue
        o_last, _ = _to_last(ctx, op, axis)
        outs.append(_transpose(ctx, _take_last(ctx, o_last, perm), back))
    return outs


@rule("top_k")
def _top_k(ctx, eqn, x):
    p = eqn.params
    k = int(p["k"])
    axis = int(p.get("axis", x.type.rank - 1)) % x.type.rank
    x_last, back = _to_last(ctx, x, axis)
    perm = _perm(ctx, _ranks(ctx, x_last, descending=True), k)
    values = _take_last(ctx, x_last, perm)
    return [_transpose(ctx, values, back), _transpose(ctx, perm, back)]
