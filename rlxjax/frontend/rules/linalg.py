"""Frontend rules: linear algebra (jax.lax.linalg and lax.custom_linear_solve).

cholesky, triangular_solve, lu, qr and tridiagonal_solve become the linalg RLX ops
(ir/linalg.py). ``custom_linear_solve`` runs its ``solve`` jaxpr forward, as JAX's own
implementation does, inside a ``custom_vjp`` node whose rule is the primitive itself, so
its gradient is JAX's: implicit differentiation through ``transpose_solve`` (and through
``matvec`` for the operator's parameters), built by JAX when a gradient is asked for.
``qr`` is wrapped the same way: its gradient is JAX's rule (thin, wide and full-matrices
cases alike).

Singular values are computed (``svd`` with ``compute_uv=False``); what rlxjax cannot give
as JAX does raises ``UnsupportedPrimitiveError`` saying why, with the user's line: eigen-
and singular vectors (unique only up to sign: LAPACK's choice cannot be reproduced), the
non-symmetric eigenproblems, pivoted QR.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir import Graph
from ..registry import rule
from .control import _inline, _is_float, _types


def _real(ctx, eqn, *values):
    for v in values:
        if not v.dtype.is_float:
            raise ctx.unsupported(f"operand of type {v.type} (rlxjax lowers real float "
                                  "matrices only)")


@rule("cholesky")
def _cholesky(ctx, eqn, a):
    _real(ctx, eqn, a)
    return ctx.add("cholesky", a)


@rule("triangular_solve")
def _triangular_solve(ctx, eqn, a, b):
    _real(ctx, eqn, a, b)
    p = eqn.params  # conjugate_a changes nothing for real matrices
    return ctx.add("triangular_solve", a, b, left_side=bool(p["left_side"]),
                   lower=bool(p["lower"]), transpose_a=bool(p["transpose_a"]),
                   unit_diagonal=bool(p["unit_diagonal"]))


@rule("lu")
def _lu(ctx, eqn, a):
    _real(ctx, eqn, a)
    return ctx.add_multi("lu", [a])


@rule("tridiagonal_solve")
def _tridiagonal_solve(ctx, eqn, dl, d, du, b):
    _real(ctx, eqn, dl, d, du, b)
    if eqn.params.get("perturb_singular"):
        raise ctx.unsupported("perturb_singular=True (LAPACK's perturbed gtsv); rlxjax "
                              "solves with perturb_singular=False only")
    return ctx.add("tridiagonal_solve", dl, d, du, b)


@rule("lu_pivots_to_permutation")
def _lu_pivots_to_permutation(ctx, eqn, pivots):
    """The row swaps applied in order to iota, by the loop XLA:CPU runs (JAX lowers the
    primitive with its generic fori_loop there), written with public JAX and inlined."""
    size = int(eqn.params["permutation_size"])
    k = pivots.shape[-1]

    def one(swaps):
        def body(i, perm):
            j = swaps[i]
            x, y = perm[i], perm[j]
            return perm.at[i].set(y).at[j].set(x)

        return lax.fori_loop(0, k, body, jnp.arange(size, dtype=jnp.int32))

    fn = one
    for _ in range(pivots.type.rank - 1):
        fn = jax.vmap(fn)
    closed = jax.make_jaxpr(fn)(jax.ShapeDtypeStruct(tuple(pivots.shape), np.int32))
    return _inline(ctx, closed, [pivots])


def _with_jax_rule(ctx, eqn, args, forward):
    """``forward(ctx, args)`` -> outputs, as a ``custom_vjp`` node whose rule is the
    equation's primitive itself: differentiating it applies JAX's own derivative rule
    (custom_rules.py builds the backward region from it on demand)."""
    floats = [v.dtype.is_float for v in args]
    outs_float = [_is_float(v.aval.dtype) for v in eqn.outvars]
    if ctx.custom_rules is None or not any(floats) or not any(outs_float):
        return forward(ctx, args)
    g = Graph("primal")
    sub = type(ctx)(g, ctx.custom_rules)
    sub.source, sub.primitive = ctx.source, ctx.primitive
    ins = [g.add_input(f"in{i}", t) for i, t in enumerate(_types(args))]
    for i, v in enumerate(forward(sub, ins)):
        g.add_output(f"out{i}", v)
    rule_id = ctx.custom_rules.add(ctx.source, eqn, _types(args), floats, outs_float)
    return ctx.add_multi("custom_vjp", args, primal=g, rule=rule_id, name=eqn.primitive.name)


@rule("custom_linear_solve")
def _custom_linear_solve(ctx, eqn, *args):
    p = eqn.params
    lengths, solve = p["const_lengths"], p["jaxprs"].solve
    start = lengths.matvec + lengths.vecmat
    n_consts = sum(lengths)

    def forward(sub, xs):  # JAX's impl: solve(*solve_consts, *b)
        return _inline(sub, solve, list(xs[start:start + lengths.solve]) + list(xs[n_consts:]))

    return _with_jax_rule(ctx, eqn, args, forward)


@rule("qr")
def _qr(ctx, eqn, a):
    _real(ctx, eqn, a)
    p = eqn.params
    if p.get("pivoting"):
        raise ctx.unsupported("pivoting=True (column-pivoted QR, LAPACK geqp3); rlxjax "
                              "lowers the unpivoted QR only")
    full = bool(p["full_matrices"])
    return _with_jax_rule(ctx, eqn, [a],
                          lambda sub, xs: sub.add_multi("qr", xs, full_matrices=full))


@rule("svd")
def _svd(ctx, eqn, a):
    _real(ctx, eqn, a)
    p = eqn.params
    if p.get("compute_uv", True):
        raise ctx.unsupported(
            "singular vectors (compute_uv=True): they are unique only up to sign, and the "
            "choice LAPACK's algorithm makes, which JAX returns, cannot be reproduced by "
            "rlxjax's (one-sided Jacobi); rlxjax computes the singular values only "
            "(jnp.linalg.svd(a, compute_uv=False), jnp.linalg.norm(a, 2), jnp.linalg.cond, "
            "matrix_rank). " + _OUTSIDE)
    k = min(a.shape[-2:])
    sub = p.get("subset_by_index")
    if sub is not None and tuple(sub) != (0, k):
        raise ctx.unsupported(f"subset_by_index={tuple(sub)} (rlxjax computes all {k})")
    return ctx.add_multi("svd", [a])[0]


_OUTSIDE = ("Compute it outside the compiled function (e.g. with numpy or jax on the CPU) "
            "and pass the result in")
_NO_VECTORS = ("Core ML has no {what}, and rlxjax does not lower one: the {vectors} are "
               "unique only up to sign (and rotation within repeated values), and the "
               "choice LAPACK's algorithm makes, which JAX returns, cannot be reproduced by "
               "another algorithm. " + _OUTSIDE)
_NO_EIGEN = ("Core ML has no {what}, and rlxjax does not lower one (a non-symmetric "
             "eigenvalue problem: Hessenberg reduction and shifted QR iterations). " + _OUTSIDE)
_UNSUPPORTED = {
    "eigh": _NO_VECTORS.format(what="symmetric eigendecomposition (eigh)",
                               vectors="eigenvectors"),
    "eig": _NO_EIGEN.format(what="eigendecomposition (eig)"),
    "schur": _NO_EIGEN.format(what="Schur decomposition"),
    "geqrf": "rlxjax lowers the whole QR (lax.linalg.qr), not its LAPACK pieces (geqrf)",
    "geqp3": "column-pivoted Householder QR (geqp3) is not lowered; use unpivoted lax.linalg.qr",
    "householder_product": ("rlxjax lowers the whole QR (lax.linalg.qr), not its LAPACK "
                            "pieces (orgqr)"),
    "hessenberg": _NO_EIGEN.format(what="Hessenberg reduction"),
    "tridiagonal": _NO_VECTORS.format(what="tridiagonal reduction (sytrd)",
                                      vectors="Householder reflectors"),
}


def _refuse(detail):
    def fn(ctx, eqn, *args):
        raise ctx.unsupported(detail)

    return fn


for _name, _detail in _UNSUPPORTED.items():
    rule(_name)(_refuse(_detail))
