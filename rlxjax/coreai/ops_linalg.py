"""The linalg family (ir/linalg.py) -> Core AI: the Core ML lowering's algorithms
(coreml/rules/linalg.py: same steps, same NaN / not-positive-definite / singular rules),
each a Core AI ``while`` over the columns (or rows), so a program has the same few ops
whatever the size.

Every matrix is worked on as ``[B, m, n]`` (the leading dims flattened into one batch dim,
reshaped back at the end). Step ``j`` reads row / column ``j`` with ``gather_along_axis``
at the runtime index (exact; Core AI's ``slice`` with runtime starts has a dynamic type)
and writes its result with a ``where`` on ``iota == j``; entries not computed yet are zero,
so a matrix product over them sums exactly the textbook loop's terms.

- ``cholesky``: left-looking by columns, ``v = a[:, j] − L·L[j, :]ᵀ``, ``L[j, j] =
  sqrt(v[j])``, ``L[i>j, j] = v[i] / L[j, j]``; ``a``'s strict upper triangle kept, NaN
  for a batch element with a pivot <= 0 (a NaN pivot propagates, as ``potrf``);
- ``triangular_solve``: forward / backward substitution of the left-side system;
- ``lu``: right-looking elimination with partial pivoting (the first row of largest
  magnitude, NaN never larger), multipliers by the reciprocal of the pivot unless it is
  tiny, a zero pivot not scaled, as ``getrf``;
- ``tridiagonal_solve``: ``gtsv`` (row exchange where the sub-diagonal entry is larger),
  NaN for a singular batch element.
QR and SVD: ops_linalg_qr.py.
"""
from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType
from . import ca_private
from .ops_base import rule

F32, I32 = DType.f32, DType.i32


# -- shared helpers (ops_linalg_qr.py uses them too) -----------------------------------------
def as3(ctx, x, shape):
    """``x`` of RLX ``shape`` [..., m, n] as [B, m, n]."""
    b = int(np.prod(shape[:-2], dtype=np.int64))
    return ctx.reshape(x, (b,) + tuple(shape[-2:]))


def take(ctx, x, shape, axis: int, j, dtype=F32):
    """Entry ``j`` (rank-0 or [B, 1, 1] int32, runtime) of the rank-3 ``x`` along
    ``axis``, dims kept: the one-hot ``where`` of that entry, the rest -0.0 (int: 0),
    summed along ``axis`` (exact: v + -0.0 is v, signed zeros and NaN included; a NaN
    elsewhere is not read). Core AI's runtime read garbage indices (and hung) on a
    ``gather_along_axis`` at an index computed from a loop's counter (measured)."""
    hit = ctx.eq(ids(ctx, shape[axis], axis), j)
    fill = ctx.scalar(-0.0 if dtype == F32 else 0, dtype)
    return ctx.reduce("sum", sel(ctx, hit, x, fill, dtype), [axis])


def ids(ctx, n: int, axis: int):
    """0..n-1 along ``axis`` of a rank-3 int32 constant."""
    return ctx.iota(n, axis, 3)


def loop(ctx, n: int, init, body):
    """``for j in range(n): carry = body(j, *carry)`` as a Core AI ``while``. The loop
    carries a second counter, tested too (``j < n and k < n + 1``): with ``j < n``
    alone, Core AI's runtime never ended some loops (measured: a product of a row with
    the carry written back into it; the same loop with the second test gives the right
    values)."""
    one = ctx.scalar(1, I32)

    def cond(state):
        return ctx.and_(ctx.lt(state[0], ctx.scalar(n, I32)),
                        ctx.lt(state[1], ctx.scalar(n + 1, I32)))

    def step(state):
        nxt = list(body(state[0], *state[2:]))
        return [ctx.add(state[0], one), ctx.add(state[1], one)] + nxt

    zero = ctx.const(np.int32(0))
    return ca_private.while_loop([zero, zero] + list(init), cond, step)[2:]


def rev(ctx, n: int, t):
    return ctx.sub(ctx.scalar(n - 1, I32), t)


def widen(ctx, v, shape, dtype):
    """``v`` broadcast to ``shape`` by an elementwise identity with a splat constant of
    that shape (``x + -0.0`` keeps every float, signed zeros and NaN included; int ``+ 0``;
    bool ``or False``): Core AI's runtime hung on a ``broadcast_to`` (and on a ``where``
    whose operands broadcast along different dims) of a value computed from a loop's carry
    inside the loop (measured: a [1, 1, 2] row of a product with the carry, broadcast to
    [1, 3, 2], never finished); implicit broadcasting against a full-shape operand does
    not hang."""
    if tuple(ctx.shape(v)) == tuple(shape):
        return v
    if dtype == DType.bool:
        return ctx.or_(v, ctx.const(np.zeros(shape, bool)))
    if dtype == F32:
        return ctx.add(v, ctx.const(np.full(shape, -0.0, np.float32)))
    return ctx.add(v, ctx.const(np.zeros(shape, np.int32)))


def sel(ctx, cond, on_true, on_false, dtype=F32):
    """``where`` with its operands widened to the result's shape first (a rank-0 one
    stays): see ``widen``."""
    shape = np.broadcast_shapes(*(ctx.shape(v) for v in (cond, on_true, on_false)))

    def full(v, dt):
        return v if not ctx.shape(v) else widen(ctx, v, shape, dt)

    return ctx.where(full(cond, DType.bool), full(on_true, dtype), full(on_false, dtype))


def mm(ctx, x, y):
    return ctx.matmul(x, y)


def swap_last(ctx, x):
    return ctx.transpose(x, (0, 2, 1))


def c(ctx, v):
    return ctx.scalar(v, F32)


def nan_where_not(ctx, ok, x):
    return sel(ctx, ok, x, c(ctx, np.nan))


def _check(node):
    from .ops_base import unsupported
    for v in list(node.inputs) + list(node.outputs):
        if v.type.dtype.is_float and v.type.dtype != F32:
            raise unsupported(node, f"{node.op} of {v.type.dtype} is not lowered for Core AI")


# -- cholesky --------------------------------------------------------------------------------
@rule("cholesky")
def _cholesky(ctx, node, ins):
    _check(node)
    t = node.inputs[0].type
    n = t.shape[-1]
    a = as3(ctx, ins[0], t.shape)
    s = ctx.shape(a)
    rows, cols = ids(ctx, n, 1), ids(ctx, n, 2)
    zero = c(ctx, 0.0)

    def step(j, L, ok):
        row = take(ctx, L, s, 1, j)                               # L[j, :]
        v = ctx.sub(take(ctx, a, s, 2, j), mm(ctx, L, swap_last(ctx, row)))
        pivot = take(ctx, v, ctx.shape(v), 1, j)                  # v[j]
        d = ctx.ca.sqrt(pivot)
        col = sel(ctx, ctx.eq(rows, j), d, ctx.div(v, d))
        col = sel(ctx, ctx.lt(rows, j), zero, col)
        L = sel(ctx, ctx.eq(cols, j), col, L)
        bad = ctx.or_(ctx.lt(pivot, zero), ctx.eq(pivot, zero))
        return L, ctx.and_(ok, ctx.ca.not_(bad))     # a NaN pivot is not caught, as potrf

    ok0 = ctx.const(np.ones((s[0], 1, 1), bool))
    L, ok = loop(ctx, n, [ctx.full(0, t.with_shape(s)), ok0], step)
    out = sel(ctx, ctx.gt(cols, rows), a, L)         # a's strict upper triangle, as potrf
    return ctx.reshape(nan_where_not(ctx, ok, out), t.shape)


# -- triangular_solve ------------------------------------------------------------------------
def substitute(ctx, m, rhs, lower: bool, unit: bool, diag=None):
    """Solve ``m x = rhs`` ([B, n, n], [B, n, k]) for a triangular ``m`` whose other
    triangle and diagonal are zero (the diagonal is ``diag`` [B, n, 1], or ones)."""
    s = ctx.shape(rhs)
    n = s[1]
    rows = ids(ctx, n, 1)

    def step(t, x):
        i = t if lower else rev(ctx, n, t)
        xi = ctx.sub(take(ctx, rhs, s, 1, i), mm(ctx, take(ctx, m, ctx.shape(m), 1, i), x))
        if not unit:
            xi = ctx.div(xi, take(ctx, diag, ctx.shape(diag), 1, i))
        return (sel(ctx, ctx.eq(rows, i), xi, x),)

    (x,) = loop(ctx, n, [ctx.full(0, TensorType(s, F32))], step)
    return x


def diagonal(ctx, a, n):
    """a[..., i, i] as [B, n, 1] (a gather: exact, signed zeros kept)."""
    b = ctx.shape(a)[0]
    idx = ctx.broadcast(ids(ctx, n, 1), (b, n, 1), I32)
    return ctx.gather_along(a, idx, 2, (b, n, 1), F32)


@rule("triangular_solve")
def _triangular_solve(ctx, node, ins):
    _check(node)
    p = node.params
    ta, tb = node.inputs[0].type, node.inputs[1].type
    n = ta.shape[-1]
    a, rhs = as3(ctx, ins[0], ta.shape), as3(ctx, ins[1], tb.shape)
    rows, cols = ids(ctx, n, 1), ids(ctx, n, 2)
    keep = ctx.gt(rows, cols) if p["lower"] else ctx.gt(cols, rows)
    strict = sel(ctx, keep, a, c(ctx, 0.0))
    diag = None if p["unit_diagonal"] else diagonal(ctx, a, n)
    flip = p["transpose_a"] != (not p["left_side"])
    m = swap_last(ctx, strict) if flip else strict
    rhs = rhs if p["left_side"] else swap_last(ctx, rhs)
    x = substitute(ctx, m, rhs, p["lower"] != flip, p["unit_diagonal"], diag)
    x = x if p["left_side"] else swap_last(ctx, x)
    return ctx.reshape(x, tb.shape)


# -- lu --------------------------------------------------------------------------------------
def first_max_row(ctx, mag, valid, j, m):
    """The first row (rank-3 [B, 1, 1] int32) of largest ``mag`` among ``valid`` rows, as
    LAPACK's ``isamax`` scans from row ``j``: a NaN is never larger, and a NaN at row j
    (the scan's start) is kept."""
    rows = ids(ctx, m, 1)
    finite = sel(ctx, ctx.and_(valid, ctx.eq(mag, mag)), mag, c(ctx, -1.0))
    top = ctx.reduce("max", finite, [1])
    hit = ctx.and_(valid, ctx.eq(finite, top))
    idx = ctx.reduce("min", sel(ctx, hit, rows, ctx.scalar(m, I32), I32), [1])
    at_j = take(ctx, mag, ctx.shape(mag), 1, j)
    jj = ctx.reshape(j, (1, 1, 1))
    return sel(ctx, ctx.or_(ctx.isnan(at_j), ctx.eq(idx, ctx.scalar(m, I32))), jj, idx, I32)


def swap_rows(ctx, x, j, piv, is_j, is_p, dtype):
    """x [B, m, c] with rows j and piv ([B, 1, 1]) exchanged per batch element."""
    s = ctx.shape(x)
    at_j, at_p = take(ctx, x, s, 1, j, dtype), take(ctx, x, s, 1, piv, dtype)
    return sel(ctx, is_j, at_p, sel(ctx, is_p, at_j, x, dtype), dtype)


@rule("lu")
def _lu(ctx, node, ins):
    _check(node)
    t = node.inputs[0].type
    m, n = t.shape[-2:]
    k, batch = min(m, n), tuple(t.shape[:-2])
    x = as3(ctx, ins[0], t.shape)
    B = ctx.shape(x)[0]
    rows, cols, steps = ids(ctx, m, 1), ids(ctx, n, 2), ids(ctx, k, 2)
    one, zero = c(ctx, 1.0), c(ctx, 0.0)
    tiny = c(ctx, float(np.finfo(np.float32).tiny))

    def step(j, x, perm, pivots):
        s = ctx.shape(x)
        below_j = ctx.ne(ctx.lt(rows, j), ctx.const(True))
        mag = ctx.ca.abs_(take(ctx, x, s, 2, j))
        piv = first_max_row(ctx, mag, below_j, j, m)
        is_j, is_p = ctx.eq(rows, j), ctx.eq(rows, piv)
        x = swap_rows(ctx, x, j, piv, is_j, is_p, F32)
        perm = swap_rows(ctx, perm, j, piv, is_j, is_p, I32)
        pivots = sel(ctx, ctx.eq(steps, j), piv, pivots, I32)
        urow = take(ctx, x, s, 1, j)
        pivot = take(ctx, urow, ctx.shape(urow), 2, j)
        col = take(ctx, x, s, 2, j)
        big = ctx.or_(ctx.gt(ctx.ca.abs_(pivot), tiny), ctx.eq(ctx.ca.abs_(pivot), tiny))
        scaled = sel(ctx, big, ctx.mul(col, ctx.div(one, pivot)), ctx.div(col, pivot))
        scaled = sel(ctx, ctx.eq(pivot, zero), col, scaled)
        below = ctx.gt(rows, j)
        l = sel(ctx, below, scaled, zero)  # noqa: E741
        u = sel(ctx, ctx.gt(cols, j), urow, zero)
        x = ctx.sub(x, ctx.mul(l, u))
        return sel(ctx, ctx.and_(ctx.eq(cols, j), below), l, x), perm, pivots

    perm0 = ctx.const(np.broadcast_to(np.arange(m, dtype=np.int32).reshape(1, m, 1),
                                      (B, m, 1)).copy())
    piv0 = ctx.const(np.zeros((B, 1, k), np.int32))
    x, perm, pivots = loop(ctx, k, [x, perm0, piv0], step)
    return [ctx.reshape(x, t.shape), ctx.reshape(pivots, batch + (k,)),
            ctx.reshape(perm, batch + (m,))]


# -- tridiagonal_solve -----------------------------------------------------------------------
@rule("tridiagonal_solve")
def _tridiagonal_solve(ctx, node, ins):
    """LAPACK ``gtsv``: elimination down the sub-diagonal, exchanging rows i and i+1 where
    |A[i+1, i]| > |A[i, i]| (U then has two super-diagonals), then back substitution. Row
    i is final after step i; the loop carries row i+1 as updated."""
    _check(node)
    tb = node.outputs[0].type
    n, k = tb.shape[-2:]
    rhs = as3(ctx, ins[3], tb.shape)
    B = ctx.shape(rhs)[0]
    cs = (B, n, 1)
    dl, d, du = (ctx.reshape(v, cs) for v in ins[:3])
    rows = ids(ctx, n, 1)
    zero = c(ctx, 0.0)
    du = sel(ctx, ctx.lt(rows, ctx.scalar(n - 1, I32)), du, zero)   # du[n-1] unused

    def put(x, i, v):
        return sel(ctx, ctx.eq(rows, i), v, x)

    def eliminate(i, cur_d, cur_du, cur_b, u0, u1, u2, y, ok):
        nxt = ctx.add(i, ctx.scalar(1, I32))
        low, d_n, du_n = (take(ctx, v, cs, 1, nxt) for v in (dl, d, du))
        b_n = take(ctx, rhs, (B, n, k), 1, nxt)
        keep = ctx.ne(ctx.lt(ctx.ca.abs_(cur_d), ctx.ca.abs_(low)), ctx.const(True))
        fact = sel(ctx, keep, ctx.div(low, cur_d), ctx.div(cur_d, low))
        u0 = put(u0, i, sel(ctx, keep, cur_d, low))
        u1 = put(u1, i, sel(ctx, keep, cur_du, d_n))
        u2 = put(u2, i, sel(ctx, keep, zero, du_n))
        y = put(y, i, sel(ctx, keep, cur_b, b_n))
        new_d = sel(ctx, keep, ctx.sub(d_n, ctx.mul(fact, cur_du)),
                          ctx.sub(cur_du, ctx.mul(fact, d_n)))
        new_du = sel(ctx, keep, du_n, ctx.mul(ctx.neg(fact, F32), du_n))
        new_b = sel(ctx, keep, ctx.sub(b_n, ctx.mul(fact, cur_b)),
                          ctx.sub(cur_b, ctx.mul(fact, b_n)))
        singular = ctx.and_(keep, ctx.eq(cur_d, zero))
        return new_d, new_du, new_b, u0, u1, u2, y, ctx.and_(ok, ctx.ca.not_(singular))

    i0 = ctx.const(np.int32(0))
    first = [take(ctx, d, cs, 1, i0), take(ctx, du, cs, 1, i0),
             take(ctx, rhs, (B, n, k), 1, i0)]
    zc, zy = ctx.const(np.zeros(cs, np.float32)), ctx.const(np.zeros((B, n, k), np.float32))
    init = first + [zc, zc, zc, zy, ctx.const(np.ones((B, 1, 1), bool))]
    state = loop(ctx, n - 1, init, eliminate) if n > 1 else init
    cur_d, _, cur_b, u0, u1, u2, y, ok = state
    last = ctx.const(np.int32(n - 1))
    u0, y = put(u0, last, cur_d), put(y, last, cur_b)
    ok = ctx.and_(ok, ctx.ne(cur_d, zero))

    def back(s, x):  # x[i+1], x[i+2] read back (an index past the end reads -0.0): a
        # loop yielding one carry into another's slot came back wrong (Core AI, measured)
        i = rev(ctx, n, s)
        x1 = take(ctx, x, (B, n, k), 1, ctx.add(i, ctx.scalar(1, I32)))
        x2 = take(ctx, x, (B, n, k), 1, ctx.add(i, ctx.scalar(2, I32)))
        r = ctx.sub(take(ctx, y, (B, n, k), 1, i), ctx.mul(take(ctx, u1, cs, 1, i), x1))
        r = ctx.sub(r, ctx.mul(take(ctx, u2, cs, 1, i), x2))
        return (put(x, i, ctx.div(r, take(ctx, u0, cs, 1, i))),)

    (x,) = loop(ctx, n, [zy], back)
    return ctx.reshape(nan_where_not(ctx, ok, x), tb.shape)
