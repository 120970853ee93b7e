"""Fold: the linalg family, in the operand's dtype, by the same loops and the same
arithmetic as the decomposition (transforms/legalize/linalg*.py) computes them."""
from __future__ import annotations

import numpy as np

from ...ir.ops import register_impl


def _tri(n, lower, k):
    ones = np.ones((n, n), bool)
    return np.tril(ones, k) if lower else np.triu(ones, k)


@register_impl("fold", "cholesky")
def cholesky(p, a):
    n = a.shape[-1]
    zero = np.zeros((), a.dtype)
    L = np.zeros_like(a)
    ok = np.ones(a.shape[:-2] + (1, 1), bool)
    ids = np.arange(n).reshape(n, 1)
    for j in range(n):
        v = a[..., :, j:j + 1] - np.matmul(L, np.swapaxes(L[..., j:j + 1, :], -1, -2))
        pivot = v[..., j:j + 1, :]
        d = np.sqrt(pivot)
        col = np.where(ids >= j, np.where(ids == j, d, v / d), zero)
        L[..., :, j:j + 1] = col
        ok = ok & ~(pivot <= zero)
    out = np.where(_tri(n, False, 1), a, L)
    return np.where(ok, out, np.asarray(np.nan, a.dtype)).astype(a.dtype)


def substitute(m, rhs, lower, unit, diag):
    n = m.shape[-1]
    x = np.zeros_like(rhs)
    for t in range(n):
        i = t if lower else n - 1 - t
        xi = rhs[..., i:i + 1, :] - np.matmul(m[..., i:i + 1, :], x)
        if not unit:
            xi = xi / diag[..., i:i + 1, :]
        x[..., i:i + 1, :] = xi
    return x


@register_impl("fold", "triangular_solve")
def triangular_solve(p, a, b):
    n = a.shape[-1]
    zero = np.zeros((), a.dtype)
    strict = np.where(_tri(n, p["lower"], -1 if p["lower"] else 1), a, zero)
    diag = None
    if not p["unit_diagonal"]:
        diag = np.sum(np.where(np.eye(n, dtype=bool), a, zero), axis=-1, keepdims=True)
    flip = p["transpose_a"] != (not p["left_side"])
    m = np.swapaxes(strict, -1, -2) if flip else strict
    rhs = b if p["left_side"] else np.swapaxes(b, -1, -2)
    x = substitute(m, rhs, p["lower"] != flip, p["unit_diagonal"], diag)
    return np.ascontiguousarray(x if p["left_side"] else np.swapaxes(x, -1, -2))


@register_impl("fold", "lu")
def lu(p, a):
    x = np.array(a)
    m, n = a.shape[-2:]
    k, batch = min(m, n), a.shape[:-2]
    dt = a.dtype.type
    perm = np.broadcast_to(np.arange(m, dtype=np.int32).reshape(m, 1), batch + (m, 1)).copy()
    pivots = np.zeros(batch + (k,), np.int32)
    rows = np.arange(m).reshape(m, 1)
    for j in range(k):
        mag = np.where(rows >= j, np.abs(x[..., :, j:j + 1]), dt(-1))
        piv = np.argmax(mag, axis=-2)[..., 0]            # batch
        for arr in (x, perm):
            at_j = arr[..., j, :].copy()
            at_p = np.take_along_axis(arr, piv[..., None, None], axis=-2)[..., 0, :]
            arr[..., j, :] = at_p
            np.put_along_axis(arr, piv[..., None, None],
                              np.where(piv[..., None] == j, at_p, at_j)[..., None, :], axis=-2)
        pivots[..., j] = piv
        pivot = x[..., j:j + 1, j:j + 1]
        col = x[..., :, j:j + 1]
        with np.errstate(all="ignore"):
            scaled = np.where(np.abs(pivot) >= np.finfo(a.dtype).tiny,
                              col * (dt(1) / pivot), col / pivot)
        scaled = np.where(pivot == 0, col, scaled)
        lcol = np.where(rows > j, scaled, dt(0))
        urow = np.where(np.arange(n) > j, x[..., j:j + 1, :], dt(0))
        x = (x - lcol * urow).astype(a.dtype)
        x[..., :, j:j + 1] = np.where(rows > j, lcol, x[..., :, j:j + 1])
    return x, pivots, perm[..., 0]


@register_impl("fold", "tridiagonal_solve")
def tridiagonal_solve(p, dl, d, du, b):
    n = b.shape[-2]
    dt = b.dtype.type
    dl, d, du = (v[..., None] for v in (dl, d, du))
    du = np.where(np.arange(n).reshape(n, 1) < n - 1, du, dt(0))
    u0, u1, u2, y = (np.zeros_like(d), np.zeros_like(d), np.zeros_like(d), np.zeros_like(b))
    cur_d, cur_du, cur_b = d[..., 0:1, :], du[..., 0:1, :], b[..., 0:1, :]
    ok = np.ones(b.shape[:-2] + (1, 1), bool)
    with np.errstate(all="ignore"):
        for i in range(n - 1):
            low, d_n, du_n, b_n = (v[..., i + 1:i + 2, :] for v in (dl, d, du, b))
            keep = np.abs(cur_d) >= np.abs(low)
            fact = np.where(keep, low / cur_d, cur_d / low)
            u0[..., i:i + 1, :] = np.where(keep, cur_d, low)
            u1[..., i:i + 1, :] = np.where(keep, cur_du, d_n)
            u2[..., i:i + 1, :] = np.where(keep, dt(0), du_n)
            y[..., i:i + 1, :] = np.where(keep, cur_b, b_n)
            new_d = np.where(keep, d_n - fact * cur_du, cur_du - fact * d_n)
            new_du = np.where(keep, du_n, (fact * dt(-1)) * du_n)
            new_b = np.where(keep, b_n - fact * cur_b, cur_b - fact * b_n)
            ok = ok & ~(keep & (cur_d == 0))
            cur_d, cur_du, cur_b = new_d, new_du, new_b
        u0[..., n - 1:, :], y[..., n - 1:, :] = cur_d, cur_b
        ok = ok & (cur_d != 0)
        x = np.zeros_like(b)
        x1 = x2 = np.zeros_like(b[..., :1, :])
        for i in range(n - 1, -1, -1):
            r = y[..., i:i + 1, :] - u1[..., i:i + 1, :] * x1
            xi = (r - u2[..., i:i + 1, :] * x2) / u0[..., i:i + 1, :]
            x[..., i:i + 1, :] = xi
            x1, x2 = xi, x1
    return np.where(ok, x, dt(np.nan)).astype(b.dtype)


def _reflector(x, j):
    dt = x.dtype.type
    m = x.shape[-2]
    rows = np.arange(m).reshape(m, 1)
    tail = np.where(rows > j, x, dt(0))
    alpha = x[..., j:j + 1, :]
    ss = np.sum(tail * tail, axis=-2, keepdims=True)
    norm = np.sqrt(alpha * alpha + ss)
    beta = np.where(alpha < 0, norm, norm * dt(-1))
    plain = ss == 0
    tau = np.where(plain, dt(0), (beta - alpha) / beta)
    scale = dt(1) / (alpha - beta)
    v = np.where(rows == j, dt(1), np.where(plain, dt(0), tail * scale))
    return v, tau, np.where(plain, alpha, beta)


def _apply_reflector(v, tau, x):
    w = np.matmul(np.swapaxes(v, -1, -2), x)
    return x - v * (tau * w)


@register_impl("fold", "qr")
def qr(p, a):
    m, n = a.shape[-2:]
    k, batch = min(m, n), a.shape[:-2]
    dt = a.dtype.type
    x = np.array(a)
    taus = np.zeros(batch + (1, k), a.dtype)
    with np.errstate(all="ignore"):
        for j in range(k):
            v, tau, diag = _reflector(x[..., :, j:j + 1], j)
            x[..., :, j + 1:] = _apply_reflector(v, tau, x)[..., :, j + 1:]
            x[..., j:, j:j + 1] = np.where(np.arange(m)[j:].reshape(-1, 1) == j, diag,
                                           v[..., j:, :])
            taus[..., :, j:j + 1] = tau
        q_cols = m if p["full_matrices"] else k
        q = np.broadcast_to(np.eye(m, q_cols, dtype=a.dtype), batch + (m, q_cols)).copy()
        rows = np.arange(m).reshape(m, 1)
        for i in range(k - 1, -1, -1):
            v = np.where(rows == i, dt(1), np.where(rows > i, x[..., :, i:i + 1], dt(0)))
            q = _apply_reflector(v, taus[..., :, i:i + 1], q)
    r = np.where(np.arange(n).reshape(1, n) >= rows, x, dt(0))
    return q.astype(a.dtype), np.ascontiguousarray(r[..., :q_cols, :])


@register_impl("fold", "svd")
def svd(p, a):
    """One-sided Jacobi, as transforms/legalize/linalg_svd.py computes it."""
    from ...ir.linalg import MAX_SWEEPS, round_robin  # the same schedule as the lowering
    m, n = a.shape[-2:]
    dt = a.dtype.type
    w = np.array(a if m >= n else np.swapaxes(a, -1, -2))
    rows, cols = max(m, n), min(m, n)
    n2 = cols + cols % 2
    if n2 != cols:
        w = np.concatenate([w, np.zeros(w.shape[:-1] + (1,), a.dtype)], axis=-1)
    tol = dt(np.sqrt(rows) * np.finfo(a.dtype).eps)
    table = round_robin(n2)
    v = np.broadcast_to(np.eye(n2, dtype=a.dtype), w.shape[:-2] + (n2, n2)).copy()
    off, sweeps, h = dt(np.inf), 0, n2 // 2
    with np.errstate(all="ignore"):
        while sweeps < MAX_SWEEPS and off > tol:
            off = dt(0)
            for idx in table:
                gw, gv = w[..., idx], v[..., idx]
                wp, wq, vp, vq = gw[..., :h], gw[..., h:], gv[..., :h], gv[..., h:]
                alpha, beta, gamma = (np.sum(x * y, axis=-2, keepdims=True)
                                      for x, y in ((wp, wp), (wq, wq), (wp, wq)))
                scale = np.sqrt(alpha) * np.sqrt(beta)
                ratio = np.where(scale > 0, np.abs(gamma) / scale, dt(0))
                zeta = (beta - alpha) / (gamma * dt(2))
                t = dt(1) / (np.abs(zeta) + np.sqrt(dt(1) + zeta * zeta))
                t = np.where(zeta < 0, t * dt(-1), t)
                t = np.where(np.abs(zeta) > dt(1e15), dt(0.5) / zeta, t)
                c = dt(1) / np.sqrt(dt(1) + t * t)
                s = c * t
                c, s = np.where(ratio > tol, c, dt(1)), np.where(ratio > tol, s, dt(0))
                inv = np.argsort(idx)
                w = np.concatenate([c * wp - s * wq, s * wp + c * wq], axis=-1)[..., inv]
                v = np.concatenate([c * vp - s * vq, s * vp + c * vq], axis=-1)[..., inv]
                off = np.maximum(off, np.max(ratio))
            sweeps += 1
        sigma = np.sqrt(np.sum(w * w, axis=-2, keepdims=True))
        unit = np.where(sigma > 0, w / sigma, dt(0))
    ids = np.arange(n2)
    before = (sigma[..., 0, :, None] > sigma[..., 0, None, :]) | (
        (sigma[..., 0, :, None] == sigma[..., 0, None, :]) & (ids[:, None] < ids[None, :]))
    order = np.argsort(np.sum(before, axis=-2), axis=-1)  # entry at each place
    sigma = np.take_along_axis(sigma[..., 0, :], order, -1)[..., :cols]
    unit = np.take_along_axis(unit, order[..., None, :], -1)[..., :cols]
    v = np.take_along_axis(v, order[..., None, :], -1)[..., :cols, :cols]
    if not off <= tol:
        sigma, unit, v = (np.full_like(x, np.nan) for x in (sigma, unit, v))
    if m >= n:
        return sigma, unit, np.ascontiguousarray(np.swapaxes(v, -1, -2))
    return sigma, v, np.ascontiguousarray(np.swapaxes(unit, -1, -2))
