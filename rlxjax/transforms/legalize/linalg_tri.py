"""``tridiagonal_solve`` (ir/linalg.py) decomposed: LAPACK ``gtsv``, elimination down the
sub-diagonal exchanging rows i and i+1 where |A[i+1, i]| > |A[i, i]| (the factor U then has
two super-diagonals), then back substitution; two loops of linalg_base.py. Row i is final
after step i; the loop carries row i+1 as updated. A batch element whose matrix is
singular is all NaN, as JAX makes it.
"""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl
from .linalg_base import E, iota, loop


@register_impl("decompose", "tridiagonal_solve")
def _tridiagonal_solve(b, node, ins):
    e = E(b)
    t = ins[3].type
    n, k, batch = t.shape[-2], t.shape[-1], tuple(t.shape[:-2])
    dt = t.dtype.np
    rows = iota(n, -2, t.rank)
    dl, d, du = (b.reshape(v, batch + (n, 1)) for v in ins[:3])
    rhs = ins[3]
    du = e.sel(e("lt", rows, np.int32(n - 1)), du, 0.0)  # du[n-1] unused

    def put(e, x, i, v):
        return e.sel(e("eq", rows, i), v, x)

    def eliminate(e, i, consts, cur_d, cur_du, cur_b, u0, u1, u2, y, ok):
        dl, d, du, rhs = consts
        nxt = e("add", i, 1)
        low, d_n, du_n, b_n = (e.take(v, -2, nxt) for v in (dl, d, du, rhs))
        keep = e("ge", e("abs", cur_d), e("abs", low))
        fact = e.sel(keep, e("div", low, cur_d), e("div", cur_d, low))
        # row i as final, and row i+1 as updated, without (keep) or with the exchange
        u0 = put(e, u0, i, e.sel(keep, cur_d, low))
        u1 = put(e, u1, i, e.sel(keep, cur_du, d_n))
        u2 = put(e, u2, i, e.sel(keep, 0.0, du_n))
        y = put(e, y, i, e.sel(keep, cur_b, b_n))
        new_d = e.sel(keep, e("sub", d_n, e("mul", fact, cur_du)),
                      e("sub", cur_du, e("mul", fact, d_n)))
        new_du = e.sel(keep, du_n, e("mul", e("mul", fact, -1.0), du_n))
        new_b = e.sel(keep, e("sub", b_n, e("mul", fact, cur_b)),
                      e("sub", cur_b, e("mul", fact, b_n)))
        singular = e("and", keep, e("eq", cur_d, 0.0))
        return new_d, new_du, new_b, u0, u1, u2, y, e("and", ok, e("not", singular))

    first = [e.take(d, -2, 0), e.take(du, -2, 0), e.take(rhs, -2, 0)]
    zc, zy = e.lift(np.zeros(batch + (n, 1), dt)), e.lift(np.zeros(tuple(t.shape), dt))
    init = first + [zc, zc, zc, zy, e.lift(np.ones(batch + (1, 1), bool))]
    state = loop(b, n - 1, [dl, d, du, rhs], init, eliminate) if n > 1 else init
    cur_d, _, cur_b, u0, u1, u2, y, ok = state
    u0, y = put(e, u0, n - 1, cur_d), put(e, y, n - 1, cur_b)
    ok = e("and", ok, e("ne", cur_d, 0.0))

    # x[i+1] and x[i+2] carried: the one passed on is a new value (x[i+1] + -0.0, exact),
    # not the loop's own argument yielded into another slot (that came back wrong on
    # Core AI, measured)
    def back(e, s, consts, x, x1, x2):
        u0, u1, u2, y = consts
        i = e("sub", np.int32(n - 1), s)
        r = e("sub", e.take(y, -2, i), e("mul", e.take(u1, -2, i), x1))
        r = e("sub", r, e("mul", e.take(u2, -2, i), x2))
        xi = e("div", r, e.take(u0, -2, i))
        return put(e, x, i, xi), xi, e("add", x1, -0.0)

    zrow = e.lift(np.zeros(batch + (1, k), dt))
    x, _, _ = loop(b, n, [u0, u1, u2, y], [e.zeros(t), zrow, zrow], back)
    return [e.sel(ok, x, np.nan)]
