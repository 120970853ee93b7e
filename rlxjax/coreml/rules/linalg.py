"""Lowering: the linalg family (ir/linalg.py), each a MIL ``while_loop`` over the columns
(or rows) of the matrix, so the program has the same few ops whatever the size.

Every step is vectorised over the rows, the batch and the right-hand sides: step ``j``
reads row / column ``j`` with ``slice_by_size`` at a runtime offset, and writes its result
with a ``select`` on ``iota == j`` (exact: no arithmetic touches the other entries, and a
NaN or inf elsewhere cannot leak through a multiplication by a one-hot zero). Entries not
yet computed are zero, so a full matrix product over them sums exactly the terms of the
textbook loop (the others are exact zeros). A step costs O(n·k) (a matrix-vector product),
the whole factorization O(n³) as in LAPACK.

- ``cholesky``: left-looking (Crout / Cholesky–Banachiewicz by columns):
  ``v = a[:, j] − L·L[j, :]ᵀ``, ``L[j, j] = sqrt(v[j])``, ``L[i>j, j] = v[i] / L[j, j]``;
  the result keeps ``a``'s strict upper triangle and is NaN where a pivot was <= 0.
- ``triangular_solve``: forward (lower) or backward (upper) substitution on the effective
  left-side system; ``x op(a) = b`` is solved as ``op(a)ᵀ xᵀ = bᵀ``.
- ``lu``: right-looking Gaussian elimination with partial pivoting (the first row of
  largest magnitude, as LAPACK's ``isamax``), multipliers scaled by the reciprocal of the
  pivot and no scaling for a zero pivot, as ``getrf``.
"""
from __future__ import annotations

import numpy as np

from ...ir import DType, TensorType
from ..registry import lowering
from .common import Ew, reshape, transpose

I32 = TensorType((), DType.i32)
BOOL = TensorType((), DType.bool)


def _iota(n: int, axis: int) -> np.ndarray:
    """0..n-1 as an int32 column (axis -2: shape (n, 1)) or row (axis -1: (1, n))."""
    return np.arange(n, dtype=np.int32).reshape((n, 1) if axis == -2 else (1, n))


def _tri_mask(b, n: int, lower: bool, k: int):
    """numpy's tril(k) (lower) / triu(k) of an n x n matrix of ones, as a bool mask,
    computed from two iotas (an n x n bool constant would be stored element by element)."""
    t, cols, rows = TensorType((n, n), DType.bool), _iota(n, -1), _iota(n, -2) + np.int32(k)
    if lower:
        return b.op("less_equal", t, x=cols, y=rows)
    return b.op("greater_equal", t, x=cols, y=rows)


def take_at(b, x, axis: int, i, size: int = 1):
    """``x`` sliced to ``size`` entries from runtime index ``i`` (a scalar i32 var) along
    ``axis`` (negative), all of every other axis."""
    rank = x.type.rank
    unit = np.zeros(rank, np.int32)
    unit[axis] = 1
    begin = b.op("mul", TensorType((rank,), DType.i32), x=unit, y=i)
    shape = list(x.shape)
    shape[axis] = size
    return b.op("slice_by_size", x.type.with_shape(tuple(shape)), x=x, begin=begin,
                size=np.asarray(shape, np.int32))


def swap_last(b, x):
    r = x.type.rank
    return transpose(b, x, tuple(range(r - 2)) + (r - 1, r - 2))


def _matmul(b, x, y, transpose_y=False):
    shape = tuple(x.shape[:-1]) + ((y.shape[-2],) if transpose_y else (y.shape[-1],))
    return b.op("matmul", TensorType(shape, x.dtype), x=x, y=y, transpose_x=False,
                transpose_y=transpose_y)


def column_loop(b, n: int, init, body):
    """``for j in range(n): carry = body(j, *carry)`` as a MIL while_loop; -> final carry."""
    types = [I32] + [v.type for v in init]
    state = b.begin_block(types)
    cond_blk = b.end_block([b.op("less", BOOL, x=state[0], y=np.int32(n))])
    state = b.begin_block(types)
    nxt = list(body(state[0], *state[1:]))
    nxt = [b.op("add", I32, x=state[0], y=np.int32(1))] + nxt
    body_blk = b.end_block(nxt)
    out = b.op_with_blocks("while_loop", types, [cond_blk, body_blk],
                           loop_vars=[b.const(np.int32(0))] + list(init))
    return out[1:]


@lowering("cholesky")
def _cholesky(ctx, node, a):
    b, e = ctx.b, Ew(ctx.b)
    t = ctx.out_type(node)
    n, batch = t.shape[-1], tuple(t.shape[:-2])
    col_ids, row_ids = _iota(n, -2), _iota(n, -1)
    zero = np.asarray(0, t.dtype.np)

    def step(j, L, ok):
        row = take_at(b, L, -2, j)                        # L[j, :]
        v = e.binary("sub", take_at(b, a, -1, j), _matmul(b, L, row, transpose_y=True))
        pivot = take_at(b, v, -2, j)                      # v[j]
        d = e.unary("sqrt", pivot)
        col = e.select(e.compare("equal", col_ids, j), d, e.binary("real_div", v, d))
        col = e.select(e.compare("greater_equal", col_ids, j), col, zero)
        L = e.select(e.compare("equal", row_ids, j), col, L)
        bad = e.compare("less_equal", pivot, zero)  # a NaN pivot is not caught, as in potrf
        return L, e.binary("logical_and", ok, b.op("logical_not", bad.type, x=bad), DType.bool)

    ok0 = b.const(np.ones(batch + (1, 1), bool))
    L, ok = column_loop(b, n, [b.full(t, 0), ok0], step)
    out = e.select(_tri_mask(b, n, False, 1), a, L)      # a's strict upper triangle, as potrf
    return e.select(ok, out, np.asarray(np.nan, t.dtype.np))


def substitute(b, m, rhs, lower: bool, unit: bool, diag=None):
    """Solve ``m x = rhs`` for a triangular ``m`` [..., n, n] whose other triangle and
    diagonal are zero (the diagonal is ``diag`` [..., n, 1], or ones when ``unit``)."""
    e = Ew(b)
    n = m.shape[-1]
    row_ids = _iota(n, -2)

    def step(t, x):
        i = t if lower else b.op("sub", I32, x=np.int32(n - 1), y=t)
        xi = e.binary("sub", take_at(b, rhs, -2, i), _matmul(b, take_at(b, m, -2, i), x))
        if not unit:
            xi = e.binary("real_div", xi, take_at(b, diag, -2, i))
        return (e.select(e.compare("equal", row_ids, i), xi, x),)

    (x,) = column_loop(b, n, [b.full(rhs.type, 0)], step)
    return x


@lowering("triangular_solve")
def _triangular_solve(ctx, node, a, rhs):
    b, e, p = ctx.b, Ew(ctx.b), node.params
    n = a.shape[-1]
    zero = np.asarray(0, a.dtype.np)
    # The triangle a is read from, without its diagonal, and the diagonal apart.
    strict = e.select(_tri_mask(b, n, p["lower"], -1 if p["lower"] else 1), a, zero)
    diag = None
    if not p["unit_diagonal"]:
        on_diag = e.select(_tri_mask(b, n, True, 0), e.select(_tri_mask(b, n, False, 0), a,
                                                                zero), zero)
        shape = tuple(a.shape[:-1]) + (1,)
        diag = b.op("reduce_sum", TensorType(shape, a.dtype), x=on_diag,
                    axes=np.asarray([-1], np.int32), keep_dims=True)
    # The left-side system op'(a) x' = b' that the call amounts to.
    flip = p["transpose_a"] != (not p["left_side"])
    m = swap_last(b, strict) if flip else strict
    rhs = rhs if p["left_side"] else swap_last(b, rhs)
    x = substitute(b, m, rhs, p["lower"] != flip, p["unit_diagonal"], diag)
    return x if p["left_side"] else swap_last(b, x)


@lowering("lu")
def _lu(ctx, node, a):
    b, e = ctx.b, Ew(ctx.b)
    t = ctx.out_type(node)
    m, n = t.shape[-2:]
    k, batch = min(m, n), tuple(t.shape[:-2])
    col_ids, row_ids, step_ids = _iota(m, -2), _iota(n, -1), _iota(k, -1)
    dt = t.dtype.np
    one, zero = np.asarray(1, dt), np.asarray(0, dt)
    tiny = np.asarray(np.finfo(dt).tiny, dt)
    i32 = TensorType(batch + (1, 1), DType.i32)

    def swap(x, j, piv, is_j, is_p):
        """x with rows j and piv (per batch element) exchanged."""
        at_j = take_at(b, x, -2, j)
        idx = piv
        if x.shape[-1] != 1:
            reps = np.asarray((1,) * (len(batch) + 1) + (x.shape[-1],), np.int32)
            idx = b.op("tile", TensorType(batch + (1, x.shape[-1]), DType.i32), x=piv,
                       reps=reps)
        at_p = b.op("gather_along_axis", at_j.type, x=x, indices=idx,
                    axis=np.int32(x.type.rank - 2))
        return e.select(is_j, at_p, e.select(is_p, at_j, x))

    def step(j, x, perm, pivots):
        below_j = e.compare("greater_equal", col_ids, j)
        mag = e.select(below_j, e.unary("abs", take_at(b, x, -1, j)), np.asarray(-1, dt))
        piv = b.op("reduce_argmax", i32, x=mag, axis=np.int32(-2), keep_dims=True)
        is_j, is_p = e.compare("equal", col_ids, j), e.compare("equal", col_ids, piv)
        x = swap(x, j, piv, is_j, is_p)
        perm = swap(perm, j, piv, is_j, is_p)
        pivots = e.select(e.compare("equal", step_ids, j), piv, pivots)
        urow = take_at(b, x, -2, j)
        pivot = take_at(b, urow, -1, j)
        col = take_at(b, x, -1, j)
        scaled = e.select(e.compare("greater_equal", e.unary("abs", pivot), tiny),
                          e.binary("mul", col, e.binary("real_div", one, pivot)),
                          e.binary("real_div", col, pivot))
        scaled = e.select(e.compare("equal", pivot, zero), col, scaled)
        below = e.compare("greater", col_ids, j)
        l = e.select(below, scaled, zero)
        u = e.select(e.compare("greater", row_ids, j), urow, zero)
        x = e.binary("sub", x, e.binary("mul", l, u))
        in_col = e.binary("logical_and", e.compare("equal", row_ids, j), below, DType.bool)
        return e.select(in_col, l, x), perm, pivots

    perm0 = b.const(np.broadcast_to(col_ids, batch + (m, 1)).copy())
    piv0 = b.const(np.zeros(batch + (1, k), np.int32))
    x, perm, pivots = column_loop(b, k, [a, perm0, piv0], step)
    return x, reshape(b, pivots, batch + (k,)), reshape(b, perm, batch + (m,))


@lowering("tridiagonal_solve")
def _tridiagonal_solve(ctx, node, dl, d, du, rhs):
    """LAPACK ``gtsv``: elimination down the sub-diagonal, exchanging rows i and i+1
    where |A[i+1, i]| > |A[i, i]| (the factor U then has two super-diagonals), then back
    substitution. Row i is final after step i; the loop carries row i+1 as updated."""
    b, e = ctx.b, Ew(ctx.b)
    t = ctx.out_type(node)
    n, batch = t.shape[-2], tuple(t.shape[:-2])
    dt = t.dtype.np
    zero = np.asarray(0, dt)
    row_ids = _iota(n, -2)
    col = TensorType(batch + (n, 1), t.dtype)
    dl, d, du = (reshape(b, v, col.shape) for v in (dl, d, du))
    du = e.select(e.compare("less", row_ids, np.int32(n - 1)), du, zero)  # du[n-1] unused

    def put(x, i, v):
        return e.select(e.compare("equal", row_ids, i), v, x)

    def eliminate(i, cur_d, cur_du, cur_b, u0, u1, u2, y, ok):
        nxt = b.op("add", I32, x=i, y=np.int32(1))
        low, d_n, du_n, b_n = (take_at(b, v, -2, nxt) for v in (dl, d, du, rhs))
        keep = e.compare("greater_equal", e.unary("abs", cur_d), e.unary("abs", low))
        fact = e.select(keep, e.binary("real_div", low, cur_d),
                        e.binary("real_div", cur_d, low))
        # row i as final, and row i+1 as updated, without (keep) or with the exchange
        u0 = put(u0, i, e.select(keep, cur_d, low))
        u1 = put(u1, i, e.select(keep, cur_du, d_n))
        u2 = put(u2, i, e.select(keep, zero, du_n))
        y = put(y, i, e.select(keep, cur_b, b_n))
        new_d = e.select(keep, e.binary("sub", d_n, e.binary("mul", fact, cur_du)),
                         e.binary("sub", cur_du, e.binary("mul", fact, d_n)))
        neg_fact = e.binary("mul", fact, np.asarray(-1, dt))
        new_du = e.select(keep, du_n, e.binary("mul", neg_fact, du_n))
        new_b = e.select(keep, e.binary("sub", b_n, e.binary("mul", fact, cur_b)),
                         e.binary("sub", cur_b, e.binary("mul", fact, b_n)))
        singular = e.binary("logical_and", keep, e.compare("equal", cur_d, zero), DType.bool)
        ok = e.binary("logical_and", ok, b.op("logical_not", singular.type, x=singular),
                      DType.bool)
        return new_d, new_du, new_b, u0, u1, u2, y, ok

    i0 = b.const(np.int32(0))
    first = [take_at(b, d, -2, i0), take_at(b, du, -2, i0), take_at(b, rhs, -2, i0)]
    zeros_col, zeros_y = b.full(col, 0), b.full(t, 0)
    ok0 = b.const(np.ones(batch + (1, 1), bool))
    init = first + [zeros_col, zeros_col, zeros_col, zeros_y, ok0]
    state = column_loop(b, n - 1, init, eliminate) if n > 1 else init
    cur_d, _, cur_b, u0, u1, u2, y, ok = state
    last = b.const(np.int32(n - 1))
    u0, y = put(u0, last, cur_d), put(y, last, cur_b)
    ok = e.binary("logical_and", ok, e.compare("not_equal", cur_d, zero), DType.bool)

    def back(s, x, x1, x2):
        i = b.op("sub", I32, x=np.int32(n - 1), y=s)
        r = e.binary("sub", take_at(b, y, -2, i), e.binary("mul", take_at(b, u1, -2, i), x1))
        r = e.binary("sub", r, e.binary("mul", take_at(b, u2, -2, i), x2))
        xi = e.binary("real_div", r, take_at(b, u0, -2, i))
        return put(x, i, xi), xi, x1

    zero_row = b.full(cur_b.type, 0)
    x, _, _ = column_loop(b, n, [zeros_y, zero_row, zero_row], back)
    return e.select(ok, x, np.asarray(np.nan, dt))


def _reflector(b, x, j, m):
    """The unit-leading Householder vector of column ``x`` [..., m, 1] at row ``j``
    (LAPACK ``larfg``) -> (v with v[j] = 1 and zeros above, tau, the new x[j])."""
    e = Ew(b)
    dt = x.dtype.np
    zero = np.asarray(0, dt)
    rows = _iota(m, -2)
    at, below = e.compare("equal", rows, j), e.compare("greater", rows, j)
    tail = e.select(below, x, zero)
    alpha = take_at(b, x, -2, j)
    shape = alpha.type
    ss = b.op("reduce_sum", shape, x=e.binary("mul", tail, tail),
              axes=np.asarray([-2], np.int32), keep_dims=True)
    norm = e.unary("sqrt", e.binary("add", e.binary("mul", alpha, alpha), ss))
    beta = e.select(e.compare("less", alpha, zero), norm, e.binary("mul", norm,
                                                                  np.asarray(-1, dt)))
    plain = e.compare("equal", ss, zero)  # nothing below the diagonal: H = I, tau = 0
    tau = e.select(plain, zero, e.binary("real_div", e.binary("sub", beta, alpha), beta))
    scale = e.binary("real_div", np.asarray(1, dt), e.binary("sub", alpha, beta))
    v = e.select(at, np.asarray(1, dt), e.select(plain, zero, e.binary("mul", tail, scale)))
    return v, tau, e.select(plain, alpha, beta)


def _apply_reflector(b, v, tau, x, cols=None):
    """(I − tau v vᵀ) x as LAPACK ``larf``: w = xᵀv, x − v·(tau·w); only columns where
    ``cols`` holds (a [1, n] mask) when given."""
    e = Ew(b)
    w = b.op("matmul", TensorType(tuple(x.shape[:-2]) + (1, x.shape[-1]), x.dtype), x=v, y=x,
             transpose_x=True, transpose_y=False)
    out = e.binary("sub", x, e.binary("mul", v, e.binary("mul", tau, w)))
    return out if cols is None else e.select(cols, out, x)


@lowering("qr")
def _qr(ctx, node, a):
    b, e = ctx.b, Ew(ctx.b)
    t = ctx.out_type(node, 1)
    m, n = a.shape[-2:]
    k, batch = min(m, n), tuple(a.shape[:-2])
    rows, cols, steps = _iota(m, -2), _iota(n, -1), _iota(k, -1)
    dt = a.dtype.np
    zero = np.asarray(0, dt)

    def factor(j, x, taus):
        v, tau, diag = _reflector(b, take_at(b, x, -1, j), j, m)
        x = _apply_reflector(b, v, tau, x, e.compare("greater", cols, j))
        col = e.select(e.compare("equal", rows, j), diag, v)  # v below the diagonal
        x = e.select(e.compare("equal", cols, j), e.select(e.compare("less", rows, j),
                                                           take_at(b, x, -1, j), col), x)
        return x, e.select(e.compare("equal", steps, j), tau, taus)

    taus0 = b.full(TensorType(batch + (1, k), a.dtype), 0)
    x, taus = column_loop(b, k, [a, taus0], factor)
    q_cols = ctx.out_type(node, 0).shape[-1]

    def accumulate(s, q):  # Q = H_0 ... H_{k-1} I, applied from the last reflector on
        i = b.op("sub", I32, x=np.int32(k - 1), y=s)
        col = take_at(b, x, -1, i)
        v = e.select(e.compare("equal", rows, i), np.asarray(1, dt),
                     e.select(e.compare("greater", rows, i), col, zero))
        return (_apply_reflector(b, v, take_at(b, taus, -1, i), q),)

    eye = np.broadcast_to(np.eye(m, q_cols, dtype=dt), batch + (m, q_cols))
    (q,) = column_loop(b, k, [b.const(np.ascontiguousarray(eye))], accumulate)
    upper = b.op("greater_equal", TensorType((m, n), DType.bool), x=cols, y=rows)
    r = e.select(upper, x, zero)
    if t.shape[-2] != m:
        r = b.op("slice_by_index", t, x=r, begin=np.zeros(len(t.shape), np.int32),
                 end=np.asarray(t.shape, np.int32), stride=np.ones(len(t.shape), np.int32))
    return q, r
