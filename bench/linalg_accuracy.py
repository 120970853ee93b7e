"""Accuracy of the linear algebra against float64, next to JAX's own float32.

JAX on XLA:CPU (LAPACK): the table of docs/numerics.md ("Linear algebra"). Run:
``python bench/linalg_accuracy.py``.

Each entry is the normwise error ``max|result − reference| / max|reference|`` (the
median over 4 batch elements); the reference is the same function of the same float32
inputs evaluated in float64 (numpy / scipy, and JAX with x64 for gradients). Matrices:
``spd``: ``G Gᵀ + n I`` (G standard normal; the well-conditioned kind the tests use);
``ill``: ``Q diag(logspace(0, -4)) Qᵀ`` (condition number 1e4); ``gen``: standard normal
(``lu``, ``solve``: partial pivoting; ``qr``); tridiagonal: standard normal diagonals.
"""
from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sl
from jax import lax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import rlxjax  # noqa: E402

SIZES = (4, 16, 64, 128)
BATCH = 4


def matrices(kind, n, rng):
    if kind == "spd":
        g = rng.standard_normal((BATCH, n, n))
        return (g @ np.swapaxes(g, -1, -2) + n * np.eye(n)).astype(np.float32)
    if kind == "ill":
        q = np.linalg.qr(rng.standard_normal((BATCH, n, n)))[0]
        d = np.logspace(0, -4, n)
        return ((q * d) @ np.swapaxes(q, -1, -2)).astype(np.float32)
    return rng.standard_normal((BATCH, n, n)).astype(np.float32)


def err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    axes = tuple(range(1, ref.ndim))
    return float(np.median(np.max(np.abs(got - ref), axis=axes) / np.max(np.abs(ref), axis=axes)))


def both(fn, *args):
    """(rlxjax, JAX float32) results of fn."""
    return rlxjax.coreml_jit(fn, backend="reference")(*args), jax.jit(fn)(*args)


def both_grad(loss, *args):
    """(rlxjax's coreml_grad, JAX float32's jax.grad) of loss."""
    return (rlxjax.coreml_grad(loss, backend="reference")(*args),
            jax.jit(jax.grad(loss))(*args))


def x64(fn, *args):
    jax.config.update("jax_enable_x64", True)
    try:
        return np.asarray(jax.jit(fn)(*[np.asarray(a, np.float64) for a in args]))
    finally:
        jax.config.update("jax_enable_x64", False)


def cases(n, rng):
    spd, ill, gen = (matrices(k, n, rng) for k in ("spd", "ill", "gen"))
    b = rng.standard_normal((BATCH, n, 3)).astype(np.float32)
    w = rng.uniform(0.5, 1.5, (BATCH, n, n)).astype(np.float32)
    tril = lambda x: np.tril(np.asarray(x, np.float64))  # noqa: E731
    chol = jnp.linalg.cholesky
    for kind, a in (("spd", spd), ("ill", ill)):
        a64 = a.astype(np.float64)
        yield f"cholesky ({kind})", both(chol, a), np.linalg.cholesky(a64)
        l32 = np.linalg.cholesky(a64).astype(np.float32)
        solve_l = lambda l, b: lax.linalg.triangular_solve(l, b, left_side=True,  # noqa: E731
                                                           lower=True, transpose_a=True)
        ref = np.stack([sl.solve_triangular(tril(l), bb, lower=True, trans=1)
                        for l, bb in zip(l32, b)])
        yield f"triangular_solve ({kind} factor)", both(solve_l, l32, b), ref
        loss = lambda x: jnp.sum(chol(x) * w)  # noqa: E731
        yield f"d cholesky ({kind})", both_grad(loss, a), x64(jax.grad(loss), a)
    yield "solve (gen)", both(jnp.linalg.solve, gen, b), np.linalg.solve(gen.astype(np.float64), b)
    lu_fn = lambda a: lax.linalg.lu(a)[0]  # noqa: E731
    ref = np.stack([sl.lu_factor(a.astype(np.float64))[0] for a in gen])
    yield "lu (gen)", both(lu_fn, gen), ref
    q64, r64 = np.linalg.qr(gen.astype(np.float64))  # LAPACK's signs, as rlxjax's
    yield "qr: q (gen)", both(lambda a: jnp.linalg.qr(a)[0], gen), q64
    yield "qr: r (gen)", both(lambda a: jnp.linalg.qr(a)[1], gen), r64
    svals = lambda a: jnp.linalg.svd(a, compute_uv=False)  # noqa: E731
    yield "svd: s (gen)", both(svals, gen), np.linalg.svd(gen.astype(np.float64),
                                                          compute_uv=False)
    loss = lambda a: jnp.sum(svals(a) * w[:, 0])  # noqa: E731
    yield "d svd: s (gen)", both_grad(loss, gen), x64(jax.grad(loss), gen)
    d = [rng.standard_normal((BATCH, n)).astype(np.float32) for _ in range(3)]
    d[0][:, 0] = d[2][:, -1] = 0
    dense = np.stack([np.diag(d[1][i].astype(np.float64)) + np.diag(d[0][i, 1:], -1)
                      + np.diag(d[2][i, :-1], 1) for i in range(BATCH)])
    yield "tridiagonal_solve (gen)", both(lax.linalg.tridiagonal_solve, *d, b), \
        np.linalg.solve(dense, b)


def main():
    rng = np.random.default_rng(0)
    rows = {}
    for n in SIZES:
        for name, (ours, theirs), ref in cases(n, rng):
            rows.setdefault(name, {})[n] = (err(ours, ref), err(theirs, ref))
    print("| function | " + " | ".join(f"n = {n}: rlxjax / JAX" for n in SIZES) + " |")
    print("|---|" + "---|" * len(SIZES))
    for name, by_n in rows.items():
        print(f"| {name} | " + " | ".join(f"{a:.1e} / {b:.1e}" for a, b in
                                         (by_n[n] for n in SIZES)) + " |")


if __name__ == "__main__":
    main()
