"""VJP rules: the linalg family. Each is the transpose of JAX's own JVP rule for the
primitive (jax/_src/lax/linalg.py), written with the same solves and products in the same
order, so a gradient agrees with ``jax.grad`` to rounding:

- cholesky: ``Σ̄ = L⁻ᵀ Φ(Lᵀ L̄) L⁻¹`` with ``Φ`` = lower triangle, diagonal halved (JAX's
  rule does not symmetrize, and the upper triangle of the result carries no derivative);
- triangular_solve: ``b̄ = op(a)⁻ᵀ c̄`` (left side; ``c̄ op(a)⁻ᵀ`` on the right) and
  ``ā = −mask(op̄(b̄ xᵀ))`` (``−mask(op̄(xᵀ b̄))`` on the right), ``mask`` the triangle the
  solve reads, each product taken in the order JAX's rule picks by shape;
- lu: ``ā = Pᵀ L⁻ᵀ (tril₋₁(Lᵀ C̄) + triu(C̄ Uᵀ)) U⁻ᵀ`` (De Hoog, Anderssen & Lukas, as
  in JAX; for non-square ``a`` the factors are padded as JAX pads them);
- tridiagonal_solve: ``b̄ = A⁻ᵀ c̄`` and the diagonals' cotangents ``−b̄·x`` shifted.
"""
from __future__ import annotations

import numpy as np

from ...errors import UnsupportedPrimitiveError
from .registry import refuse_vjp, vjp_rule


def _mT(ctx, x):
    r = x.type.rank
    return ctx.transpose(x, tuple(range(r - 2)) + (r - 1, r - 2))


def _mm(ctx, x, y):
    """Batched matrix product x @ y over the trailing two dims."""
    r = x.type.rank
    batch = tuple(range(r - 2))
    return ctx.add("dot_general", x, y, contract=((r - 1,), (r - 2,)), batch=(batch, batch))


def _keep(ctx, x, lower: bool, k: int):
    """numpy's tril(x, k) (lower) or triu(x, k) over the trailing two dims: a select, as
    JAX's tril/triu, so a NaN outside does not leak. The mask compares two iotas (folded
    to a constant when small)."""
    m, n = x.shape[-2:]
    rows = ctx.constant(np.arange(m, dtype=np.int32).reshape(m, 1) + np.int32(k))
    cols = ctx.constant(np.arange(n, dtype=np.int32).reshape(1, n))
    mask = ctx.add("le" if lower else "ge", cols, rows)
    return ctx.add("select", mask, ctx.scalar(0.0, x), x)


def _solve(ctx, a, x, *, left_side, lower, transpose_a, unit_diagonal=False):
    return ctx.add("triangular_solve", a, x, left_side=left_side, lower=lower,
                   transpose_a=transpose_a, unit_diagonal=unit_diagonal)


@vjp_rule("cholesky")
def _cholesky(ctx, node, cts, needs):
    (ct,), n = cts, node.outputs[0].shape[-1]
    L = _keep(ctx, node.outputs[0], True, 0)
    p = _keep(ctx, _mm(ctx, _mT(ctx, L), ct), True, 0)
    p = ctx.add("div", p, ctx.constant((1 + np.eye(n)).astype(L.dtype.np)))
    z = _solve(ctx, L, p, left_side=True, lower=True, transpose_a=True)
    return [_solve(ctx, L, z, left_side=False, lower=True, transpose_a=False)]


@vjp_rule("triangular_solve")
def _triangular_solve(ctx, node, cts, needs):
    (ct,), (a, _), x = cts, node.inputs, node.outputs[0]
    p = node.params
    left, m, n = p["left_side"], x.shape[-2], x.shape[-1]
    flags = dict(left_side=left, lower=p["lower"], unit_diagonal=p["unit_diagonal"])

    def inv_t(y):  # the adjoint of y -> a_inverse(y): the solve with op(a) transposed
        return _solve(ctx, a, y, transpose_a=not p["transpose_a"], **flags)

    out = [None, None]
    first = (left and m > n) or (not left and m < n)
    c = inv_t(ct) if needs[1] or (needs[0] and first) else None
    out[1] = c if needs[1] else None
    if needs[0]:
        if left:
            g = _mm(ctx, c, _mT(ctx, x)) if first else inv_t(_mm(ctx, ct, _mT(ctx, x)))
        else:
            g = _mm(ctx, _mT(ctx, x), c) if first else inv_t(_mm(ctx, _mT(ctx, x), ct))
        g = _mT(ctx, g) if p["transpose_a"] else g
        k = 1 if p["unit_diagonal"] else 0
        out[0] = ctx.add("neg", _keep(ctx, g, p["lower"], -k if p["lower"] else k))
    return out


def _pad_last2(ctx, x, rows: int, cols: int):
    if rows == 0 and cols == 0:
        return x
    cfg = ((0, 0, 0),) * (x.type.rank - 2) + ((0, rows, 0), (0, cols, 0))
    return ctx.add("pad", x, ctx.scalar(0.0, x), config=cfg)


def _slice_last2(ctx, x, rows: int, cols: int):
    if (rows, cols) == tuple(x.shape[-2:]):
        return x
    r = x.type.rank
    return ctx.add("slice", x, start=(0,) * r, limit=tuple(x.shape[:-2]) + (rows, cols),
                   strides=(1,) * r)


@vjp_rule("lu")
def _lu(ctx, node, cts, needs):
    ct = cts[0]
    if ct is None:  # only the (integer) pivots / permutation were read
        return [None]
    lu, perm = node.outputs[0], node.outputs[2]
    m, n = lu.shape[-2:]
    k, batch = min(m, n), tuple(lu.shape[:-2])
    dt = lu.dtype.np
    l_part = _keep(ctx, _slice_last2(ctx, lu, m, k), True, -1)
    l_mat = ctx.add("add", _pad_last2(ctx, l_part, 0, m - k), ctx.constant(np.eye(m, dtype=dt)))
    u_part = _keep(ctx, _slice_last2(ctx, lu, k, n), False, 0)
    u_eye = np.zeros((n, n), dt)
    u_eye[k:, k:] = np.eye(n - k, dtype=dt)
    u_mat = ctx.add("add", _pad_last2(ctx, u_part, n - k, 0), ctx.constant(u_eye))
    lau = ctx.add("add", _keep(ctx, _mm(ctx, _mT(ctx, l_mat), ct), True, -1),
                  _keep(ctx, _mm(ctx, ct, _mT(ctx, u_mat)), False, 0))
    la = _solve(ctx, u_mat, lau, left_side=False, lower=False, transpose_a=True)
    xbar = _solve(ctx, l_mat, la, left_side=True, lower=True, transpose_a=True,
                  unit_diagonal=True)
    # x = a[..., perm, :]: its transpose scatters row i back to row perm[i].
    idx = [ctx.constant(np.broadcast_to(
        np.arange(d, dtype=np.int32).reshape((d,) + (1,) * (len(batch) + 1 - i)),
        batch + (m, 1)).copy()) for i, d in enumerate(batch)]
    idx.append(ctx.reshape(perm, batch + (m, 1)))
    idx = idx[0] if len(idx) == 1 else ctx.add("concatenate", *idx, axis=len(batch) + 1)
    return [ctx.add("scatter_nd", ctx.zeros(lu.type), idx, xbar, mode="add", unique=True)]


def _shift(ctx, v, up: bool):
    """v[..., 1:] padded with a trailing 0 (up), or v[..., :-1] after a leading 0."""
    r, n = v.type.rank, v.shape[-1]
    start, limit = ((0,) * (r - 1) + (1,), tuple(v.shape)) if up else \
        ((0,) * r, tuple(v.shape[:-1]) + (n - 1,))
    part = ctx.add("slice", v, start=start, limit=limit, strides=(1,) * r)
    cfg = ((0, 0, 0),) * (r - 1) + (((0, 1, 0),) if up else ((1, 0, 0),))
    return ctx.add("pad", part, ctx.scalar(0.0, v), config=cfg)


@vjp_rule("tridiagonal_solve")
def _tridiagonal_solve(ctx, node, cts, needs):
    (ct,), (dl, d, du, _), x = cts, node.inputs, node.outputs[0]
    n = x.shape[-2]
    # Aᵀ has sub-diagonal du[i-1] and super-diagonal dl[i+1] (JAX's transpose rule).
    bbar = ctx.add("tridiagonal_solve", _shift(ctx, du, up=False), d, _shift(ctx, dl, up=True),
                   ct) if n > 1 else ctx.add("tridiagonal_solve", dl, d, du, ct)
    out = [None, None, None, bbar if needs[3] else None]
    if not any(needs[:3]):
        return out
    r = x.type.rank

    def minus_dot(xs):  # −Σ_k b̄[..., i, k]·xs[..., i, k]
        return ctx.add("neg", ctx.add("reduce_sum", ctx.add("mul", bbar, xs), axes=(r - 1,)))

    def rows(up: bool):  # x shifted by one row (x[i+1] if up else x[i-1]), 0 past the end
        start = (0,) * (r - 2) + ((1, 0) if up else (0, 0))
        limit = tuple(x.shape[:-2]) + ((n, x.shape[-1]) if up else (n - 1, x.shape[-1]))
        part = ctx.add("slice", x, start=start, limit=limit, strides=(1,) * r)
        edge = ((0, 1, 0) if up else (1, 0, 0),)
        return ctx.add("pad", part, ctx.scalar(0.0, x), config=((0, 0, 0),) * (r - 2) + edge
                       + ((0, 0, 0),))

    if needs[1]:
        out[1] = minus_dot(x)
    if n > 1 and needs[0]:
        out[0] = minus_dot(rows(up=False))
    if n > 1 and needs[2]:
        out[2] = minus_dot(rows(up=True))
    if n == 1:
        out[0] = ctx.zeros(dl.type) if needs[0] else None
        out[2] = ctx.zeros(du.type) if needs[2] else None
    return out


# qr's gradient is JAX's own rule (thin, wide and full-matrices cases): the frontend wraps
# every qr it may differentiate in a custom_vjp node whose rule is the primitive's.
refuse_vjp("a qr node outside its custom_vjp wrapper is not differentiated (rlxjax takes "
           "qr's gradient from JAX's rule, frontend/rules/linalg.py)", "qr")


@vjp_rule("svd")
def _svd(ctx, node, cts, needs):
    """JAX's rule for the singular values alone (compute_uv=False): ā = u diag(s̄) vt."""
    ct, ct_u, ct_vt = cts
    if ct_u is not None or ct_vt is not None:
        raise UnsupportedPrimitiveError(
            "svd", node.source, "a gradient through the singular vectors (rlxjax computes "
            "the singular values only)")
    if ct is None:
        return [None]
    _, u, vt = node.outputs
    scaled = ctx.add("mul", u, ctx.reshape(ct, tuple(ct.shape[:-1]) + (1, ct.shape[-1])))
    return [_mm(ctx, scaled, vt)]
