"""The linalg family (ir/linalg.py) decomposed into loops of matrix products and
elementwise ops (linalg_base.py: the loop, the runtime reads, the one-hot writes), the same
algorithms for every format: LAPACK's, with its NaN / not-positive-definite / singular
rules, as JAX's primitives on XLA:CPU call it.

- ``cholesky``: left-looking (Crout / Cholesky–Banachiewicz by columns):
  ``v = a[:, j] − L·L[j, :]ᵀ``, ``L[j, j] = sqrt(v[j])``, ``L[i>j, j] = v[i] / L[j, j]``;
  the result keeps ``a``'s strict upper triangle and is NaN where a pivot was <= 0 (a NaN
  pivot is not caught: it propagates, as ``potrf``).
- ``triangular_solve``: forward (lower) or backward (upper) substitution on the effective
  left-side system; ``x op(a) = b`` is solved as ``op(a)ᵀ xᵀ = bᵀ``.
- ``lu``: right-looking Gaussian elimination with partial pivoting (the first row of
  largest magnitude, as LAPACK's ``isamax``; a NaN: the first NaN, see ``first_max_row``),
  multipliers scaled by the reciprocal of the pivot unless it is
  tiny, and no scaling for a zero pivot, as ``getrf``.
QR, SVD and the tridiagonal solve: linalg_qr.py, linalg_svd.py, linalg_tri.py.
"""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl
from .linalg_base import E, iota, loop


def tri_mask(e, n: int, lower: bool, k: int):
    """numpy's tril(k) (lower) / triu(k) of an n x n matrix of ones, as a bool mask,
    computed from two iotas (an n x n bool constant would be stored element by element)."""
    cols, rows = iota(n, -1), iota(n, -2) + np.int32(k)
    return e("le" if lower else "ge", e.lift(cols), e.lift(rows))


@register_impl("decompose", "cholesky")
def _cholesky(b, node, ins):
    e, (a,) = E(b), ins
    t = a.type
    n, batch = t.shape[-1], tuple(t.shape[:-2])
    rows, cols = iota(n, -2, t.rank), iota(n, -1, t.rank)

    def step(e, j, consts, L, ok):
        (a,) = consts
        row = e.take(L, -2, j)                               # L[j, :]
        v = e("sub", e.take(a, -1, j), e.mm(L, row, transpose_y=True))
        pivot = e.take(v, -2, j)                             # v[j]
        d = e("sqrt", pivot)
        col = e.sel(e("eq", rows, j), d, e("div", v, d))
        col = e.sel(e("lt", rows, j), 0.0, col)
        L = e.sel(e("eq", cols, j), col, L)
        bad = e("le", pivot, 0.0)  # a NaN pivot is not caught, as in potrf
        return L, e("and", ok, e("not", bad))

    ok0 = e.lift(np.ones(batch + (1, 1), bool))
    L, ok = loop(b, n, [a], [e.zeros(t), ok0], step)
    out = e.sel(tri_mask(e, n, False, 1), a, L)        # a's strict upper triangle, as potrf
    return [e.sel(ok, out, np.nan)]


def substitute(b, m, rhs, lower: bool, unit: bool, diag=None):
    """Solve ``m x = rhs`` for a triangular ``m`` [..., n, n] whose other triangle and
    diagonal are zero (the diagonal is ``diag`` [..., n, 1], or ones when ``unit``)."""
    e = E(b)
    n = m.shape[-1]
    rows = iota(n, -2, m.type.rank)

    def step(e, t, consts, x):
        m, rhs = consts[:2]
        i = t if lower else e("sub", np.int32(n - 1), t)
        xi = e("sub", e.take(rhs, -2, i), e.mm(e.take(m, -2, i), x))
        if not unit:
            xi = e("div", xi, e.take(consts[2], -2, i))
        return (e.sel(e("eq", rows, i), xi, x),)

    consts = [m, rhs] + ([] if unit else [diag])
    (x,) = loop(b, n, consts, [e.zeros(rhs.type)], step)
    return x


@register_impl("decompose", "triangular_solve")
def _triangular_solve(b, node, ins):
    e, p, (a, rhs) = E(b), node.params, ins
    n = a.shape[-1]
    # The triangle a is read from, without its diagonal, and the diagonal apart.
    strict = e.sel(tri_mask(e, n, p["lower"], -1 if p["lower"] else 1), a, 0.0)
    diag = None
    if not p["unit_diagonal"]:
        on_diag = e("eq", e.lift(iota(n, -1)), e.lift(iota(n, -2)))
        diag = e.sum_keep(e.sel(on_diag, a, 0.0), -1)
    # The left-side system op'(a) x' = b' that the call amounts to.
    flip = p["transpose_a"] != (not p["left_side"])
    m = e.swap_last(strict) if flip else strict
    rhs = rhs if p["left_side"] else e.swap_last(rhs)
    x = substitute(b, m, rhs, p["lower"] != flip, p["unit_diagonal"], diag)
    return [x if p["left_side"] else e.swap_last(x)]


def first_max_row(e, mag, j, m: int):
    """The pivot row (per batch element, [..., 1, 1] int32) of ``mag`` [..., m, 1] from row
    ``j`` on: the first NaN, else the first of largest magnitude (``argmax``'s rule; the
    rows above j read as -1, below every magnitude). JAX's pivot where the column holds a
    NaN is whatever OpenBLAS's vectorised ``isamax`` kernel finds (measured: [1, NaN, 4]
    pivots at row 0, [1, 4, NaN, 5] at row 2, the NaN), not a rule to follow: the factors are NaN
    either way."""
    key = e.sel(e("lt", iota(m, -2, mag.type.rank), j), -1.0, mag)
    return e.reduce_keep("argmax", key, -2)


@register_impl("decompose", "lu")
def _lu(b, node, ins):
    e, (a,) = E(b), ins
    t = a.type
    m, n = t.shape[-2:]
    k, batch = min(m, n), tuple(t.shape[:-2])
    rows, cols, steps = (iota(d, ax, t.rank) for d, ax in ((m, -2), (n, -1), (k, -1)))
    tiny = float(np.finfo(t.dtype.np).tiny)

    def swap(e, x, j, piv, is_j, is_p):
        """x with rows j and piv (per batch element) exchanged."""
        return e.sel(is_j, e.take(x, -2, piv), e.sel(is_p, e.take(x, -2, j), x))

    def step(e, j, consts, x, perm, pivots):
        piv = first_max_row(e, e("abs", e.take(x, -1, j)), j, m)
        is_j, is_p = e("eq", rows, j), e("eq", rows, piv)
        x = swap(e, x, j, piv, is_j, is_p)
        perm = swap(e, perm, j, piv, is_j, is_p)
        pivots = e.sel(e("eq", steps, j), piv, pivots)
        urow = e.take(x, -2, j)
        pivot = e.take(urow, -1, j)
        col = e.take(x, -1, j)
        scaled = e.sel(e("ge", e("abs", pivot), tiny), e("mul", col, e("div", 1.0, pivot)),
                       e("div", col, pivot))
        scaled = e.sel(e("eq", pivot, 0.0), col, scaled)
        below = e("gt", rows, j)
        low = e.sel(below, scaled, 0.0)
        up = e.sel(e("gt", cols, j), urow, 0.0)
        x = e("sub", x, e("mul", low, up))
        return e.sel(e("and", e("eq", cols, j), below), low, x), perm, pivots

    perm0 = e.lift(np.broadcast_to(rows, batch + (m, 1)).copy())
    piv0 = e.lift(np.zeros(batch + (1, k), np.int32))
    x, perm, pivots = loop(b, k, [], [a, perm0, piv0], step)
    return [x, b.reshape(pivots, batch + (k,)), b.reshape(perm, batch + (m,))]
