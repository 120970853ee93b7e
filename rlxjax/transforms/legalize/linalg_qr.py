"""``qr`` (ir/linalg.py) decomposed: Householder QR as LAPACK's ``geqrf`` then ``orgqr``,
two loops of linalg_base.py.

Step ``j`` makes the unit-leading reflector of column j below the diagonal (``larfg``:
``beta = −sign(alpha)·‖x[j:]‖``, ``tau = (beta − alpha)/beta``, H = I when nothing is below
the diagonal), applies it to the columns right of j (``larf``: ``x − v·(tau·vᵀx)``) and
stores v below the diagonal; Q is then the reflectors applied to the identity from the
last one on.
"""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl
from .linalg_base import E, iota, loop


def _reflector(e, x, j, m: int):
    """The unit-leading Householder vector of column ``x`` [..., m, 1] at row ``j``
    (``larfg``) -> (v with v[j] = 1 and zeros above, tau, the new x[j])."""
    rows = iota(m, -2, x.type.rank)
    tail = e.sel(e("gt", rows, j), x, 0.0)
    alpha = e.take(x, -2, j)
    ss = e.sum_keep(e("mul", tail, tail), -2)
    norm = e("sqrt", e("add", e("mul", alpha, alpha), ss))
    beta = e.sel(e("lt", alpha, 0.0), norm, e("mul", norm, -1.0))
    plain = e("eq", ss, 0.0)  # nothing below the diagonal: H = I, tau = 0
    tau = e.sel(plain, 0.0, e("div", e("sub", beta, alpha), beta))
    scale = e("div", 1.0, e("sub", alpha, beta))
    v = e.sel(e("eq", rows, j), 1.0, e.sel(plain, 0.0, e("mul", tail, scale)))
    return v, tau, e.sel(plain, alpha, beta)


def _apply(e, v, tau, x, cols=None):
    """(I − tau v vᵀ) x as ``larf``: w = vᵀx, x − v·(tau·w); only the columns where
    ``cols`` holds (a [1, n] mask) when given."""
    w = e.mm(v, x, transpose_x=True)
    out = e("sub", x, e("mul", v, e("mul", tau, w)))
    return out if cols is None else e.sel(cols, out, x)


@register_impl("decompose", "qr")
def _qr(b, node, ins):
    e, (a,) = E(b), ins
    m, n = a.shape[-2:]
    k, batch = min(m, n), tuple(a.shape[:-2])
    rows, cols, steps = (iota(d, ax, a.type.rank) for d, ax in ((m, -2), (n, -1), (k, -1)))
    dt = a.type.dtype.np

    def factor(e, j, consts, x, taus):
        v, tau, diag = _reflector(e, e.take(x, -1, j), j, m)
        x = _apply(e, v, tau, x, e("gt", cols, j))
        col = e.sel(e("eq", rows, j), diag, v)  # v below the diagonal
        x = e.sel(e("eq", cols, j), e.sel(e("lt", rows, j), e.take(x, -1, j), col), x)
        return x, e.sel(e("eq", steps, j), tau, taus)

    taus0 = e.lift(np.zeros(batch + (1, k), dt))
    x, taus = loop(b, k, [], [a, taus0], factor)
    q_t, r_t = (v.type for v in node.outputs)

    def accumulate(e, s, consts, q):  # Q = H_0 ... H_{k-1} I, from the last reflector on
        x, taus = consts
        i = e("sub", np.int32(k - 1), s)
        col = e.take(x, -1, i)
        v = e.sel(e("eq", rows, i), 1.0, e.sel(e("gt", rows, i), col, 0.0))
        return (_apply(e, v, e.take(taus, -1, i), q),)

    eye = np.broadcast_to(np.eye(m, q_t.shape[-1], dtype=dt), tuple(q_t.shape))
    (q,) = loop(b, k, [x, taus], [e.lift(np.ascontiguousarray(eye))], accumulate)
    r = e.sel(e("ge", e.lift(cols), e.lift(rows)), x, 0.0)
    if r_t.shape[-2] != m:
        r = b.add("slice", r, start=(0,) * r_t.rank, limit=tuple(r_t.shape),
                  strides=(1,) * r_t.rank)
    return [q, r]
