"""``qr`` (ir/linalg.py) -> Core AI: the Core ML lowering's Householder QR
(coreml/rules/linalg.py: LAPACK ``geqrf`` then ``orgqr``), with ops_linalg.py's helpers
(rank-3 working layout, one-hot row reads, the guarded ``while``).

Step ``j`` makes the unit-leading reflector of column j below the diagonal (``larfg``:
``beta = −sign(alpha)·‖x[j:]‖``, ``tau = (beta − alpha)/beta``, H = I when nothing is below
the diagonal), applies it to the columns right of j (``larf``: ``x − v·(tau·vᵀx)``) and
stores v below the diagonal; Q is then the reflectors applied to the identity from the
last one on. ``svd`` is not lowered for Core AI yet.
"""
from __future__ import annotations

import numpy as np

from .ops_base import rule
from .ops_linalg import F32, _check, as3, c, ids, loop, rev, sel, swap_last, take


def _reflector(ctx, x, j, m):
    """The Householder vector of column ``x`` [B, m, 1] at row ``j`` -> (v with v[j] = 1
    and zeros above, tau, the new x[j])."""
    rows = ids(ctx, m, 1)
    zero = c(ctx, 0.0)
    tail = sel(ctx, ctx.gt(rows, j), x, zero)
    alpha = take(ctx, x, ctx.shape(x), 1, j)
    ss = ctx.reduce("sum", ctx.mul(tail, tail), [1])
    norm = ctx.ca.sqrt(ctx.add(ctx.mul(alpha, alpha), ss))
    beta = sel(ctx, ctx.lt(alpha, zero), norm, ctx.neg(norm, F32))
    plain = ctx.eq(ss, zero)  # nothing below the diagonal: H = I, tau = 0
    tau = sel(ctx, plain, zero, ctx.div(ctx.sub(beta, alpha), beta))
    scale = ctx.div(c(ctx, 1.0), ctx.sub(alpha, beta))
    v = sel(ctx, ctx.eq(rows, j), c(ctx, 1.0), sel(ctx, plain, zero, ctx.mul(tail, scale)))
    return v, tau, sel(ctx, plain, alpha, beta)


def _apply(ctx, v, tau, x, cols=None):
    """(I − tau v vᵀ) x (``larf``); only where ``cols`` holds when given."""
    w = ctx.matmul(swap_last(ctx, v), x)
    out = ctx.sub(x, ctx.mul(v, ctx.mul(tau, w)))
    return out if cols is None else sel(ctx, cols, out, x)


@rule("qr")
def _qr(ctx, node, ins):
    _check(node)
    t = node.inputs[0].type
    m, n = t.shape[-2:]
    k = min(m, n)
    x = as3(ctx, ins[0], t.shape)
    B = ctx.shape(x)[0]
    rows, cols, steps = ids(ctx, m, 1), ids(ctx, n, 2), ids(ctx, k, 2)
    zero = c(ctx, 0.0)

    def factor(j, x, taus):
        v, tau, diag = _reflector(ctx, take(ctx, x, (B, m, n), 2, j), j, m)
        x = _apply(ctx, v, tau, x, ctx.gt(cols, j))
        col = sel(ctx, ctx.eq(rows, j), diag, v)  # v below the diagonal
        x = sel(ctx, ctx.eq(cols, j), sel(ctx, ctx.lt(rows, j),
                                          take(ctx, x, (B, m, n), 2, j), col), x)
        return x, sel(ctx, ctx.eq(steps, j), tau, taus)

    x, taus = loop(ctx, k, [x, ctx.const(np.zeros((B, 1, k), np.float32))], factor)
    q_t, r_t = (v.type for v in node.outputs)
    q_cols = q_t.shape[-1]

    def accumulate(s, q):  # Q = H_0 ... H_{k-1} I, applied from the last reflector on
        i = rev(ctx, k, s)
        col = take(ctx, x, (B, m, n), 2, i)
        v = sel(ctx, ctx.eq(rows, i), c(ctx, 1.0), sel(ctx, ctx.gt(rows, i), col, zero))
        return (_apply(ctx, v, take(ctx, taus, (B, 1, k), 2, i), q),)

    eye = np.ascontiguousarray(np.broadcast_to(np.eye(m, q_cols, dtype=np.float32),
                                               (B, m, q_cols)))
    (q,) = loop(ctx, k, [ctx.const(eye)], accumulate)
    upper = ctx.ne(ctx.gt(rows, cols), ctx.const(True))
    r = sel(ctx, upper, x, zero)
    if r_t.shape[-2] != m:
        r = ctx.slice(r, [0, 0, 0], [B, r_t.shape[-2], n])
    return [ctx.reshape(q, q_t.shape), ctx.reshape(r, r_t.shape)]

