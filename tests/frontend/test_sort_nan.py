"""NaN, infinities and signed zeros in sort / top_k / approx_top_k, against jax.jit and
jax.grad.

lax.sort canonicalises before comparing (every NaN is +NaN and sorts last, -0 == +0, ties
keep their order); lax.top_k ranks by XLA's total order (-0 < +0, NaN above +inf, ties by
index). The sign of a NaN (XLA: -NaN below -inf) is the one thing Core ML cannot see (MIL
has no bit cast), so every NaN ranks as +NaN: what np.nan, jnp.nan and ARM's arithmetic
give. ``test_a_negative_nan_ranks_as_a_positive_one`` pins that difference down.
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
from helpers import check_against_jax

F32 = np.float32
SPECIAL = st.sampled_from([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5])
VALUES = st.one_of(SPECIAL, st.floats(-4, 4, width=32).map(lambda v: float(np.round(v, 1))))


def _signs_match(got, want):
    np.testing.assert_array_equal(np.signbit(np.asarray(got)), np.signbit(np.asarray(want)))


@settings(max_examples=4, deadline=None)
@given(hnp.arrays(F32, (2, 9), elements=VALUES))
def test_top_k_and_sort_order_nans_infinities_and_zeros_as_xla(x):
    def fn(x):
        v, i = lax.top_k(x, 5)
        return v, i, jnp.sort(x, axis=-1), jnp.argsort(x[0], stable=True)

    compiled = check_against_jax(fn, x)
    _signs_match(compiled(x)[0], jax.jit(fn)(x)[0])  # +0 ranks above -0 in top_k


def test_top_k_of_infinities_and_nan():
    x = np.array([np.inf, np.nan, np.nan, -np.inf, 3, 0.0, -0.0, 0.0], F32)
    check_against_jax(lambda x: lax.top_k(x, 8), x)
    check_against_jax(lambda x: lax.top_k(x, 2), x)


def test_top_k_gradient_follows_the_same_order():
    x = np.array([[np.inf, np.nan, -np.inf, 3.0, 0.0, -0.0, 3.0]], F32)
    w = np.arange(1, 6, dtype=F32)

    def loss(x):
        v, _ = lax.top_k(x, 5)
        return jnp.sum(jnp.where(jnp.isfinite(v), v, 0.0) * w)

    np.testing.assert_array_equal(rlxjax.coreml_grad(loss, backend="reference")(x),
                                  jax.grad(loss)(x))


def test_a_negative_nan_ranks_as_a_positive_one_in_the_program():
    """Documented difference: XLA puts -NaN last in top_k; Core ML cannot read a NaN's sign.
    A Python call refuses the -NaN (tests/frontend/test_nan_sign.py); what the program itself does,
    as a Swift caller would see it, is rank it as +NaN."""
    x = np.array([np.inf, np.nan, -np.nan, -np.inf, 3], F32)
    assert np.signbit(x[2]) and np.isnan(x[2])
    compiled = rlxjax.coreml_jit(lambda x: lax.top_k(x, 5), backend="reference").lower(x).compile()
    with pytest.raises(rlxjax.ArgumentError, match="sign bit"):
        compiled(x)
    from rlxjax.coreml.backends import make_backend

    program = make_backend("reference", compiled.spec, compiled._weights_dir)
    res = program.run({compiled.input_specs[0].mil_name: x})
    idx = res[compiled.output_specs[1].mil_name]
    np.testing.assert_array_equal(idx, [1, 2, 0, 4, 3])
    assert list(np.asarray(lax.top_k(x, 5)[1])) == [1, 0, 4, 3, 2]  # XLA


@pytest.mark.parametrize("is_max", [True, False])
def test_approx_top_k_is_the_exact_top_k(is_max):
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(F32)
    fn = (lambda x: lax.approx_max_k(x, 4)) if is_max else (lambda x: lax.approx_min_k(x, 4))
    check_against_jax(fn, x)
    loss = lambda x: jnp.sum(fn(x)[0] * jnp.arange(4.0))  # noqa: E731
    np.testing.assert_allclose(rlxjax.coreml_grad(loss, backend="reference")(x),
                               jax.grad(loss)(x))


def test_approx_top_k_along_another_axis_and_unaggregated():
    x = np.random.default_rng(1).standard_normal((6, 5)).astype(F32)
    check_against_jax(lambda x: lax.approx_max_k(x, 2, reduction_dimension=0), x)
    check_against_jax(lambda x: lax.approx_max_k(x, 2, aggregate_to_topk=False), x)
