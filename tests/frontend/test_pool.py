"""The pool family: reduce_window_max / _min / _sum (max and avg pooling) forward, their
gradients (rlxjax's own VJP and what JAX's AD emits: select_and_scatter_add, pad with
interior padding, select_and_gather_add in forward mode), and flax pooling models.

Oracles: jax.jit / jax.grad / jax.jvp of the same function; every program is validated by
coremltools' loader and run on the reference backend. Inputs of max/min pooling are small
integers so that windows have ties: JAX sends a window's cotangent to the FIRST maximal
element in row-major window order, and so must rlxjax. Sums use dyadic values (k/4) so that
no result depends on the summation order. Tolerances: fp32 rtol 1e-5 / atol 1e-6; with
these inputs every comparison is exact in practice.
"""
from __future__ import annotations

import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

import rlxjax
from helpers import assert_tree_close, check_against_jax, examples

FEW = settings(max_examples=examples(8), deadline=None)
RNG = np.random.default_rng(0)

_INIT = {"max": -np.inf, "min": np.inf, "sum": 0.0}
_MONOID = {"max": lax.max, "min": lax.min, "sum": lax.add}


def pool(kind, window, strides, padding, base_dilation=None, window_dilation=None):
    """lax.reduce_window with a known monoid (JAX binds reduce_window_<kind>)."""

    def f(x):
        return lax.reduce_window(x, np.float32(_INIT[kind]), _MONOID[kind], window, strides,
                                 padding, base_dilation, window_dilation)

    return f


def _ints(shape, lo=-2, hi=2):
    """Small integers: plenty of ties inside every window."""
    return RNG.integers(lo, hi + 1, size=shape).astype(np.float32)


def _dyadic(shape):
    return (RNG.integers(-16, 17, size=shape) / 4).astype(np.float32)


def _weight(shape):
    rng = np.random.default_rng(abs(hash(tuple(shape))) % (2 ** 32))
    return (rng.integers(-8, 9, size=shape) / 4).astype(np.float32)


def weighted(f):
    def loss(*args):
        y = f(*args)
        return jnp.sum(y * _weight(np.shape(y)))

    return loss


def rlx_grad(loss, *args, argnums=0):
    compiled = rlxjax.coreml_grad(loss, argnums=argnums, backend="reference").lower(*args) \
        .compile()
    compiled.validate()
    return compiled(*args)


@st.composite
def windows(draw, max_rank=4, dilation=True, base=False):
    """(shape, window, strides, padding, window_dilation, base_dilation) with a non-empty
    result. Padding is 'SAME', 'VALID' or explicit (lo, hi) pairs (possibly wider than a
    window: windows made only of padding exist)."""
    rank = draw(st.integers(1, max_rank))
    window = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(rank))
    wdil = tuple(draw(st.integers(1, 2)) if dilation else 1 for _ in range(rank))
    bdil = tuple(draw(st.integers(1, 2)) if base else 1 for _ in range(rank))
    padding = draw(st.sampled_from(["SAME", "VALID", "explicit"]))
    if padding == "explicit":
        padding = tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(rank))
    shape = []
    for a in range(rank):
        span = (window[a] - 1) * wdil[a] + 1
        pad = sum(padding[a]) if isinstance(padding, tuple) else 0
        lo = max(1, -(-(span - pad - 1) // bdil[a]) + 1) if padding != "SAME" else 1
        shape.append(draw(st.integers(lo, max(lo, 6))))
    return tuple(shape), window, strides, padding, wdil, bdil


# -- forward -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["max", "min", "sum"])
@FEW
@given(w=windows(base=True))
def test_forward(kind, w):
    shape, window, strides, padding, wdil, bdil = w
    x = _dyadic(shape) if kind == "sum" else _ints(shape)
    check_against_jax(pool(kind, window, strides, padding, bdil, wdil), x)


def test_forward_int32_and_layouts():
    # int32 without padding: MIL's pad takes fp16/fp32 only (the shape family's pad
    # lowering does not handle int32 yet).
    x = RNG.integers(-50, 50, size=(2, 5, 6, 3)).astype(np.int32)
    check_against_jax(lambda v: lax.reduce_window(v, np.iinfo(np.int32).min, lax.max,
                                                  (1, 3, 3, 1), (1, 2, 2, 1), "VALID"), x)
    check_against_jax(lambda v: lax.reduce_window(v, np.int32(0), lax.add,
                                                  (1, 2, 2, 1), (1, 1, 1, 1), "VALID"), x)
    nchw = _ints((2, 3, 5, 6))  # NCHW: window dims of 1 on batch and channel
    check_against_jax(pool("max", (1, 1, 2, 2), (1, 1, 2, 2), "SAME"), nchw)
    check_against_jax(pool("sum", (2, 3, 1, 1), (1, 1, 1, 1), "VALID"), _dyadic((2, 3, 5, 6)))


def test_generic_reduce_window():
    """A reducer given as a jaxpr (a lambda, a non-identity init): op(init, pooled)."""
    x = _dyadic((2, 7, 3))
    f = lambda v: lax.reduce_window(v, 0.5, lambda a, b: jnp.maximum(a, b), (1, 3, 1),
                                    (1, 2, 1), ((0, 0), (2, 1), (0, 0)))
    check_against_jax(f, x)
    g = lambda v, c: lax.reduce_window(v, c, lax.add, (2, 2, 1), (1, 1, 1), "SAME")
    check_against_jax(g, x, np.float32(0.25))
    check_against_jax(lambda v: lax.reduce_window(v, np.inf, lambda a, b: jnp.minimum(a, b),
                                                  (3,), (1,), "SAME"), _ints((7,)))


def test_unsupported_cases_are_clear_errors():
    # an empty pooling result folds to an empty constant (frontend/zerosize.py); as the
    # function's result the host makes it, as JAX does
    got = rlxjax.coreml_jit(pool("max", (4,), (1,), "VALID"), backend="reference")(_ints((3,)))
    want = jax.jit(pool("max", (4,), (1,), "VALID"))(_ints((3,)))
    assert got.shape == want.shape == (0,) and got.dtype == want.dtype
    with pytest.raises(rlxjax.errors.UnsupportedPrimitiveError, match="negative window pad"):
        rlxjax.coreml_jit(lambda v: lax.reduce_window(v, 0.0, lax.add, (2,), (1,),
                                                      ((-1, 0),)),
                          backend="reference").lower(np.arange(4, dtype=np.float32))
    # (mul reducers and padded int windows are supported: tests/frontend/test_reduce_generic.py)


# -- gradients -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["max", "min", "sum"])
@FEW
@given(w=windows(dilation=False, base=True))
def test_grad(kind, w):
    """rlxjax's own VJP (coreml_grad) and JAX's AD compiled (coreml_jit(jax.grad)).
    (JAX has no VJP for max pooling with window dilation: tested separately below.)"""
    shape, window, strides, padding, wdil, bdil = w
    x = _dyadic(shape) if kind == "sum" else _ints(shape)
    loss = weighted(pool(kind, window, strides, padding, bdil, wdil))
    want = jax.grad(loss)(x)
    assert_tree_close(rlx_grad(loss, x), want)
    check_against_jax(jax.grad(loss), x)


@FEW
@given(w=windows(max_rank=3, dilation=True))
def test_grad_sum_window_dilation(w):
    shape, window, strides, padding, wdil, _ = w
    loss = weighted(pool("sum", window, strides, padding, None, wdil))
    x = _dyadic(shape)
    assert_tree_close(rlx_grad(loss, x), jax.grad(loss)(x))
    check_against_jax(jax.grad(loss), x)


def _first_choice_scatter(x, ct, window, strides, wdil, select):
    """numpy oracle of XLA's select_and_scatter_add on an unpadded operand: each window's
    cotangent goes to its first maximal (ge) / minimal (le) element in row-major order."""
    out = np.zeros_like(x)
    for o in itertools.product(*(range(n) for n in ct.shape)):
        best = None
        for j in itertools.product(*(range(k) for k in window)):
            pos = tuple(oi * s + ji * d for oi, s, ji, d in zip(o, strides, j, wdil))
            if best is None or not (select(x[best], x[pos])):
                best = pos
        out[best] += ct[o]
    return out


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("window, strides, wdil", [
    ((2, 3), (1, 2), (2, 2)),  # taps shifted by whole strides / one residue per axis
    ((2, 2), (3, 2), (2, 3)),  # taps on residues {0, 2} of stride 3: the interior-pad path
])
def test_grad_max_min_window_dilation(kind, window, strides, wdil):
    """JAX raises NotImplementedError here; the oracle is the numpy selection above."""
    x = _ints((7, 9), -1, 1)
    f = pool(kind, window, strides, "VALID", None, wdil)
    loss = weighted(f)
    ct = _weight(jax.eval_shape(f, x).shape)
    select = np.greater_equal if kind == "max" else np.less_equal
    want = _first_choice_scatter(x, ct, window, strides, wdil, select)
    np.testing.assert_array_equal(rlx_grad(loss, x), want)


def test_grad_ties_first_element():
    """Hand-made ties: all-equal windows, overlapping windows, windows of padding only."""
    x = np.array([[1, 3, 3, 1], [3, 3, 0, 3]], np.float32)
    for f in (pool("max", (2, 2), (1, 1), "VALID"), pool("min", (2, 2), (1, 1), "VALID"),
              pool("max", (2, 2), (1, 1), ((2, 1), (0, 3)))):
        loss = weighted(f)
        for v in (x, -x, np.zeros_like(x)):
            assert_tree_close(rlx_grad(loss, v), jax.grad(loss)(v))
            check_against_jax(jax.grad(loss), v)
    v = np.array([-np.inf, 2.0], np.float32)  # a real -inf ties with the padding before it
    loss = weighted(pool("max", (2,), (1,), ((2, 2),)))
    assert_tree_close(rlx_grad(loss, v), jax.grad(loss)(v))
    check_against_jax(jax.grad(loss), v)


def _distinct(shape):
    """Tie-free values (a permutation of k/4)."""
    n = int(np.prod(shape))
    return (RNG.permutation(n) - n // 2).astype(np.float32).reshape(shape) / 4


def test_forward_mode_and_second_order():
    """select_and_gather_add (JAX's JVP of max pooling, and the transpose of
    select_and_scatter_add in second-order AD), on tie-free inputs: for the JVP JAX reduces
    (operand, tangent) pairs with a variadic reduce_window whose visiting order XLA leaves
    open (measured on CPU: row-major for one window, another order when the output has
    several columns), so its tie-breaking is not a convention one can match. rlxjax breaks
    ties as jax.grad does (first extremum, row-major) everywhere."""
    x = _distinct((1, 5, 6, 2))
    t = _dyadic(x.shape)
    f = pool("max", (1, 3, 2, 1), (1, 2, 1, 1), "SAME")
    check_against_jax(lambda a, b: jax.jvp(f, (a,), (b,)), x, t)
    check_against_jax(jax.jacfwd(weighted(pool("min", (2,), (1,), "SAME"))), _distinct((5,)))
    loss = weighted(f)
    hvp = lambda a, b: jnp.vdot(jax.grad(loss)(a), b)
    assert_tree_close(rlx_grad(hvp, x, t, argnums=(0, 1)), jax.grad(hvp, (0, 1))(x, t))
    # The pooled values feed the cotangent: the second derivative runs the transpose of
    # select_and_scatter_add w.r.t. its source (a select_and_gather_add).
    sq = lambda a: jnp.sum(jax.grad(lambda v: jnp.sum(f(v) ** 2 * v[:, ::2]))(a) ** 2)
    assert_tree_close(rlx_grad(sq, x), jax.grad(sq)(x))
    check_against_jax(jax.grad(sq), x)


# -- flax models ---------------------------------------------------------------------
class PoolNet(nn.Module):
    count_include_pad: bool = True

    @nn.compact
    def __call__(self, x):
        x = nn.Dense(4)(x)
        x = nn.max_pool(x, (2, 2), strides=(2, 2), padding="SAME")
        x = nn.relu(x)
        x = nn.avg_pool(x, (3, 3), strides=(1, 1), padding="SAME",
                        count_include_pad=self.count_include_pad)
        x = -nn.max_pool(-x, (2, 1), strides=(1, 1), padding="VALID")  # a min pool
        return nn.Dense(3)(x.mean(axis=(1, 2)))


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_flax_pooling_model(count_include_pad):
    model = PoolNet(count_include_pad)
    # Continuous inputs: with small integers, distinct pixels often hold equal values, and
    # sums that are equal in exact arithmetic may round differently in XLA and here, which
    # moves a tie-broken selection (a true discontinuity, not a tolerance matter).
    x = RNG.normal(size=(2, 7, 6, 3)).astype(np.float32)
    params = model.init(jax.random.PRNGKey(0), x)
    y = _dyadic((2, 3))

    def loss(p, x):
        return jnp.mean((model.apply(p, x) - y) ** 2)

    check_against_jax(model.apply, params, x)
    # Measured max abs errors ~1e-7 (avg pooling sums reassociate); default tolerances hold.
    assert_tree_close(rlx_grad(loss, params, x, argnums=(0, 1)),
                      jax.grad(loss, (0, 1))(params, x))
    check_against_jax(jax.grad(loss, (0, 1)), params, x)
