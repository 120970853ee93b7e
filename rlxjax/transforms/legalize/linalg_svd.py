"""``svd`` (ir/linalg.py) decomposed: one-sided Jacobi (Hestenes; LAPACK ``gesvj``'s
method), nested loops of linalg_base.py.

The columns of ``w = a`` (of ``aᵀ`` when m < n, so that w is tall; an odd count gets a
zero column, which never rotates) are rotated pairwise until every pair is orthogonal to
working precision: a pair (p, q) with ``|w_p·w_q| > tol·‖w_p‖‖w_q‖`` (``tol =
sqrt(rows)·eps``, gesvj's) is rotated by the Jacobi rotation that zeroes ``w_p·w_q``, and
the same rotation accumulates in ``v``. A sweep visits every pair once, in the round-robin
order of ir/linalg.py (``round_robin``) that makes each round ``n/2`` disjoint pairs: one
vectorised step, the round's columns picked by a product with its 0/1 permutation matrix
(one product by 1 plus exact zeros: a finite value moves exactly), rotated, and put back
by the inverse permutation. Sweeps repeat until one finds every pair orthogonal, at most
``MAX_SWEEPS`` (then NaN, as JAX gives NaN where LAPACK fails); the singular values are the
column norms (high relative accuracy), ``u = w / σ``, sorted by decreasing σ (ties by
index) with permutation products too.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType
from ...ir.linalg import MAX_SWEEPS, round_robin
from ...ir.ops import register_impl
from .linalg_base import E, iota, loop


def _onehot(table: np.ndarray, dt) -> np.ndarray:
    """[R, n] index rows -> [R, n, n] 0/1: P[r, table[r, i], i] = 1 (x @ P[r] is
    x[..., table[r]])."""
    R, n = table.shape
    P = np.zeros((R, n, n), dt)
    for r in range(R):
        P[r, table[r], np.arange(n)] = 1
    return P


def _last(b, x, lo: int, hi: int):
    r = x.type.rank
    return b.add("slice", x, start=(0,) * (r - 1) + (lo,), limit=tuple(x.shape[:-1]) + (hi,),
                 strides=(1,) * r)


def _round(e, w, v, off, P, Pinv, tol: float):
    """One round: rotate the n/2 disjoint column pairs ``P`` picks of w (and v)."""
    n2 = w.shape[-1]
    h = n2 // 2
    gw, gv = e.mm(w, P), e.mm(v, P)
    wp, wq, vp, vq = (_last(e.b, x, lo, hi) for x, lo, hi in
                      ((gw, 0, h), (gw, h, n2), (gv, 0, h), (gv, h, n2)))
    alpha, beta, gamma = (e.sum_keep(e("mul", x, y), -2) for x, y in
                          ((wp, wp), (wq, wq), (wp, wq)))
    scale = e("mul", e("sqrt", alpha), e("sqrt", beta))
    ratio = e.sel(e("gt", scale, 0.0), e("div", e("abs", gamma), scale), 0.0)
    rotate = e("gt", ratio, tol)
    zeta = e("div", e("sub", beta, alpha), e("mul", gamma, 2.0))
    abs_zeta = e("abs", zeta)
    root = e("sqrt", e("add", e("mul", zeta, zeta), 1.0))
    t = e("div", 1.0, e("add", abs_zeta, root))  # sign(ζ)·t below
    t = e.sel(e("lt", zeta, 0.0), e("mul", t, -1.0), t)
    t = e.sel(e("gt", abs_zeta, 1e15), e("div", 0.5, zeta), t)  # ζ² would overflow
    c = e("div", 1.0, e("sqrt", e("add", e("mul", t, t), 1.0)))
    s = e("mul", c, t)
    c, s = e.sel(rotate, c, 1.0), e.sel(rotate, s, 0.0)

    def turn(p, q):
        p2 = e("sub", e("mul", c, p), e("mul", s, q))
        q2 = e("add", e("mul", s, p), e("mul", c, q))
        return e.mm(e.b.add("concatenate", p2, q2, axis=p.type.rank - 1), Pinv)

    return turn(wp, wq), turn(vp, vq), e("max", off, ratio)  # off: per pair, this sweep


def _sort_descending(e, sigma, w, v):
    """σ [..., 1, n] and the columns of w, v in order of decreasing σ (ties by index)."""
    n = sigma.shape[-1]
    batch = tuple(sigma.shape[:-2])
    col = e.b.reshape(sigma, batch + (n, 1))
    ids_r, ids_c = iota(n, -1), iota(n, -2)
    # entry i (a row of ``before``) comes before entry j (a column)
    before = e("or", e("gt", col, sigma), e("and", e("eq", col, sigma), e("lt", ids_c, ids_r)))
    rank = e.sum_keep(e.b.add("convert", before, dtype=DType.i32), -2)   # of entry j
    hit = e("eq", rank, ids_c)                            # [p, i]: entry i goes to place p
    perm = e.b.add("convert", hit, dtype=sigma.type.dtype)
    return (e.mm(sigma, perm, transpose_y=True), e.mm(w, perm, transpose_y=True),
            e.mm(v, perm, transpose_y=True))


@register_impl("decompose", "svd")
def _svd(b, node, ins):
    e, (a,) = E(b), ins
    m, n = a.shape[-2:]
    batch, dt = tuple(a.shape[:-2]), a.type.dtype.np
    w = a if m >= n else e.swap_last(a)
    rows, cols = max(m, n), min(m, n)
    n2 = cols + cols % 2
    if n2 != cols:  # an odd column count gets a zero column: it never rotates
        w = b.add("concatenate", w, e.lift(np.zeros(batch + (rows, 1), dt)),
                  axis=w.type.rank - 1)
    tol = float(np.sqrt(rows) * np.finfo(dt).eps)
    table = round_robin(n2)
    P = e.lift(_onehot(table, dt))
    Pinv = e.lift(_onehot(np.argsort(table, axis=1).astype(np.int32), dt))
    v0 = e.lift(np.ascontiguousarray(np.broadcast_to(np.eye(n2, dtype=dt), batch + (n2, n2))))

    def round_(e, r, consts, w, v, off):
        pick = lambda T: e.b.reshape(e.take(T, -3, r), (n2, n2))  # noqa: E731
        return _round(e, w, v, off, pick(consts[0]), pick(consts[1]), tol)

    def sweep(e, s, consts, w, v, off):
        # the largest ratio of the sweep, reduced once a sweep, not once a round
        off0 = e.lift(np.zeros(batch + (1, n2 // 2), dt))
        w, v, off = loop(e.b, n2 - 1, consts, [w, v, off0], round_)
        return w, v, e.b.add("reduce_max", off, axes=tuple(range(off.type.rank)))

    # sweeps while the last one rotated a pair, at most MAX_SWEEPS
    w, v, off = loop(b, MAX_SWEEPS, [P, Pinv], [w, v0, e.lift(np.asarray(np.inf, dt))], sweep,
                     cond=lambda e, carry: e("gt", carry[2], tol))
    sigma = e("sqrt", e.sum_keep(e("mul", w, w), -2))
    unit = e.sel(e("gt", sigma, 0.0), e("div", w, sigma), 0.0)
    sigma, unit, v = _sort_descending(e, sigma, unit, v)
    sigma, unit = _last(b, sigma, 0, cols), _last(b, unit, 0, cols)
    v = b.add("slice", v, start=(0,) * v.type.rank, limit=batch + (cols, cols),
              strides=(1,) * v.type.rank)
    ok = e("le", off, tol)
    sigma = e.sel(ok, b.reshape(sigma, batch + (cols,)), np.nan)
    unit, v = e.sel(ok, unit, np.nan), e.sel(ok, v, np.nan)
    if m >= n:  # a = w vᵀ: u = w/σ, vt = vᵀ
        return [sigma, unit, e.swap_last(v)]
    return [sigma, v, e.swap_last(unit)]  # aᵀ = w vᵀ: a = v σ (w/σ)ᵀ
