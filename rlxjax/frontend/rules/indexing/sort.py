"""Frontend rules: sort (any number of lexicographic keys, jnp.lexsort) and top_k, as
exact O(n^2) rank computations."""
from __future__ import annotations

import numpy as np

from ....ir import DType, constant_value
from ...registry import rule
from .common import iota, with_batch_iotas


def _lt(ctx, a, b, a_neg0=None, b_neg0=None):
    """a < b in lax.sort's order: NaNs last and equal to each other, -0 == +0; with the
    -0 flags of a and b (``_neg_zero``), top_k's order, where -0 < +0."""
    lt = ctx.add("lt", a, b)
    if not a.dtype.is_float:
        return lt
    a_nan, b_nan = ctx.add("ne", a, a), ctx.add("ne", b, b)
    lt = ctx.add("or", lt, ctx.add("and", b_nan, ctx.add("not", a_nan)))
    if a_neg0 is None:
        return lt
    zero = ctx.constant(np.zeros((), a.dtype.np))
    b_pos0 = ctx.add("and", ctx.add("eq", b, zero), ctx.add("not", b_neg0))
    return ctx.add("or", lt, ctx.add("and", a_neg0, b_pos0))


def _neg_zero(ctx, x):
    """x is -0.0: zero, with a negative reciprocal (-inf)."""
    zero, one = (ctx.constant(np.asarray(v, x.dtype.np)) for v in (0, 1))
    return ctx.add("and", ctx.add("eq", x, zero), ctx.add("lt", ctx.add("div", one, x), zero))


def _ranks(ctx, keys, descending, signed_zeros=False):
    """Stable rank of every element along the last axis, ordered lexicographically by
    ``keys`` (one tensor, or a list: first key first). O(n^2) comparisons: exact,
    deterministic and tie-stable as JAX, which MIL's argsort/topk do not promise.
    ``signed_zeros``: -0 < +0 (top_k's total order; lax.sort treats them as equal)."""
    keys = keys if isinstance(keys, (list, tuple)) else [keys]
    keys = [ctx.add("convert", k, dtype=DType.i32) if k.dtype == DType.bool else k
            for k in keys]
    s, n = tuple(keys[0].shape[:-1]), keys[0].shape[-1]
    j_lt_i = i_lt_j = None
    for k in reversed(keys):  # lt = lt_1 or (eq_1 and (lt_2 or (eq_2 and ...)))
        xi = ctx.reshape(k, s + (n, 1))
        xj = ctx.reshape(k, s + (1, n))
        zi = zj = None
        if signed_zeros and k.dtype.is_float:
            z = _neg_zero(ctx, k)
            zi, zj = ctx.reshape(z, s + (n, 1)), ctx.reshape(z, s + (1, n))
        a, b = _lt(ctx, xj, xi, zj, zi), _lt(ctx, xi, xj, zi, zj)  # x_j before / after x_i
        if j_lt_i is not None:
            tie = ctx.add("not", ctx.add("or", a, b))
            a = ctx.add("or", a, ctx.add("and", tie, j_lt_i))
            b = ctx.add("or", b, ctx.add("and", tie, i_lt_j))
        j_lt_i, i_lt_j = a, b
    if descending:
        j_lt_i, i_lt_j = i_lt_j, j_lt_i
    before = ctx.constant(np.tril(np.ones((n, n), bool), -1))  # j < i
    tie_before = ctx.add("and", before, ctx.add("not", i_lt_j))
    count = ctx.add("or", j_lt_i, tie_before)
    return ctx.add("reduce_sum", ctx.add("convert", count, dtype=DType.i32),
                   axes=(len(s) + 1,))


def _perm(ctx, ranks, m):
    """perm[..., r] = the i with ranks[..., i] == r, for r < m."""
    s, n = tuple(ranks.shape[:-1]), ranks.shape[-1]
    r = ctx.reshape(ranks, s + (1, n))
    hit = ctx.add("eq", r, ctx.constant(np.arange(m, dtype=np.int32).reshape(m, 1)))
    which = ctx.add("mul", ctx.add("convert", hit, dtype=DType.i32),
                    ctx.constant(np.arange(n, dtype=np.int32)))
    return ctx.add("reduce_sum", which, axes=(len(s) + 1,))


def _take_last(ctx, x, perm):
    """x[..., perm[..., r]] along the last axis (a gather; its gradient a scatter-add)."""
    s = tuple(perm.shape[:-1])
    idx = ctx.reshape(perm, tuple(perm.shape) + (1,))
    full = with_batch_iotas(ctx, idx, tuple(range(len(s))))
    return ctx.add("gather_nd", x, full)


def _is_iota(v, axis) -> bool:
    c = constant_value(v)
    return c is not None and c.dtype == np.int32 and np.array_equal(c, iota(c.shape, axis))


def _to_last(ctx, x, axis):
    perm = [d for d in range(x.type.rank) if d != axis] + [axis]
    return ctx.transpose(x, perm), tuple(int(i) for i in np.argsort(perm))


@rule("sort")
def _sort(ctx, eqn, *operands):
    """Lexicographic over the first ``num_keys`` operands (jnp.lexsort), stable; the other
    operands are carried along by the same permutation."""
    p = eqn.params
    axis, nk = int(p["dimension"]), int(p["num_keys"])
    key = operands[0]
    if key.type.rank == 0 or key.shape[axis] <= 1:
        return list(operands)
    keys = [_to_last(ctx, k, axis) for k in operands[:nk]]
    back = keys[0][1]
    perm = _perm(ctx, _ranks(ctx, [k for k, _ in keys], descending=False), key.shape[axis])
    outs = []
    for op in operands:
        if _is_iota(op, axis):  # argsort's index operand: the permutation itself
            outs.append(ctx.transpose(perm, back))
            continue
        o_last, _ = _to_last(ctx, op, axis)
        outs.append(ctx.transpose(_take_last(ctx, o_last, perm), back))
    return outs


@rule("top_k")
def _top_k(ctx, eqn, x):
    p = eqn.params
    k = int(p["k"])
    axis = int(p.get("axis", x.type.rank - 1)) % x.type.rank
    x_last, back = _to_last(ctx, x, axis)
    # XLA's top_k ranks by the total order: -0 < +0, NaN above +inf. The sign of a NaN
    # (XLA: -NaN below -inf) is invisible to Core ML, which has no bit cast: every NaN
    # ranks as +NaN (as np.nan, jnp.nan and ARM's arithmetic NaNs are).
    perm = _perm(ctx, _ranks(ctx, x_last, descending=True, signed_zeros=True), k)
    values = _take_last(ctx, x_last, perm)
    return [ctx.transpose(values, back), ctx.transpose(perm, back)]


@rule("approx_top_k")
def _approx_top_k(ctx, eqn, x):
    """lax.approx_max_k / approx_min_k. Off TPU, XLA computes them exactly (a sort and a
    slice), and an exact answer is valid anywhere: the exact top (or bottom, is_max_k=False)
    entries, as many as JAX's output shape has (k, or more without aggregate_to_topk), in
    top_k's order; recall_target and reduction_input_size_override only tune TPUs."""
    p = eqn.params
    axis = int(p["reduction_dimension"]) % x.type.rank
    m = int(eqn.outvars[0].aval.shape[axis])
    x_last, back = _to_last(ctx, x, axis)
    ranks = _ranks(ctx, x_last, descending=bool(p["is_max_k"]), signed_zeros=True)
    perm = _perm(ctx, ranks, m)
    values = _take_last(ctx, x_last, perm)
    return [ctx.transpose(values, back), ctx.transpose(perm, back)]
