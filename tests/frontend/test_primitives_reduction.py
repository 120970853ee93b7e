"""Per-primitive tests: reduce_sum / max / min / prod and argmax / argmin over random axes,
compared with jax.jit.

Float sums and products use dyadic inputs (k/8, resp. powers of two) so that every partial
result is exact in fp32: the comparison then holds for any summation order, and the default
fp32 tolerance only has to absorb nothing. A separate test with arbitrary floats checks the
ordinary case at the default tolerance on small reductions.
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax import lax

from helpers import check_against_jax
from primitive_strategies import (F32, FEW, I32, SOME, arrays, axes_subsets, dyadic_elements,
                                  float_elements, shapes)

POW2 = st.sampled_from([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0])
REDUCE = [
    ("sum", jnp.sum, dyadic_elements()),
    ("max", jnp.max, float_elements()),
    ("min", jnp.min, float_elements()),
    ("prod", jnp.prod, POW2),
    ("mean", jnp.mean, dyadic_elements()),
]


@pytest.mark.parametrize("name,fn,el", REDUCE, ids=[r[0] for r in REDUCE])
@SOME
@given(data=st.data())
def test_reduce_float(name, fn, el, data):
    shape = data.draw(shapes())
    x = data.draw(arrays(F32, shape, el))
    axes = data.draw(axes_subsets(len(shape)))
    check_against_jax(lambda v: fn(v, axis=axes), x)
    check_against_jax(fn, x)  # all axes


@FEW
@given(data=st.data())
def test_reduce_sum_arbitrary_floats(data):
    # Few terms of modest magnitude: ordering differences stay below the fp32 tolerance.
    shape = data.draw(shapes(min_dims=1, max_dims=2, max_side=4))
    x = data.draw(arrays(F32, shape, float_elements(0.5, 4)))
    check_against_jax(lambda v: jnp.sum(v, axis=-1), x)


INT_REDUCE = [("sum", jnp.sum, st.integers(-1000, 1000)), ("max", jnp.max, st.integers(-9, 9)),
              ("min", jnp.min, st.integers(-9, 9)), ("prod", jnp.prod, st.integers(-2, 2))]


@pytest.mark.parametrize("name,fn,el", INT_REDUCE, ids=[r[0] for r in INT_REDUCE])
@FEW
@given(data=st.data())
def test_reduce_int(name, fn, el, data):
    shape = data.draw(shapes())
    x = data.draw(arrays(I32, shape, el))
    axes = data.draw(axes_subsets(len(shape)))
    check_against_jax(lambda v: fn(v, axis=axes), x)


@FEW
@given(data=st.data())
def test_reduce_bool(data):
    shape = data.draw(shapes(min_dims=1))
    x = data.draw(arrays(np.bool_, shape))
    axes = data.draw(axes_subsets(len(shape)))
    check_against_jax(lambda v: jnp.any(v, axis=axes), x)
    check_against_jax(lambda v: jnp.all(v, axis=axes), x)
    check_against_jax(lambda v: jnp.max(v, axis=axes), x)
    check_against_jax(lambda v: jnp.min(v, axis=axes), x)
    axis = data.draw(st.integers(0, len(shape) - 1))
    check_against_jax(lambda v: jnp.argmax(v, axis=axis), x)
    check_against_jax(lambda v: jnp.argmin(v, axis=axis), x)


@pytest.mark.parametrize("fn", [jnp.argmax, jnp.argmin], ids=["argmax", "argmin"])
@pytest.mark.parametrize("dtype", [F32, I32])
@SOME
@given(data=st.data())
def test_arg_reduce_ties_first_index(fn, dtype, data):
    shape = data.draw(shapes(min_dims=1))
    # Three distinct values: ties are the rule, and JAX returns the first index among them.
    el = st.sampled_from([-1.5, 0.0, 2.0]) if dtype == F32 else st.integers(-1, 1)
    x = data.draw(arrays(dtype, shape, el))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    check_against_jax(lambda v: fn(v, axis=axis), x)
    check_against_jax(lambda v: fn(v, axis=axis, keepdims=True), x)


def test_arg_reduce_flattened():
    x = np.array([[3.0, 1.0, 3.0], [0.0, 3.0, 1.0]], np.float32)
    check_against_jax(jnp.argmax, x)
    check_against_jax(jnp.argmin, x)
    check_against_jax(lambda v: lax.argmax(v, 1, np.int32), x)


def test_int_bitwise_reduction():  # int32 arithmetic (frontend/rules/reduce_generic.py)
    x = np.arange(-3, 3, dtype=np.int32)
    check_against_jax(lambda v: (lax.reduce_or_p.bind(v, axes=(0,)),
                                 lax.reduce_and_p.bind(v, axes=(0,))), x)
