"""``svd`` (ir/linalg.py) -> Core AI: the Core ML lowering's one-sided Jacobi
(coreml/rules/linalg_svd.py; Hestenes, LAPACK ``gesvj``'s method) with the same schedule
(ir/linalg.py ``round_robin``, ``MAX_SWEEPS``), tolerance and NaN rule, as nested Core AI
``while``s.

The columns of ``w = a`` (``aᵀ`` when m < n: w is tall; an odd count gets a zero column)
are rotated pairwise by the Jacobi rotation that zeroes ``w_p·w_q`` wherever
``|w_p·w_q| > tol·‖w_p‖‖w_q‖`` (``tol = sqrt(rows)·eps``), the same rotations
accumulating in ``v``; a round rotates n/2 disjoint pairs at once. Where the Core ML rule gathers a
round's columns (``gather`` at the round's row of the table), this one multiplies by the
round's 0/1 permutation matrix (read by ops_linalg.py's one-hot ``take``): each result is
one product by 1 plus exact zeros, so finite values move exactly (Core AI's
``gather_along_axis`` at runtime indices misbehaved in loops, ops_linalg.py). Sweeps
repeat until one finds every pair orthogonal, at most 30 (then NaN, as JAX gives NaN
where LAPACK fails); σ are the column norms, ``u = w / σ``, sorted by decreasing σ (ties
by index) with one-hot permutation products too.
"""
from __future__ import annotations

import numpy as np

from ..ir.linalg import MAX_SWEEPS, round_robin
from . import ca_private
from .ops_base import rule
from .ops_linalg import F32, I32, _check, as3, c, ids, loop, nan_where_not, sel, swap_last, \
    take, widen


def _onehot(table: np.ndarray) -> np.ndarray:
    """[R, n] index rows -> [R, n, n] float 0/1: P[r, table[r, i], i] = 1 (x @ P[r] is
    x[..., table[r]])."""
    R, n = table.shape
    P = np.zeros((R, n, n), np.float32)
    for r in range(R):
        P[r, table[r], np.arange(n)] = 1.0
    return P


def _round(ctx, w, v, off, P, Pinv, tol):
    """One round: rotate the n/2 disjoint column pairs of w (and v)."""
    B, rows, n2 = ctx.shape(w)
    h = n2 // 2
    one, zero = c(ctx, 1.0), c(ctx, 0.0)
    P, Pinv = (widen(ctx, x, (B, n2, n2), F32) for x in (P, Pinv))
    gw, gv = ctx.matmul(w, P), ctx.matmul(v, P)
    half = lambda x, lo, hi: ctx.slice(x, [0, 0, lo], [B, ctx.shape(x)[1], hi])  # noqa: E731
    wp, wq, vp, vq = half(gw, 0, h), half(gw, h, n2), half(gv, 0, h), half(gv, h, n2)
    colsum = lambda x: ctx.reduce("sum", x, [1])  # noqa: E731
    alpha, beta, gamma = colsum(ctx.mul(wp, wp)), colsum(ctx.mul(wq, wq)), \
        colsum(ctx.mul(wp, wq))
    scale = ctx.mul(ctx.ca.sqrt(alpha), ctx.ca.sqrt(beta))
    ratio = sel(ctx, ctx.gt(scale, zero), ctx.div(ctx.ca.abs_(gamma), scale), zero)
    rotate = ctx.gt(ratio, c(ctx, tol))
    zeta = ctx.div(ctx.sub(beta, alpha), ctx.mul(gamma, c(ctx, 2.0)))
    abs_zeta = ctx.ca.abs_(zeta)
    root = ctx.ca.sqrt(ctx.add(one, ctx.mul(zeta, zeta)))
    t = ctx.div(one, ctx.add(abs_zeta, root))  # sign(ζ)·t below
    t = sel(ctx, ctx.lt(zeta, zero), ctx.neg(t, F32), t)
    t = sel(ctx, ctx.gt(abs_zeta, c(ctx, 1e15)), ctx.div(c(ctx, 0.5), zeta), t)  # ζ² overflows
    cs = ctx.div(one, ctx.ca.sqrt(ctx.add(one, ctx.mul(t, t))))
    sn = ctx.mul(cs, t)
    cs, sn = sel(ctx, rotate, cs, one), sel(ctx, rotate, sn, zero)

    def turn(p, q, inv):
        p2 = ctx.sub(ctx.mul(cs, p), ctx.mul(sn, q))
        q2 = ctx.add(ctx.mul(sn, p), ctx.mul(cs, q))
        return ctx.matmul(ctx.ca.concat(ctx.const(np.int32(2)), [p2, q2]), inv)

    worst = ctx.reduce("max", ratio, [0, 1, 2])
    return turn(wp, wq, Pinv), turn(vp, vq, Pinv), ctx.ca.broadcasting_maximum(off, worst)


def _sort_descending(ctx, sigma, w, v):
    """σ [B, 1, n] and the columns of w, v in order of decreasing σ (ties by index)."""
    B, _, n = ctx.shape(sigma)
    col = ctx.reshape(sigma, (B, n, 1))
    before = ctx.or_(ctx.gt(col, sigma), ctx.and_(ctx.eq(col, sigma),
                                                  ctx.lt(ids(ctx, n, 1), ids(ctx, n, 2))))
    rank = ctx.reduce("sum", ctx.cast(before, I32), [1])              # [B, 1, n]: of entry i
    hit = ctx.eq(ctx.reshape(rank, (B, n, 1)), ids(ctx, n, 2))        # [i, j]: i goes to j
    perm = ctx.cast(hit, F32)
    return ctx.matmul(sigma, perm), ctx.matmul(w, perm), ctx.matmul(v, perm)


@rule("svd")
def _svd(ctx, node, ins):
    _check(node)
    t = node.inputs[0].type
    m, n = t.shape[-2:]
    a = as3(ctx, ins[0], t.shape)
    B = ctx.shape(a)[0]
    w = a if m >= n else swap_last(ctx, a)
    rows, cols = max(m, n), min(m, n)
    n2 = cols + cols % 2
    if n2 != cols:  # an odd column count gets a zero column: it never rotates
        w = ctx.ca.concat(ctx.const(np.int32(2)),
                         [w, ctx.const(np.zeros((B, rows, 1), np.float32))])
    tol = float(np.sqrt(rows) * np.finfo(np.float32).eps)
    table = round_robin(n2)
    P = ctx.const(_onehot(table))
    Pinv = ctx.const(_onehot(np.argsort(table, axis=1).astype(np.int32)))
    R = table.shape[0]
    v0 = ctx.const(np.ascontiguousarray(np.broadcast_to(np.eye(n2, dtype=np.float32),
                                                        (B, n2, n2))))

    def round_(r, w, v, off):
        pick = lambda T: ctx.reshape(take(ctx, T, (R, n2, n2), 0, r), (1, n2, n2))  # noqa
        return _round(ctx, w, v, off, pick(P), pick(Pinv), tol)

    def cond(state):
        return ctx.and_(ctx.lt(state[0], ctx.scalar(MAX_SWEEPS, I32)),
                        ctx.reshape(ctx.gt(state[3], c(ctx, tol)), ()))

    def sweep(state):
        w1, v1, off = loop(ctx, n2 - 1, [state[1], state[2],
                                         ctx.const(np.zeros((1, 1, 1), np.float32))], round_)
        return [ctx.add(state[0], ctx.scalar(1, I32)), w1, v1, off]

    inf = ctx.const(np.full((1, 1, 1), np.inf, np.float32))
    _, w, v, off = ca_private.while_loop([ctx.const(np.int32(0)), w, v0, inf], cond, sweep)
    sigma = ctx.ca.sqrt(ctx.reduce("sum", ctx.mul(w, w), [1]))          # [B, 1, n2]
    unit = sel(ctx, ctx.gt(sigma, c(ctx, 0.0)), ctx.div(w, sigma), c(ctx, 0.0))
    sigma, unit, v = _sort_descending(ctx, sigma, unit, v)
    sigma = ctx.slice(sigma, [0, 0, 0], [B, 1, cols])
    unit = ctx.slice(unit, [0, 0, 0], [B, rows, cols])
    v = ctx.slice(v, [0, 0, 0], [B, cols, cols])
    ok = ctx.ne(ctx.gt(off, c(ctx, tol)), ctx.const(True))
    s_t, u_t, vt_t = (o.type for o in node.outputs)
    sigma = ctx.reshape(nan_where_not(ctx, ok, sigma), s_t.shape)
    unit, v = nan_where_not(ctx, ok, unit), nan_where_not(ctx, ok, v)
    if m >= n:  # a = w vᵀ: u = w/σ, vt = vᵀ
        return [sigma, ctx.reshape(unit, u_t.shape), ctx.reshape(swap_last(ctx, v), vt_t.shape)]
    return [sigma, ctx.reshape(v, u_t.shape), ctx.reshape(swap_last(ctx, unit), vt_t.shape)]

