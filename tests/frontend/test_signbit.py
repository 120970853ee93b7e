"""jnp.signbit: a float32 -> int32 bitcast read only for its sign (rules/bitcast.py) is
computed exactly from x < 0 and 1 / x < 0 (for -0), compared bit for bit with JAX on every
kind of float32 (zeros, subnormals, infinities, +NaN); a -NaN is refused at call time as for
top_k (nan_sign.py); a bitcast read for its other bits stays refused."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import rlxjax

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.2e-38,
                    -1.2e-38, 3.4e38, -3.4e38], np.float32)


def test_signbit_of_special_values_equals_jax():
    got = rlxjax.coreml_jit(jnp.signbit)(SPECIAL)
    np.testing.assert_array_equal(got, jax.jit(jnp.signbit)(SPECIAL))


@settings(max_examples=15, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(max_dims=2, max_side=5),
                  elements=st.floats(width=32, allow_nan=False)))
def test_signbit_equals_jax(x):
    def f(x):  # (XLA on CPU compares subnormals as 0, numpy does not: no x == 0 here)
        return jnp.where(jnp.signbit(x), -1.0, 1.0), jnp.signbit(x)

    got = rlxjax.coreml_jit(f)(x)
    want = jax.jit(f)(x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_negative_nan_reaching_signbit_is_refused():
    x = np.array([1.0, np.nan], np.float32)
    x[1] = -x[1]  # the sign bit set
    assert np.signbit(x[1])
    with pytest.raises(rlxjax.ArgumentError, match="argument 'x'.*jnp.signbit"):
        rlxjax.coreml_jit(jnp.signbit)(x)


def test_bitcast_read_for_its_bits_is_refused():
    def f(x):
        return jax.lax.bitcast_convert_type(x, jnp.int32) & 0xFF

    with pytest.raises(rlxjax.UnsupportedPrimitiveError, match="no bit reinterpretation"):
        rlxjax.coreml_jit(f)(np.ones(3, np.float32))
