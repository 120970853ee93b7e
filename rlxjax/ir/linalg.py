"""The linalg family of RLX ops: dense factorizations and solves on the trailing two
dims (any leading dims are a batch), with the semantics of JAX's primitives on XLA:CPU
(LAPACK), so that programs agree with ``jax.jit`` on a CPU.

- ``cholesky`` [a]: the lower Cholesky factor ``L`` (``a = L Lᵀ``) in the lower triangle,
  read from ``a``'s lower triangle only; the strictly upper triangle of the result is
  ``a``'s own (LAPACK ``potrf`` works in place, and JAX's primitive returns that buffer;
  ``jnp.linalg.cholesky`` masks it). A batch element that is not positive definite (a
  pivot ``<= 0``) is all NaN, as JAX makes it; a NaN pivot is not a failure (the LAPACK
  JAX calls does not test for it) and propagates.
- ``triangular_solve`` [a, b]: ``op(a) x = b`` (``left_side``) or ``x op(a) = b``, with
  ``op(a) = aᵀ`` when ``transpose_a``; only the ``lower`` (or upper) triangle of ``a`` is
  read, and its diagonal is taken as ones when ``unit_diagonal``.
- ``lu`` [a] -> (lu, pivots, permutation): LU with partial pivoting of an ``m x n``
  matrix (LAPACK ``getrf``): ``lu`` holds unit-lower ``L`` below the diagonal and ``U`` on
  and above it, ``pivots[i]`` (k = min(m, n) of them) the row swapped with row i at step
  i, ``permutation`` the resulting row order (``a[permutation] = L U``).
- ``qr`` [a] -> (q, r): Householder QR (LAPACK ``geqrf`` then ``orgqr``: reflectors
  ``I − τ v vᵀ`` with ``v[j] = 1`` and ``R[j, j] = −sign(a[j, j])·‖a[j:, j]‖``);
  ``full_matrices``: q is m x m and r m x n, else m x k and k x n (k = min(m, n)).
- ``svd`` [a] -> (s, u, vt): the singular values in decreasing order (k = min(m, n) of
  them) by one-sided Jacobi, with the vectors of that computation, u [m, k] and vt [k, n]
  (their signs are the algorithm's: the frontend exposes only ``s``; u and vt serve the
  VJP, whose ``u diag(s̄) vt`` does not depend on them).
- ``tridiagonal_solve`` [dl, d, du, b]: ``A x = b`` for the tridiagonal ``A`` with sub-,
  main and super-diagonals ``dl`` (``dl[0]`` unused), ``d``, ``du`` (``du[-1]`` unused),
  by Gaussian elimination with partial pivoting (LAPACK ``gtsv``); a batch element whose
  matrix is singular is all NaN, as JAX makes it.
"""
from __future__ import annotations

import numpy as np

from .ops import _require, defop
from .schema import BOOL, Param
from .types import DType, TensorType

TRIANGULAR_SOLVE_PARAMS = {
    "left_side": Param(BOOL, doc="solve op(a) x = b (True) or x op(a) = b (False)"),
    "lower": Param(BOOL, doc="a is lower (True) or upper (False) triangular"),
    "transpose_a": Param(BOOL, doc="op(a) = aᵀ"),
    "unit_diagonal": Param(BOOL, doc="a's diagonal is taken as ones (not read)"),
}


def _float_matrix(t: TensorType, op: str) -> None:
    _require(t.dtype.is_float, f"{op} needs a float input, got {t}")
    _require(t.rank >= 2, f"{op} needs a matrix (rank >= 2), got {t}")


@defop("cholesky", "linalg", 1, params={})
def _cholesky(ts, p):
    (a,) = ts
    _float_matrix(a, "cholesky")
    _require(a.shape[-1] == a.shape[-2], f"cholesky needs square matrices, got {a}")
    return [a]


@defop("triangular_solve", "linalg", 2, params=TRIANGULAR_SOLVE_PARAMS)
def _triangular_solve(ts, p):
    a, b = ts
    _float_matrix(a, "triangular_solve")
    _float_matrix(b, "triangular_solve")
    _require(a.dtype == b.dtype, f"triangular_solve dtypes differ: {a} vs {b}")
    _require(a.shape[-1] == a.shape[-2], f"triangular_solve needs a square a, got {a}")
    _require(a.rank == b.rank and tuple(a.shape[:-2]) == tuple(b.shape[:-2]),
             f"triangular_solve: batch dims of {a} and {b} differ")
    common = b.shape[-2] if p["left_side"] else b.shape[-1]
    _require(common == a.shape[-1], f"triangular_solve: {a} does not fit {b} "
             f"(left_side={p['left_side']})")
    return [b]


@defop("lu", "linalg", 1, params={})
def _lu(ts, p):
    (a,) = ts
    _float_matrix(a, "lu")
    batch, (m, n) = tuple(a.shape[:-2]), tuple(a.shape[-2:])
    return [a, TensorType(batch + (min(m, n),), DType.i32), TensorType(batch + (m,), DType.i32)]


@defop("tridiagonal_solve", "linalg", 4, params={})
def _tridiagonal_solve(ts, p):
    dl, d, du, b = ts
    _float_matrix(b, "tridiagonal_solve")
    for name, t in (("dl", dl), ("d", d), ("du", du)):
        _require(t.dtype == b.dtype, f"tridiagonal_solve: {name} {t} vs b {b}")
        _require(tuple(t.shape) == tuple(b.shape[:-1]),
                 f"tridiagonal_solve: {name} {t} must have b's shape {b} without its last dim")
    return [b]


@defop("qr", "linalg", 1, params={"full_matrices": Param(BOOL)})
def _qr(ts, p):
    (a,) = ts
    _float_matrix(a, "qr")
    batch, (m, n) = tuple(a.shape[:-2]), tuple(a.shape[-2:])
    rows = m if p["full_matrices"] else min(m, n)
    return [a.with_shape(batch + (m, rows)), a.with_shape(batch + (rows, n))]


@defop("svd", "linalg", 1, params={})
def _svd(ts, p):
    (a,) = ts
    _float_matrix(a, "svd")
    batch, (m, n) = tuple(a.shape[:-2]), tuple(a.shape[-2:])
    k = min(m, n)
    return [a.with_shape(batch + (k,)), a.with_shape(batch + (m, k)), a.with_shape(batch + (k, n))]


#: the one-sided Jacobi SVD schedule every layer computes ``svd`` with (the decomposition,
#: transforms/legalize/linalg_svd.py, and constant folding, transforms/fold/linalg.py)
MAX_SWEEPS = 30


def round_robin(n: int) -> np.ndarray:
    """[rounds, n] int32: per round, the first n/2 entries paired with the last n/2
    (circle method, n even), every pair exactly once over n − 1 rounds."""
    players = list(range(n))
    rounds = []
    for _ in range(n - 1):
        half = n // 2
        top, bottom = players[:half], players[half:][::-1]
        rounds.append(top + bottom)
        players = [players[0]] + [players[-1]] + players[1:-1]
    return np.asarray(rounds, np.int32)
