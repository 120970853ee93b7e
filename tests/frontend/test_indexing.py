"""The indexing family: gather / scatter (take, x[idx], take_along_axis, embeddings,
x.at[...]), dynamic slices, cumulative reductions, sort / argsort / top_k, one_hot, split.

Forward: ``check_against_jax`` (compile, validate with coremltools' loader, run on the
reference backend, compare with jax.jit). Gradients: rlxjax's own backward pass
(``coreml_grad``) and JAX's AD jaxpr (``coreml_jit(jax.grad(...))``) against jax.grad.
Indices are drawn out of range on purpose (JAX's clip / fill / drop rules), and sort keys
from a small set so ties happen (JAX's stable order, its tie-split gradients).

Tolerances: FP32_TOL (rtol 1e-5, atol 1e-6) everywhere; integer outputs exactly.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

import rlxjax
from helpers import assert_tree_close, check_against_jax, examples, FP32_TOL
from rlxjax.errors import UnsupportedDTypeError, UnsupportedPrimitiveError
from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS

FEW = settings(max_examples=examples(6), deadline=None)
F32, I32 = np.float32, np.int32


def shape_st(min_dims=1, max_dims=3, max_side=4):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=max_side)


def values(data, shape, dtype=F32, levels=None):
    """Dyadic floats (exact sums), or few levels (ties) when ``levels`` is given."""
    if levels:
        el = st.sampled_from([float(v) for v in range(levels)])
    elif np.dtype(dtype) == np.bool_:
        el = st.booleans()
    elif np.dtype(dtype).kind == "i":
        el = st.integers(-20, 20)
    else:
        el = st.integers(-32, 32).map(lambda k: k / 8)
    return data.draw(hnp.arrays(dtype, shape, elements=el))


def indices(data, shape, n, oob=True):
    lo, hi = (-n - 2, n + 2) if oob else (0, n - 1)
    return data.draw(hnp.arrays(I32, shape, elements=st.integers(lo, hi)))


def weighted(f):
    """sum(f(...) * w) with a fixed dyadic weight per output shape."""

    def loss(*args):
        y = f(*args)
        rng = np.random.default_rng(abs(hash(tuple(np.shape(y)))) % (2 ** 32))
        return jnp.sum(y * (rng.integers(-8, 9, size=np.shape(y)) / 4).astype(np.float32))

    return loss


def check_grad(f, *args, argnums=0, jit_of_jax_grad=True, reference_args=None):
    """coreml_grad against jax.grad (taken at ``reference_args``, an input where ``f`` is
    the same function, when JAX's own gradient at ``args`` is wrong); coreml_jit of JAX's
    gradient program against JAX running that same program."""
    loss = weighted(f)
    want = jax.grad(loss, argnums)(*(reference_args or args))
    c = rlxjax.coreml_grad(loss, argnums=argnums, backend="reference").lower(*args).compile()
    c.validate()
    assert_tree_close(c(*args), want, **FP32_TOL)
    if jit_of_jax_grad:  # the primitives JAX's own AD emits
        want = jax.grad(loss, argnums)(*args)
        c = rlxjax.coreml_jit(jax.grad(loss, argnums), backend="reference").lower(*args).compile()
        c.validate()
        assert_tree_close(c(*args), want, **FP32_TOL)


# JAX 0.8 differentiates a batched dynamic_slice / dynamic_update_slice whose start it clamps
# into range to a zero gradient (jax.grad of vmap(dynamic_slice) at x: f32[2,1], starts
# [[1],[1]] is [0, 0], 0.9 gives the cotangent); its gradient at the starts it would use
# (negatives counted from the end, then clamped: the same function) is right on every
# version, so that is the reference there.
JAX_CLAMPED_SLICE_GRAD_BUG = tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 9)


# -- gather ------------------------------------------------------------------------------------
@FEW
@given(data=st.data(), mode=st.sampled_from([None, "clip", "fill"]),
       dtype=st.sampled_from([F32, I32, np.bool_]))
def test_take(data, mode, dtype):
    x = values(data, data.draw(shape_st()), dtype)
    axis = data.draw(st.integers(0, x.ndim - 1))
    idx = indices(data, data.draw(shape_st(0, 2)), x.shape[axis])
    check_against_jax(lambda x, i: jnp.take(x, i, axis=axis, mode=mode), x, idx)


@FEW
@given(data=st.data())
def test_getitem_int_arrays(data):
    x = values(data, data.draw(shape_st(2, 3)))
    i = indices(data, (3,), x.shape[0], oob=False) - x.shape[0] * data.draw(st.integers(0, 1))
    j = indices(data, (3,), x.shape[1], oob=False)
    check_against_jax(lambda x, i: x[i], x, i)          # negative indices normalised by JAX
    check_against_jax(lambda x, j: x[:, j], x, j)
    check_against_jax(lambda x, i, j: x[i, j], x, i, j)  # depth-2 index
    check_against_jax(lambda x, i, j: x[i[:, None], j[None, :]], x, i, j)
    check_grad(lambda x: x[i, j], x)
    check_grad(lambda x: x[:, j], x)


@FEW
@given(data=st.data())
def test_take_along_axis(data):
    x = values(data, data.draw(shape_st(1, 3)))
    axis = data.draw(st.integers(0, x.ndim - 1))
    ishape = list(x.shape)
    ishape[axis] = data.draw(st.integers(1, 4))
    idx = indices(data, tuple(ishape), x.shape[axis], oob=False)
    check_against_jax(lambda x, i: jnp.take_along_axis(x, i, axis=axis), x, idx)
    check_grad(lambda x: jnp.take_along_axis(x, idx, axis=axis), x)


def test_gather_gradient_accumulates_duplicates():
    x = np.arange(12, dtype=F32).reshape(4, 3)
    idx = np.array([1, 1, 3, 1, -1, 7, -6], I32)  # duplicates, negatives, out of range
    check_grad(lambda x: jnp.take(x, idx, axis=0), x)
    check_grad(lambda x: x.at[idx].get(mode="clip"), x)


def test_one_hot_and_split():
    labels = np.array([0, 2, 5, -1, 3], I32)
    check_against_jax(lambda l: jax.nn.one_hot(l, 4), labels)
    check_against_jax(lambda l: jax.nn.one_hot(l, 4, axis=0), labels)
    x = np.arange(24, dtype=F32).reshape(2, 12)
    check_against_jax(lambda x: jnp.split(x, [2, 7], axis=1), x)
    check_grad(lambda x: jnp.split(x, 3, axis=1)[1] * 2.0, x)


# -- scatter -----------------------------------------------------------------------------------
AT_OPS = {
    "set": lambda r, u: r.set(u), "add": lambda r, u: r.add(u),
    "mul": lambda r, u: r.multiply(u), "min": lambda r, u: r.min(u),
    "max": lambda r, u: r.max(u),
}


@FEW
@given(data=st.data(), op=st.sampled_from(sorted(AT_OPS)), col=st.booleans(),
       mode=st.sampled_from([None, "clip", "drop"]))
def test_at_update(data, op, col, mode):
    x = values(data, data.draw(shape_st(2, 3)), levels=3)
    axis = 1 if col else 0
    idx = indices(data, (data.draw(st.integers(1, 5)),), x.shape[axis])  # duplicates, OOB
    ushape = list(x.shape)
    ushape[axis] = len(idx)
    u = values(data, tuple(ushape), levels=3)

    def f(x, u):
        ref = x.at[:, idx] if col else x.at[idx]
        return AT_OPS[op](ref, u) if mode is None else getattr(ref, {
            "set": "set", "add": "add", "mul": "multiply", "min": "min", "max": "max"}[op])(
                u, mode=mode)

    check_against_jax(f, x, u)
    oob = bool(np.any((idx < -x.shape[axis]) | (idx >= x.shape[axis])))
    if op == "mul":  # JAX: scatter-mul gradients need unique indices
        return
    if op in ("min", "max") and mode == "clip" and oob:
        # JAX's own min/max scatter JVP drops out-of-range indices in its tie counts while
        # the forward clamps them, which double-counts the cotangent: nothing to match.
        return
    check_grad(f, x, u, argnums=(0, 1))


def test_set_duplicates_last_wins_and_its_gradient():
    x = np.arange(6, dtype=F32)
    idx = np.array([1, 1, 4, 1, 9, -8], I32)
    u = np.array([10, 20, 30, 40, 50, 60], F32)
    check_against_jax(lambda x, u: x.at[idx].set(u), x, u)
    check_grad(lambda x, u: x.at[idx].set(u), x, u, argnums=(0, 1))


def test_scatter_int_and_scalar_index():
    x = np.arange(10, dtype=I32).reshape(5, 2)
    check_against_jax(lambda x, i: x.at[i].add(7), x, np.int32(3))
    check_against_jax(lambda x, i: x.at[i, 1].set(-1), x, np.array([0, 4, 4], I32))
    check_against_jax(lambda x, i: x.at[i].max(3), x, np.array([0, 2, 2, 9], I32))


def test_scatter_mul_gradient_needs_unique_indices():
    x = np.arange(1, 6, dtype=F32)
    u = np.array([2.0, 3.0], F32)
    dup = np.array([1, 1], I32)
    uniq = np.array([1, 3], I32)
    check_grad(lambda x, u: x.at[uniq].multiply(u, unique_indices=True), x, u, argnums=(0, 1))
    check_grad(lambda x: x.at[dup].multiply(u), x)
    with pytest.raises(UnsupportedPrimitiveError, match="unique"):
        rlxjax.coreml_grad(weighted(lambda u: jnp.asarray(x).at[dup].multiply(u)),
                           backend="reference").lower(u)


# -- dynamic slices ----------------------------------------------------------------------------
@FEW
@given(data=st.data())
def test_dynamic_slice_and_update(data):
    x = values(data, data.draw(shape_st(1, 3)))
    sizes = tuple(data.draw(st.integers(1, d)) for d in x.shape)
    starts = tuple(np.int32(data.draw(st.integers(-6, 6))) for _ in x.shape)  # clamped by JAX
    u = values(data, sizes)
    check_against_jax(lambda x, *s: lax.dynamic_slice(x, s, sizes), x, *starts)
    check_against_jax(lambda x, u, *s: lax.dynamic_update_slice(x, u, s), x, u, *starts)
    check_grad(lambda x, *s: lax.dynamic_slice(x, s, sizes), x, *starts)
    check_grad(lambda x, u, *s: lax.dynamic_update_slice(x, u, s), x, u, *starts,
               argnums=(0, 1))


# -- cumulative reductions ---------------------------------------------------------------------
CUM = {"cumsum": lax.cumsum, "cumprod": lax.cumprod, "cummax": lax.cummax,
       "cummin": lax.cummin, "cumlogsumexp": lax.cumlogsumexp}


@FEW
@given(data=st.data(), name=st.sampled_from(sorted(CUM)), reverse=st.booleans())
def test_cumulative(data, name, reverse):
    if name == "cumlogsumexp":
        # No ties: rlxjax differentiates logaddexp's primal (max + log1p(exp(-|a-b|))),
        # whose derivative at a == b differs from JAX's custom_jvp rule (0.5 / 0.5).
        shape = data.draw(shape_st(1, 3, max_side=5))
        x = data.draw(hnp.arrays(F32, shape, unique=True,
                                 elements=st.integers(-32, 32).map(lambda k: k / 8)))
    else:
        x = values(data, data.draw(shape_st(1, 3, max_side=5)),
                   levels=4 if "cumm" in name else None)
    axis = data.draw(st.integers(0, x.ndim - 1))
    f = lambda x: CUM[name](x, axis=axis, reverse=reverse)  # noqa: E731
    check_against_jax(f, x)
    # jit(jax.grad) too: JAX's associative_scan JVP slices zero-size arrays (folded away)
    check_grad(f, x)


def test_cumsum_int_and_jnp():
    x = np.arange(12, dtype=I32).reshape(3, 4) - 5
    check_against_jax(lambda x: jnp.cumsum(x, axis=1), x)
    check_against_jax(lambda x: jnp.cumsum(x > 0), x)


# -- sort / argsort / top_k --------------------------------------------------------------------
@FEW
@given(data=st.data(), dtype=st.sampled_from([F32, I32]), nan=st.booleans())
def test_sort_argsort_ties(data, dtype, nan):
    x = values(data, data.draw(shape_st(1, 3, max_side=5)), dtype, levels=3)
    if nan and dtype == F32:
        x.reshape(-1)[:: 3] = np.nan  # NaNs sort last, stably
    axis = data.draw(st.integers(0, x.ndim - 1))
    check_against_jax(lambda x: jnp.sort(x, axis=axis), x)
    check_against_jax(lambda x: jnp.argsort(x, axis=axis), x)
    check_against_jax(lambda x: jnp.argsort(x, axis=axis, descending=True), x)
    if dtype == F32 and not nan:
        check_grad(lambda x: jnp.sort(x, axis=axis), x)


@FEW
@given(data=st.data(), nan=st.booleans())
def test_top_k_ties(data, nan):
    x = values(data, data.draw(shape_st(1, 3, max_side=5)), levels=3)
    if nan:
        x.reshape(-1)[1::4] = np.nan  # top_k puts NaN first
    k = data.draw(st.integers(1, x.shape[-1]))
    check_against_jax(lambda x: lax.top_k(x, k), x)
    if not nan:
        check_grad(lambda x: lax.top_k(x, k)[0], x)


@FEW
@given(data=st.data())
def test_jit_of_jax_grad_sort_uint32(data):
    """JAX's AD of sort emits uint32 iotas (its permutation), scattered with uint32
    indices: carried as int32 with proven ranges."""
    x = values(data, data.draw(shape_st(1, 3, max_side=4)), levels=3)
    axis = data.draw(st.integers(0, x.ndim - 1))
    check_grad(lambda x: jnp.sort(x, axis=axis), x)


def test_uint32_that_may_not_fit_is_a_clear_error():
    x = np.arange(3, dtype=F32)
    iota = lambda: lax.iota(np.uint32, 3)  # noqa: E731
    ok = lambda x: x * (iota() + 1).astype(F32)  # noqa: E731  [1, 3] fits
    check_against_jax(ok, x)
    # index-valued uint32 through scatter-add (runtime indices), sort, rev, max, mul
    moved = lambda x, i: x * jnp.maximum(  # noqa: E731
        jnp.sort(lax.rev(iota(), (0,)) * np.uint32(3)),
        iota().at[i].add(np.uint32(2), mode="drop")).astype(F32)
    check_against_jax(moved, x, np.array([2, 2, 7], I32))
    wraps = lambda x: x * (iota() - 1).astype(F32)  # noqa: E731  0 - 1 wraps to 2**32 - 1
    with pytest.raises(UnsupportedDTypeError, match=r"uint32 result of 'sub'.*\[-1, 1\]"):
        rlxjax.coreml_jit(wraps, backend="reference").lower(x)
    signed = lambda x, i: x * i.astype(np.uint32).astype(F32)  # noqa: E731
    with pytest.raises(UnsupportedDTypeError, match="convert_element_type"):
        rlxjax.coreml_jit(signed, backend="reference").lower(x, np.int32(2))
    with pytest.raises(UnsupportedDTypeError, match="output out is uint32"):
        rlxjax.coreml_jit(lambda x: iota() + 1, backend="reference").lower(x)
    with pytest.raises(UnsupportedDTypeError, match="uint32"):
        rlxjax.coreml_jit(lambda i: i + 1, backend="reference").lower(np.ones(2, np.uint32))


# -- windowed gathers / scatters ---------------------------------------------------------------
@settings(max_examples=examples(4), deadline=None)
@given(data=st.data(), mode=st.sampled_from(["clip", "fill", "promise_in_bounds"]))
def test_windowed_gather_and_scatter(data, mode):
    """Windows wider than 1 on indexed dims: vmap of dynamic_slice / dynamic_update_slice
    (JAX clamps the starts), lax.gather / scatter-add with windows (starts out of range:
    clip clamps, fill / drop skip the whole window), and their gradients."""
    x = values(data, data.draw(shape_st(2, 3, max_side=5)))
    sizes = tuple(data.draw(st.integers(1, d)) for d in x.shape[1:])
    starts = data.draw(hnp.arrays(I32, (x.shape[0], x.ndim - 1), elements=st.integers(-2, 6)))
    ds = jax.vmap(lambda r, s: lax.dynamic_slice(r, tuple(s), sizes))
    dus = jax.vmap(lambda r, u, s: lax.dynamic_update_slice(r, u, tuple(s)),
                   in_axes=(0, None, 0))
    u = values(data, sizes)
    check_against_jax(ds, x, starts)
    check_against_jax(dus, x, u, starts)
    dims = np.asarray(x.shape[1:])  # JAX: a negative start counts from the end, then clamps
    clamped = np.clip(np.where(starts < 0, starts + dims, starts), 0, dims - np.asarray(sizes))
    clamped = clamped.astype(I32)
    ref = clamped if JAX_CLAMPED_SLICE_GRAD_BUG else starts
    check_grad(ds, x, starts, reference_args=(x, ref))
    check_grad(dus, x, u, starts, argnums=(0, 1), reference_args=(x, u, ref))
    # one operand, a batch of windows over its leading dims (windows may overlap)
    k = x.ndim - 1
    win = tuple(data.draw(st.integers(1, d)) for d in x.shape[:k]) + x.shape[k:]
    dn = lax.GatherDimensionNumbers(offset_dims=tuple(range(1, x.ndim + 1)),
                                    collapsed_slice_dims=(), start_index_map=tuple(range(k)))
    sn = lax.ScatterDimensionNumbers(update_window_dims=tuple(range(1, x.ndim + 1)),
                                     inserted_window_dims=(),
                                     scatter_dims_to_operand_dims=tuple(range(k)))
    # promise_in_bounds with out-of-range starts is a broken promise (JAX's forward clamps,
    # its gradient drops): in range there
    st_ = np.stack([data.draw(hnp.arrays(I32, (3,), elements=st.integers(
        *((0, x.shape[j] - win[j]) if mode == "promise_in_bounds" else (-1, 5)))))
        for j in range(k)], axis=1)
    g = lambda x: lax.gather(x, st_, dn, slice_sizes=win, mode=mode)  # noqa: E731
    sa = lambda x, u: lax.scatter_add(x, st_, u, sn, mode=mode)  # noqa: E731
    check_against_jax(g, x)
    check_grad(g, x)
    uw = values(data, (3,) + win)
    check_against_jax(sa, x, uw)
    check_grad(sa, x, uw, argnums=(0, 1))


def test_scatter_partial_window_on_unscattered_dim():
    # the window starts at 0 on the dim that is not scattered to (as XLA's scatter)
    x = np.arange(12, dtype=F32).reshape(4, 3)
    sn = lax.ScatterDimensionNumbers(update_window_dims=(1,), inserted_window_dims=(0,),
                                     scatter_dims_to_operand_dims=(0,))
    idx = np.array([[1], [3], [1]], I32)
    for op in (lax.scatter_add, lax.scatter_min, lax.scatter):
        f = lambda x, u: op(x, idx, u, sn)  # noqa: E731
        check_against_jax(f, x, np.arange(6, dtype=F32).reshape(3, 2) - 2)


# -- multi-key sort ----------------------------------------------------------------------------
@FEW
@given(data=st.data(), nan=st.booleans())
def test_lexsort_and_multi_key_sort(data, nan):
    """Lexicographic keys (jnp.lexsort: last key primary; lax.sort num_keys > 1: first
    key primary), stable, ties on every key, NaNs last; extra operands carried along."""
    shape = data.draw(shape_st(1, 2, max_side=6))
    a = values(data, shape, I32, levels=2).astype(I32)
    b = values(data, shape, levels=3)
    c = values(data, shape)
    if nan:
        b.reshape(-1)[::4] = np.nan
    axis = data.draw(st.integers(0, len(shape) - 1))
    check_against_jax(lambda a, b: jnp.lexsort((a, b), axis=axis), a, b)
    check_against_jax(lambda a, b, c: lax.sort((a, b, c), dimension=axis, num_keys=2), a, b, c)
    check_against_jax(lambda a, b, c: lax.sort((b, a, c), dimension=axis, num_keys=3), a, b, c)
    check_grad(lambda c: lax.sort((a, b, c), dimension=axis, num_keys=2)[2], c)
    if not nan:
        check_grad(lambda b: lax.sort((a, b, c), dimension=axis, num_keys=2)[1], b)


# -- models ------------------------------------------------------------------------------------
def _xent(logits, labels):
    lp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.take_along_axis(lp, labels[:, None], axis=1))


def test_cross_entropy_integer_labels():
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6, 5)).astype(F32)
    x = rng.normal(size=(8, 6)).astype(F32)
    y = rng.integers(0, 5, size=(8,)).astype(I32)
    loss = lambda w, x, y: _xent(x @ w, y)  # noqa: E731
    check_against_jax(jax.grad(loss), w, x, y)
    got = rlxjax.coreml_grad(loss, backend="reference")(w, x, y)
    assert_tree_close(got, jax.grad(loss)(w, x, y), **FP32_TOL)


def test_flax_embed_model():
    import flax.linen as nn

    class Model(nn.Module):
        @nn.compact
        def __call__(self, ids):
            h = nn.Embed(11, 4)(ids)
            return nn.Dense(3)(h.mean(axis=1))

    ids = np.array([[1, 4, 4, 10], [0, 3, 7, 4]], I32)
    params = Model().init(jax.random.PRNGKey(0), ids)
    labels = np.array([2, 0], I32)
    loss = lambda p, ids, y: _xent(Model().apply(p, ids), y)  # noqa: E731
    check_against_jax(lambda p, ids: Model().apply(p, ids), params, ids)
    check_against_jax(jax.grad(loss), params, ids, labels)
    got = rlxjax.coreml_grad(loss, backend="reference")(params, ids, labels)
    assert_tree_close(got, jax.grad(loss)(params, ids, labels), **FP32_TOL)


def test_tiny_lm_loss():
    """Embedding lookup, one causal attention layer, tied output projection h @ emb.T,
    take_along_axis cross-entropy over next tokens."""
    rng = np.random.default_rng(1)
    vocab, d, t = 13, 8, 6
    params = {"emb": (rng.normal(size=(vocab, d)) * 0.5).astype(F32),
              "pos": (rng.normal(size=(t, d)) * 0.1).astype(F32),
              "wqkv": (rng.normal(size=(d, 3 * d)) / np.sqrt(d)).astype(F32)}
    tokens = rng.integers(0, vocab, size=(2, t + 1)).astype(I32)

    def loss(p, tokens):
        inp, tgt = tokens[:, :-1], tokens[:, 1:]
        h = p["emb"][inp] + p["pos"]
        q, k, v = jnp.split(h @ p["wqkv"], 3, axis=-1)
        s = jnp.einsum("btd,bsd->bts", q, k) / np.sqrt(d)
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), s, -1e9)
        h = h + jax.nn.softmax(s) @ v
        logits = h @ p["emb"].T
        lp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(lp, tgt[..., None], axis=-1))

    check_against_jax(loss, params, tokens)
    check_against_jax(jax.grad(loss), params, tokens)
    got = rlxjax.coreml_grad(loss, backend="reference")(params, tokens)
    assert_tree_close(got, jax.grad(loss)(params, tokens), **FP32_TOL)


# -- the reference interpreter's gather_nd / scatter_nd (no coremltools value_inference) -------
@FEW
@given(data=st.data(), mode=st.sampled_from(["add", "update", "mul", "max", "min"]))
def test_reference_gather_scatter_nd_vs_numpy(data, mode):
    x = values(data, data.draw(shape_st(1, 3)))
    k = data.draw(st.integers(1, x.ndim))
    bshape = data.draw(shape_st(0, 2))
    idx = np.stack([indices(data, bshape, x.shape[i], oob=False) for i in range(k)], axis=-1)
    coords = tuple(idx[..., i] for i in range(k))
    (g,) = MIL_OP_IMPLS["gather_nd"]({"x": x, "indices": idx})
    np.testing.assert_array_equal(g, x[coords], strict=True)
    upd = values(data, bshape + x.shape[k:])
    if mode == "update":  # unique positions: the order of writes does not matter
        flat = {tuple(c) for c in idx.reshape(-1, k)}
        if len(flat) != idx.reshape(-1, k).shape[0]:
            return
    want = x.copy()
    ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
    if mode == "update":
        want[coords] = upd
    else:
        ufunc[mode].at(want, coords, upd)
    (got,) = MIL_OP_IMPLS["scatter_nd"]({"data": x, "indices": idx, "updates": upd, "mode": mode})
    np.testing.assert_array_equal(got, want, strict=True)
    with pytest.raises(IndexError):
        MIL_OP_IMPLS["gather_nd"]({"x": x, "indices": np.full((1, k), x.shape[0], I32)})
