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

Supported: every gather/scatter whose indexed dims have window size 1 and whose other
dims have full windows (take, x[idx], x[:, idx], x[i, j], take_along_axis, embeddings,
x.at[...].set/add/mul/min/max, JAX's gradients of these). Other forms raise
UnsupportedPrimitiveError naming the dimension numbers.
"""
from __future__ import annotations

import jax
import numpy as np
from jax import lax

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
@rule("gather")
def _gather(ctx, eqn, x, idx):
    p = eqn.params
    dn, sizes, mode = p["dimension_numbers"], tuple(p["slice_sizes"]), p["mode"]
    sim, ob = tuple(dn.start_index_map), tuple(dn.operand_batching_dims)
    ib, collapsed = tuple(dn.start_indices_batching_dims), set(dn.collapsed_slice_dims)
    offset_dims = tuple(dn.offset_dims)
    if any(sizes[d] != 1 for d in sim):
        raise ctx.unsupported(
            f"gather with a window of size > 1 on an indexed dim ({_dnums_str(dn)}, "
            f"slice_sizes={sizes}): only size-1 windows on indexed dims are supported; "
            "use lax.dynamic_slice for a single window")
    if mode not in (_Mode.CLIP, _Mode.FILL_OR_DROP, _Mode.PROMISE_IN_BOUNDS):
        raise ctx.unsupported(f"gather mode {mode}")
    idx = _i32(ctx, idx)
    bshape = tuple(idx.shape[:-1])
    rest = [d for d in range(x.type.rank) if d not in sim and d not in ob]
    if any(sizes[d] < x.shape[d] for d in rest):  # windows starting at 0 on the other dims
        limit = tuple(sizes[d] if d in rest else x.shape[d] for d in range(x.type.rank))
        x = ctx.add("slice", x, start=(0,) * x.type.rank, limit=limit,
                    strides=(1,) * x.type.rank)
    hi = [x.shape[d] - 1 for d in sim]
    valid = None
    if not _const_in_range(idx, hi):
        if mode == _Mode.FILL_OR_DROP:
            valid = _in_range(ctx, idx, hi)
        idx = _clamp(ctx, idx, hi)
    full = _with_batch_iotas(ctx, idx, ib)
    g = ctx.add("gather_nd", _transpose(ctx, x, ob + sim + tuple(rest)), full)
    od = [d for d in range(x.type.rank) if d not in collapsed and d not in ob]
    g = _reshape(ctx, g, bshape + tuple(sizes[d] for d in od))
    n, perm, bi = len(bshape), [], 0
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
    if any(wsize.get(d, 1) != 1 for d in sdod) or any(wsize.get(d, 1) != x.shape[d] for d in rest):
        raise ctx.unsupported(
            f"scatter with update windows {wsize} ({_dnums_str(dn)}) into {x.type}: only "
            "size-1 windows on scattered dims and full windows on the other dims are "
            "supported")
    idx = _i32(ctx, idx)
    bshape = tuple(idx.shape[:-1])
    # updates -> index batch dims + the full other dims, in operand order.
    upd_batch = [q for q in range(upd.type.rank) if q not in uwd]
    u = _transpose(ctx, upd, upd_batch + list(uwd))
    u = _reshape(ctx, u, bshape + tuple(x.shape[d] for d in rest))
    perm = ob + sdod + tuple(rest)
    xt = _transpose(ctx, x, perm)
    hi = [x.shape[d] - 1 for d in sdod]
    unique = bool(p.get("unique_indices", False))
    trash = False  # redirect some updates to a scratch slot just past the end
    valid = None
    if jmode == _Mode.CLIP:
        if not _const_in_range(idx, hi):
            idx = _clamp(ctx, idx, hi)
    elif not _const_in_range(idx, hi):
        valid = _in_range(ctx, idx, hi)
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
    from jax._src.lax.other import logaddexp

    return {"cumprod": lax.mul, "cummax": lax.max, "cummin": lax.min,
            "cumlogsumexp": logaddexp}[name]


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


def _ranks(ctx, x, descending):
    """Stable rank of every element along the last axis (O(n^2) comparisons: exact,
    deterministic and tie-stable as JAX, which MIL's argsort/topk do not promise)."""
    if x.dtype == DType.bool:
        x = ctx.add("convert", x, dtype=DType.i32)
    s, n = tuple(x.shape[:-1]), x.shape[-1]
    xi = _reshape(ctx, x, s + (n, 1))
    xj = _reshape(ctx, x, s + (1, n))
    j_lt_i = _lt(ctx, xj, xi)   # [.., i, j]: x_j sorts before x_i
    i_lt_j = _lt(ctx, xi, xj)
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
    p = eqn.params
    if int(p["num_keys"]) != 1:
        raise ctx.unsupported(f"sort with num_keys={p['num_keys']} (lexicographic keys); "
                              "only a single key operand is supported")
    axis = int(p["dimension"])
    key = operands[0]
    if key.type.rank == 0 or key.shape[axis] <= 1:
        return list(operands)
    k_last, back = _to_last(ctx, key, axis)
    perm = _perm(ctx, _ranks(ctx, k_last, descending=False), key.shape[axis])
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
