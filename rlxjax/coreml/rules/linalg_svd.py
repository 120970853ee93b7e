"""Lowering: ``svd`` (ir/linalg.py) by one-sided Jacobi (Hestenes; LAPACK ``gesvj``'s
method), as nested MIL ``while_loop``s.

The columns of ``w = a`` (of ``aᵀ`` when m < n, so that w is tall) are rotated pairwise
until every pair is orthogonal to working precision: a pair (p, q) with
``|w_p·w_q| > tol·‖w_p‖‖w_q‖`` (``tol = sqrt(rows)·eps``, gesvj's) is rotated by the
Jacobi rotation that zeroes ``w_p·w_q``, and the same rotation accumulates in ``v``. A
sweep visits every pair once, in the round-robin order that makes each round ``n/2``
disjoint pairs (one vectorised step: a ``gather`` of the pairs' columns, the rotation,
a ``gather`` back). Sweeps repeat until one finds every pair orthogonal; the singular
values are then the column norms (high relative accuracy), ``u = w / σ``, sorted by
decreasing σ. A matrix that has not converged after 30 sweeps (gesvj's limit) gives NaN,
as JAX gives NaN where LAPACK reports a failure.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, TensorType
from ...ir.linalg import MAX_SWEEPS, round_robin
from ..builder import cast_name
from ..registry import lowering
from .common import Ew, reshape, slice_axis
from .linalg import I32, BOOL, take_at, column_loop, swap_last

def _gather_cols(b, x, idx, n):
    shape = tuple(x.shape[:-1]) + (n,)
    return b.op("gather", TensorType(shape, x.dtype), x=x, indices=idx,
                axis=np.int32(x.type.rank - 1))


def _sweep_round(b, w, v, off, idx, inv, tol):
    """One round: rotate the n/2 disjoint column pairs ``idx`` of w (and v)."""
    e = Ew(b)
    n2 = w.shape[-1]
    h = n2 // 2
    dt = w.dtype.np
    one, zero = np.asarray(1, dt), np.asarray(0, dt)
    gw, gv = _gather_cols(b, w, idx, n2), _gather_cols(b, v, idx, n2)
    wp, wq = slice_axis(b, gw, w.type.rank - 1, 0, h), slice_axis(b, gw, w.type.rank - 1, h, n2)
    vp, vq = slice_axis(b, gv, v.type.rank - 1, 0, h), slice_axis(b, gv, v.type.rank - 1, h, n2)

    def colsum(x):
        shape = tuple(x.shape[:-2]) + (1, x.shape[-1])
        return b.op("reduce_sum", TensorType(shape, x.dtype), x=x,
                    axes=np.asarray([-2], np.int32), keep_dims=True)

    alpha, beta, gamma = colsum(e.binary("mul", wp, wp)), colsum(e.binary("mul", wq, wq)), \
        colsum(e.binary("mul", wp, wq))
    scale = e.binary("mul", e.unary("sqrt", alpha), e.unary("sqrt", beta))
    ratio = e.select(e.compare("greater", scale, zero),
                     e.binary("real_div", e.unary("abs", gamma), scale), zero)
    rotate = e.compare("greater", ratio, np.asarray(tol, dt))
    zeta = e.binary("real_div", e.binary("sub", beta, alpha), e.binary("mul", gamma,
                                                                       np.asarray(2, dt)))
    abs_zeta = e.unary("abs", zeta)
    root = e.unary("sqrt", e.binary("add", one, e.binary("mul", zeta, zeta)))
    t = e.binary("real_div", one, e.binary("add", abs_zeta, root))  # sign(ζ)·t below
    t = e.select(e.compare("less", zeta, zero), e.binary("mul", t, np.asarray(-1, dt)), t)
    huge = e.compare("greater", abs_zeta, np.asarray(1e15, dt))  # zeta² would overflow
    t = e.select(huge, e.binary("real_div", np.asarray(0.5, dt), zeta), t)
    c = e.binary("real_div", one, e.unary("sqrt", e.binary("add", one, e.binary("mul", t, t))))
    s = e.binary("mul", c, t)
    c, s = e.select(rotate, c, one), e.select(rotate, s, zero)

    def turn(p, q):
        p2 = e.binary("sub", e.binary("mul", c, p), e.binary("mul", s, q))
        q2 = e.binary("add", e.binary("mul", s, p), e.binary("mul", c, q))
        both = b.op("concat", p.type.with_shape(tuple(p.shape[:-1]) + (n2,)), values=[p2, q2],
                    axis=np.int32(p.type.rank - 1), interleave=False)
        return _gather_cols(b, both, inv, n2)

    worst = b.op("reduce_max", TensorType((), w.dtype), x=ratio,
                 axes=np.arange(ratio.type.rank, dtype=np.int32), keep_dims=False)
    return turn(wp, wq), turn(vp, vq), e.binary("maximum", off, worst)


def _sort_descending(b, sigma, w, v):
    """σ [..., 1, n] and the columns of w, v in order of decreasing σ (ties by index)."""
    e = Ew(b)
    n = sigma.shape[-1]
    batch = tuple(sigma.shape[:-2])
    col = reshape(b, sigma, batch + (n, 1))
    ids_r, ids_c = np.arange(n, dtype=np.int32).reshape(1, n), \
        np.arange(n, dtype=np.int32).reshape(n, 1)
    # rank of entry i (a column of ``before``): how many entries come before it
    before = e.binary("logical_or", e.compare("greater", col, sigma),
                      e.binary("logical_and", e.compare("equal", col, sigma),
                               e.compare("less", ids_c, ids_r), DType.bool), DType.bool)
    as_int = b.op("cast", before.type.with_dtype(DType.i32), x=before, dtype="int32")
    rank = b.op("reduce_sum", TensorType(batch + (1, n), DType.i32), x=as_int,
                axes=np.asarray([-2], np.int32), keep_dims=True)
    dt = sigma.dtype.np
    # perm[j, i] = 1 where entry i goes to place j
    hit = e.compare("equal", rank, ids_c)
    perm = b.op("cast", hit.type.with_dtype(sigma.dtype), x=hit, dtype=cast_name(sigma.dtype))

    def mm(x, y, ty):
        shape = tuple(x.shape[:-1]) + ((y.shape[-2],) if ty else (y.shape[-1],))
        return b.op("matmul", TensorType(shape, x.dtype), x=x, y=y, transpose_x=False,
                    transpose_y=ty)

    return mm(sigma, perm, True), mm(w, perm, True), mm(v, perm, True)


@lowering("svd")
def _svd(ctx, node, a):
    b, e = ctx.b, Ew(ctx.b)
    m, n = a.shape[-2:]
    batch = tuple(a.shape[:-2])
    dt = ctx.out_type(node, 0).dtype.np
    w = a if m >= n else swap_last(b, a)
    rows, cols = max(m, n), min(m, n)
    n2 = cols + cols % 2
    if n2 != cols:  # an odd column count gets a zero column: it never rotates
        w = b.op("concat", w.type.with_shape(batch + (rows, n2)),
                 values=[w, b.full(w.type.with_shape(batch + (rows, 1)), 0)],
                 axis=np.int32(w.type.rank - 1), interleave=False)
    tol = float(np.sqrt(rows) * np.finfo(dt).eps)
    table = round_robin(n2)
    inverse = np.argsort(table, axis=1).astype(np.int32)
    v0 = b.const(np.ascontiguousarray(np.broadcast_to(np.eye(n2, dtype=dt),
                                                      batch + (n2, n2))))
    off_t = TensorType((), w.dtype)

    def round_(r, w, v, off):
        idx = reshape(b, take_at(b, b.const(table), 0, r), (n2,))
        inv = reshape(b, take_at(b, b.const(inverse), 0, r), (n2,))
        return _sweep_round(b, w, v, off, idx, inv, tol)

    # while sweeps < MAX and the last sweep rotated a pair: another sweep
    types = [I32, w.type, v0.type, off_t]
    state = b.begin_block(types)
    more = e.binary("logical_and", e.compare("less", state[0], np.int32(MAX_SWEEPS)),
                    e.compare("greater", state[3], np.asarray(tol, dt)), DType.bool)
    cond_blk = b.end_block([more])
    state = b.begin_block(types)
    w1, v1, off = column_loop(b, n2 - 1, [state[1], state[2], b.const(np.asarray(0, dt))], round_)
    body_blk = b.end_block([b.op("add", I32, x=state[0], y=np.int32(1)), w1, v1, off])
    _, w, v, off = b.op_with_blocks("while_loop", types, [cond_blk, body_blk],
                                    loop_vars=[b.const(np.int32(0)), w, v0,
                                               b.const(np.asarray(np.inf, dt))])
    sigma_sq = b.op("reduce_sum", TensorType(batch + (1, n2), w.dtype),
                    x=e.binary("mul", w, w), axes=np.asarray([-2], np.int32), keep_dims=True)
    sigma = e.unary("sqrt", sigma_sq)
    unit = e.select(e.compare("greater", sigma, np.asarray(0, dt)),
                    e.binary("real_div", w, sigma), np.asarray(0, dt))
    sigma, unit, v = _sort_descending(b, sigma, unit, v)
    last = w.type.rank - 1
    sigma, unit = slice_axis(b, sigma, last, 0, cols), slice_axis(b, unit, last, 0, cols)
    v = slice_axis(b, slice_axis(b, v, last, 0, cols), last - 1, 0, cols)
    ok = e.compare("less_equal", off, np.asarray(tol, dt))
    nan = np.asarray(np.nan, dt)
    sigma = e.select(ok, reshape(b, sigma, batch + (cols,)), nan)
    unit, v = e.select(ok, unit, nan), e.select(ok, v, nan)
    if m >= n:  # a = w vᵀ: u = w/σ, vt = vᵀ
        return sigma, unit, swap_last(b, v)
    return sigma, v, swap_last(b, unit)  # aᵀ = w vᵀ: a = v σ (w/σ)ᵀ
