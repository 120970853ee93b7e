"""Linear algebra: cholesky, triangular_solve, lu, qr, singular values, tridiagonal_solve
and custom_linear_solve against jax.jit and jax.grad (reference backend, programs validated by coremltools'
loader), over sizes, batch dims and every flag; the documented accuracy against float64;
the failure semantics JAX has on the CPU (NaN results); clear errors for the
decompositions rlxjax does not lower (eigh, eig, singular vectors, pivoted qr)."""
from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax import lax

import rlxjax
from helpers import assert_tree_close, check_against_jax, examples
from rlxjax.errors import UnsupportedPrimitiveError

SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
BATCH = st.sampled_from([(), (2,), (2, 1)])


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _spd(rng, n, batch=()):
    """A A^T + n I: symmetric positive definite, condition number a few units."""
    a = rng.standard_normal(batch + (n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(np.float32)


def _weights(rng, f, *args):
    outs = jax.tree_util.tree_leaves(jax.eval_shape(f, *args))
    return [rng.uniform(0.5, 1.5, o.shape).astype(np.float32) for o in outs]


def _check_grad(f, *args, rng, argnums=None, rtol=1e-4, jit_of_jax_grad=True):
    """coreml_grad (rlxjax's own VJPs) and coreml_jit(jax.grad) (JAX's rules, translated)
    of a weighted sum of f's float outputs, against jax.grad."""
    weights = _weights(rng, f, *args)
    argnums = tuple(range(len(args))) if argnums is None else argnums

    def loss(*xs):
        outs = jax.tree_util.tree_leaves(f(*xs))
        return sum(jnp.sum(o * w) for o, w in zip(outs, weights) if o.dtype == jnp.float32)

    want = jax.jit(jax.grad(loss, argnums=argnums))(*args)
    scale = max(float(np.max(np.abs(w))) for w in want)
    tol = dict(rtol=rtol, atol=rtol * max(1.0, scale))
    assert_tree_close(rlxjax.coreml_grad(loss, argnums=argnums, backend="reference")(*args),
                      want, **tol)
    if jit_of_jax_grad:
        assert_tree_close(rlxjax.coreml_jit(jax.grad(loss, argnums=argnums),
                                            backend="reference")(*args), want, **tol)


# -- cholesky ---------------------------------------------------------------------------------
@settings(max_examples=3, **SETTINGS)
@given(n=st.integers(1, 6), batch=BATCH)
def test_cholesky_matches_jax(n, batch):
    rng = _rng("chol", n, batch)
    a = _spd(rng, n, batch)
    # the primitive itself: its upper triangle is the input's, as on XLA:CPU
    check_against_jax(lambda x: lax.linalg.cholesky_p.bind(x), a, rtol=1e-5, atol=1e-5)
    _check_grad(lambda x: lax.linalg.cholesky_p.bind(x), a, rng=rng)


def test_jnp_cholesky_matches_jax():
    rng = _rng("jnp.chol")
    a = _spd(rng, 4, (2,))
    check_against_jax(jnp.linalg.cholesky, a, rtol=1e-5, atol=1e-5)
    _check_grad(jnp.linalg.cholesky, a, rng=rng)


def test_cholesky_of_a_matrix_that_is_not_positive_definite_is_nan_as_in_jax():
    a = np.stack([2 * np.eye(3), [[1, 2, 0], [2, 1, 0], [0, 0, 1]],
                  [[1, 0, 0], [0, np.nan, 0], [0, 0, 1]]]).astype(np.float32)
    f = lambda x: lax.linalg.cholesky_p.bind(x)  # noqa: E731
    got = rlxjax.coreml_jit(f, backend="reference")(a)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(jax.jit(f)(a)))
    assert np.all(np.isnan(got[1])) and not np.any(np.isnan(got[0]))


# -- triangular_solve -------------------------------------------------------------------------
def _check_triangular_solve(n, k, batch, left_side, lower, transpose_a, unit_diagonal):
    rng = _rng("tri", n, k, batch, left_side, lower, transpose_a, unit_diagonal)
    # the other triangle holds large values: a solve must not read them
    read = np.tril(np.ones((n, n), bool)) if lower else np.triu(np.ones((n, n), bool))
    a = np.where(read, rng.standard_normal(batch + (n, n)) * 0.5 + 2 * np.eye(n), 1e3)
    a = a.astype(np.float32)
    b = rng.standard_normal(batch + ((n, k) if left_side else (k, n))).astype(np.float32)

    def f(a, b):
        return lax.linalg.triangular_solve(a, b, left_side=left_side, lower=lower,
                                           transpose_a=transpose_a,
                                           unit_diagonal=unit_diagonal)

    check_against_jax(f, a, b, rtol=1e-5, atol=1e-5)
    _check_grad(f, a, b, rng=rng)


@settings(max_examples=examples(6), **SETTINGS)
@given(n=st.integers(1, 5), k=st.integers(1, 4), batch=BATCH, left_side=st.booleans(),
       lower=st.booleans(), transpose_a=st.booleans(), unit_diagonal=st.booleans())
def test_triangular_solve_matches_jax(n, k, batch, left_side, lower, transpose_a,
                                      unit_diagonal):
    _check_triangular_solve(n, k, batch, left_side, lower, transpose_a, unit_diagonal)


@pytest.mark.slow
@pytest.mark.parametrize("left_side", [True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("transpose_a", [True, False])
@pytest.mark.parametrize("unit_diagonal", [True, False])
@pytest.mark.parametrize("n, k", [(4, 2), (3, 5)])  # both orders of JAX's gradient products
def test_triangular_solve_every_flag_combination(left_side, lower, transpose_a, unit_diagonal,
                                                 n, k):
    _check_triangular_solve(n, k, (2,), left_side, lower, transpose_a, unit_diagonal)


def test_triangular_solve_with_a_zero_pivot_divides_by_zero_as_lapack():
    a = np.array([[1, 0], [1, 0]], np.float32)
    f = lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True, lower=True)  # noqa: E731
    check_against_jax(f, a, np.ones((2, 1), np.float32))


# -- lu and what is built on it -----------------------------------------------------------------
@settings(max_examples=examples(3), **SETTINGS)
@given(m=st.integers(1, 5), n=st.integers(1, 5), batch=BATCH)
def test_lu_matches_jax(m, n, batch):
    rng = _rng("lu", m, n, batch)
    a = rng.standard_normal(batch + (m, n)).astype(np.float32)
    check_against_jax(lax.linalg.lu, a, rtol=1e-5, atol=1e-5)  # pivots, permutation exact
    _check_grad(lambda x: lax.linalg.lu(x)[0], a, rng=rng)


def test_lu_of_a_singular_matrix_matches_jax():
    a = np.array([[0, 0, 1], [0, 0, 2], [1, 2, 3]], np.float32)
    check_against_jax(lax.linalg.lu, a)


def _lu_first_nan(a):
    """Partial pivoting in float32 numpy, the pivot of column j the first NaN from row j
    down, else the first row of largest magnitude; multipliers by the reciprocal of the
    pivot as getrf (the pivots here are neither zero nor tiny) -> (lu, pivots, perm)."""
    x, m = a.astype(np.float32).copy(), a.shape[0]
    perm, pivots = np.arange(m), []
    for j in range(min(a.shape)):
        col = np.abs(x[j:, j])
        nan = np.flatnonzero(np.isnan(col))
        p = j + int(nan[0] if nan.size else np.argmax(col))
        pivots.append(p)
        x[[j, p]], perm[[j, p]] = x[[p, j]], perm[[p, j]]
        x[j + 1:, j] *= np.float32(1) / x[j, j]
        x[j + 1:, j + 1:] -= np.outer(x[j + 1:, j], x[j, j + 1:])
    return x, np.asarray(pivots, np.int32), perm.astype(np.int32)


@pytest.mark.parametrize("fmt", ["mlpackage", "aimodel"])
def test_lu_of_a_column_holding_a_nan_pivots_at_the_first_nan(fmt):
    """JAX's pivot on the CPU where a column holds a NaN is whatever OpenBLAS's vectorised
    isamax kernel finds (jax 0.10.2: [1, NaN, 4] pivots at row 0, [1, 4, NaN, 5] at row 2,
    LAPACK's reference isamax would take rows 2 and 1), so there is no rule of JAX's to
    match: rlxjax pivots at the first NaN (argmax's rule), on both formats. The factors
    are NaN where getrf's are, and also where the one-hot rank-1 update multiplies a zero
    by a NaN (entries getrf leaves alone: rows above the step, columns left of it)."""
    if fmt == "aimodel":
        pytest.importorskip("coreai")
    a = np.array([[2, 1, 0, 1], [4, 3, 1, 0], [1, 5, 2, 1], [np.nan, 1, 0, 2],
                  [3, 0, 1, 1]], np.float32)[:, :3]
    a = np.stack([a, np.where(np.isnan(a), 1, a), a[[2, 0, 1, 3, 4]]])
    got = rlxjax.coreml_jit(lax.linalg.lu, format=fmt,
                            **({"backend": "reference"} if fmt == "mlpackage" else {}))(a)
    for k in range(3):
        lu, pivots, perm = _lu_first_nan(a[k])
        np.testing.assert_array_equal(got[1][k], pivots)
        np.testing.assert_array_equal(got[2][k], perm)
        nan = np.isnan(np.asarray(got[0][k]))
        assert nan[np.isnan(lu)].all()
        np.testing.assert_allclose(np.asarray(got[0][k])[~nan], lu[~nan], rtol=1e-6, atol=1e-6)
    want = jax.jit(lax.linalg.lu)(a)
    assert not np.isnan(np.asarray(got[0][1])).any()  # no NaN: JAX's factors and pivots
    np.testing.assert_array_equal(got[1][1], want[1][1])
    np.testing.assert_allclose(got[0][1], want[0][1], rtol=1e-5, atol=1e-5)


@settings(max_examples=2, **SETTINGS)
@given(n=st.integers(1, 6), k=st.sampled_from([None, 1, 3]))
def test_solve_inv_slogdet_match_jax(n, k):
    """jnp.linalg.solve is lu + custom_linear_solve: its gradient is the implicit one."""
    rng = _rng("solve", n, k)
    a = (rng.standard_normal((n, n)) + n * np.eye(n)).astype(np.float32)
    b = rng.standard_normal((n,) if k is None else (n, k)).astype(np.float32)
    check_against_jax(jnp.linalg.solve, a, b, rtol=1e-5, atol=1e-5)
    _check_grad(jnp.linalg.solve, a, b, rng=rng)
    check_against_jax(jnp.linalg.inv, a, rtol=1e-5, atol=1e-5)
    check_against_jax(lambda x: jnp.linalg.slogdet(x)[1], a, rtol=1e-5, atol=1e-5)
    _check_grad(lambda x: jnp.linalg.slogdet(x)[1], a, rng=rng)


def test_lu_factor_lu_solve_and_pivots_to_permutation_match_jax():
    rng = _rng("lu_solve")
    a, b = rng.standard_normal((4, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    f = lambda a, b: jsl.lu_solve(jsl.lu_factor(a), b)  # noqa: E731
    check_against_jax(f, a, b, rtol=1e-5, atol=1e-5)
    _check_grad(f, a, b, rng=rng)
    pivots = np.array([[2, 2, 3], [0, 4, 2]], np.int32)
    check_against_jax(lambda p: lax.linalg.lu_pivots_to_permutation(p, 5), pivots)


# -- qr -----------------------------------------------------------------------------------------
@settings(max_examples=3, **SETTINGS)
@given(m=st.integers(1, 5), n=st.integers(1, 5), batch=BATCH, full=st.booleans())
def test_qr_matches_jax(m, n, batch, full):
    """Householder QR with LAPACK's sign convention (R[j, j] = −sign(a[j, j])·norm), so Q
    and R themselves agree with JAX's; the gradient is JAX's rule (wide and full cases)."""
    rng = _rng("qr", m, n, batch, full)
    a = rng.standard_normal(batch + (m, n)).astype(np.float32)
    f = lambda x: lax.linalg.qr(x, full_matrices=full)  # noqa: E731
    check_against_jax(f, a, rtol=1e-5, atol=1e-5)
    _check_grad(f, a, rng=rng)


def test_qr_of_a_matrix_with_a_zero_column_matches_jax():
    a = np.array([[0, 1, 2], [0, 3, 4], [0, 5, 7]], np.float32)  # tau = 0 for the first step
    check_against_jax(jnp.linalg.qr, a, rtol=1e-5, atol=1e-5)


# -- svd (singular values) ------------------------------------------------------------------------
@settings(max_examples=3, **SETTINGS)
@given(m=st.integers(1, 7), n=st.integers(1, 7), batch=BATCH)
def test_singular_values_match_jax(m, n, batch):
    rng = _rng("svd", m, n, batch)
    a = rng.standard_normal(batch + (m, n)).astype(np.float32)
    f = lambda x: jnp.linalg.svd(x, compute_uv=False)  # noqa: E731
    check_against_jax(f, a, rtol=1e-5, atol=1e-5)
    # (JAX's own rule for it needs the singular vectors, which rlxjax does not compute)
    _check_grad(f, a, rng=rng, jit_of_jax_grad=False)


def test_norm_2_cond_and_rank_deficient_singular_values_match_jax():
    rng = _rng("svd2")
    a = rng.standard_normal((5, 4)).astype(np.float32)
    check_against_jax(lambda x: jnp.linalg.norm(x, 2), a, rtol=1e-5, atol=1e-5)
    check_against_jax(jnp.linalg.cond, a[:4], rtol=1e-4, atol=1e-5)
    low_rank = np.outer(np.arange(1, 5), np.arange(1, 4)).astype(np.float32)  # rank 1
    check_against_jax(lambda x: jnp.linalg.svd(x, compute_uv=False), low_rank, atol=2e-5)


# -- tridiagonal_solve --------------------------------------------------------------------------
@settings(max_examples=3, **SETTINGS)
@given(n=st.integers(1, 7), k=st.integers(1, 3), batch=st.sampled_from([(), (2,)]))
def test_tridiagonal_solve_matches_jax(n, k, batch):
    """Random diagonals (no dominance): the row exchanges of LAPACK's gtsv happen."""
    rng = _rng("tridiag", n, k, batch)
    dl, d, du = (rng.standard_normal(batch + (n,)).astype(np.float32) for _ in range(3))
    dl[..., 0] = 0
    du[..., -1] = 0
    b = rng.standard_normal(batch + (n, k)).astype(np.float32)
    check_against_jax(lax.linalg.tridiagonal_solve, dl, d, du, b, rtol=1e-4, atol=1e-5)
    _check_grad(lax.linalg.tridiagonal_solve, dl, d, du, b, rng=rng, rtol=1e-3)


def test_tridiagonal_solve_of_a_singular_system_is_nan_as_in_jax():
    dl, du = np.zeros(3, np.float32), np.zeros(3, np.float32)
    check_against_jax(lax.linalg.tridiagonal_solve, dl, np.array([1, 0, 1], np.float32), du,
                      np.ones((3, 1), np.float32))


# -- custom_linear_solve ------------------------------------------------------------------------
def test_custom_linear_solve_gradient_is_the_implicit_one():
    """A Gaussian-process style solve: cholesky inside ``solve``, gradient through
    ``transpose_solve`` (symmetric), w.r.t. both the operator and the right-hand side."""
    rng = _rng("cls")
    a, b = _spd(rng, 5), rng.standard_normal(5).astype(np.float32)

    def f(a, b):
        def solve(matvec, x):  # a direct solve the gradient must not differentiate
            chol = jnp.linalg.cholesky(lax.stop_gradient(a))
            return jsl.cho_solve((chol, True), x)

        return lax.custom_linear_solve(lambda x: a @ x, b, solve, symmetric=True)

    check_against_jax(f, a, b, rtol=1e-5, atol=1e-5)
    _check_grad(f, a, b, rng=rng)


def test_conjugate_gradient_solve_and_its_gradient():
    """jax.scipy.sparse.linalg.cg: a while_loop inside custom_linear_solve's solve."""
    from jax.scipy.sparse.linalg import cg

    rng = _rng("cg")
    a, b = _spd(rng, 4), rng.standard_normal(4).astype(np.float32)
    f = lambda a, b: cg(lambda x: a @ x, b, tol=1e-6, maxiter=40)[0]  # noqa: E731
    check_against_jax(f, a, b, rtol=1e-4, atol=1e-5)
    _check_grad(f, a, b, rng=rng, rtol=1e-3)


def test_gaussian_process_negative_log_likelihood_and_gradient():
    rng = _rng("gp")
    n = 24
    x, y = rng.standard_normal((n, 2)).astype(np.float32), rng.standard_normal(n).astype(np.float32)

    def nll(log_ls, x, y):
        d2 = jnp.sum((x[:, None] - x[None]) ** 2, -1)
        k = jnp.exp(-0.5 * d2 / jnp.exp(2 * log_ls)) + 0.1 * jnp.eye(n)
        chol = jnp.linalg.cholesky(k)
        alpha = jsl.cho_solve((chol, True), y)
        return 0.5 * y @ alpha + jnp.sum(jnp.log(jnp.diag(chol)))

    args = (np.float32(0.2), x, y)
    check_against_jax(nll, *args, rtol=1e-5, atol=1e-5)
    _check_grad(nll, *args, rng=rng, argnums=(0, 1))


# -- accuracy against float64 (docs/numerics.md) ------------------------------------------------
@pytest.mark.parametrize("n", [8, 32])
def test_accuracy_against_float64_is_as_documented(n):
    """Normwise errors against numpy float64 on SPD matrices A Aᵀ + n I: the bound of
    docs/numerics.md ("Linear algebra"), 8 · n · eps."""
    rng = _rng("f64", n)
    a = _spd(rng, n, (2,))
    b = rng.standard_normal((2, n, 3)).astype(np.float32)
    bound = 8 * n * np.finfo(np.float32).eps

    def err(got, want):
        return np.max(np.abs(got - want)) / np.max(np.abs(want))

    a64 = a.astype(np.float64)
    chol = rlxjax.coreml_jit(jnp.linalg.cholesky, backend="reference")(a)
    assert err(chol, np.linalg.cholesky(a64)) < bound
    l64 = np.linalg.cholesky(a64)
    tri = rlxjax.coreml_jit(lambda l, b: lax.linalg.triangular_solve(
        l, b, left_side=True, lower=True), backend="reference")(np.tril(chol), b)
    assert err(tri, np.linalg.solve(l64, b)) < bound * 10  # cond(L) ~ sqrt(cond(A))
    x = rlxjax.coreml_jit(jnp.linalg.solve, backend="reference")(a, b)
    assert err(x, np.linalg.solve(a64, b)) < bound * 10


# -- folding, zero sizes, errors ----------------------------------------------------------------
def test_constant_inputs_fold_to_what_the_program_computes():
    rng = _rng("fold")
    a, b = _spd(rng, 4), rng.standard_normal((4, 2)).astype(np.float32)
    dl, d, du = (rng.standard_normal(4).astype(np.float32) for _ in range(3))

    def f(a, b, dl, d, du):
        l = lax.linalg.cholesky_p.bind(a)
        x = lax.linalg.triangular_solve(l, b, left_side=True, lower=True, transpose_a=True)
        return l, x, lax.linalg.lu(a + 1), lax.linalg.tridiagonal_solve(dl, d, du, b)

    args = (a, b, dl, d, du)
    folded = rlxjax.coreml_jit(lambda: f(*map(jnp.asarray, args)), backend="reference")
    compiled = folded.lower().compile()
    assert {n.op for n in compiled.graph.nodes} == {"constant"}
    unfolded = rlxjax.coreml_jit(f, backend="reference")(*args)
    for g, w in zip(jax.tree_util.tree_leaves(compiled()), jax.tree_util.tree_leaves(unfolded)):
        np.testing.assert_array_equal(g, w)


def test_zero_size_operands_inside_a_program_fold_away():
    def f(a, b):
        e = jnp.linalg.cholesky(a[:0, :0])
        x = lax.linalg.triangular_solve(a, b[:, :0], left_side=True, lower=True)
        return a.sum() + e.sum() + x.sum()

    check_against_jax(f, _spd(_rng("zero"), 3), np.ones((3, 2), np.float32))


@pytest.mark.parametrize("f, shapes", [
    (lambda a: lax.linalg.cholesky_p.bind(a), [(4, 0, 0)]),
    (lax.linalg.lu, [(5, 0)]),
    (lambda a: lax.linalg.qr(a, full_matrices=True), [(5, 0)]),
    (lambda a: jnp.linalg.svd(a, compute_uv=False), [(0, 3)]),
    (jnp.linalg.solve, [(0, 0), (0,)]),
])
def test_zero_size_arguments_match_jax(f, shapes):
    check_against_jax(f, *[np.zeros(s, np.float32) for s in shapes])


@pytest.mark.parametrize("name, fn", [
    ("eigh", lambda a: jnp.linalg.eigh(a)[0]),
    ("svd", lambda a: jnp.linalg.svd(a)[0]),
    ("eig", lambda a: jnp.abs(jnp.linalg.eigvals(a))),
])
def test_decompositions_rlxjax_does_not_lower_say_so_with_the_users_line(name, fn):
    a = _spd(_rng(name), 3)
    with pytest.raises(UnsupportedPrimitiveError) as e:
        rlxjax.coreml_jit(lambda a: fn(a) * 2, backend="reference")(a)
    msg = str(e.value)
    assert e.value.primitive == name and f"'{name}'" in msg
    assert "test_linalg.py" in msg and "outside the compiled function" in msg


def test_pivoted_qr_says_so():
    with pytest.raises(UnsupportedPrimitiveError, match=r"'qr' at .*test_linalg.py.*pivoting"):
        rlxjax.coreml_jit(lambda a: lax.linalg.qr(a, pivoting=True)[1],
                          backend="reference")(np.eye(3, dtype=np.float32))
