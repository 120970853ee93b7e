"""Per-primitive tests: dot_general with arbitrary batch / contracting / free dims in any
position, compared with jax.jit.

Inputs: dyadic k/4 in [-4, 4] make every product and partial sum exact in fp32 (|sum| <= 16 *
16 terms), so the result does not depend on the accumulation order of XLA vs numpy. The
arbitrary-float test uses positive inputs: without cancellation the relative difference of two
summation orders is bounded by 2*K*2^-24 (K <= 16 terms: 2e-6 < rtol 1e-5).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax import lax

from helpers import check_against_jax
from primitive_strategies import (F32, FEW, I32, SOME, arrays, dot_problems, dyadic_elements,
                                  float_elements)

DYADIC = dyadic_elements(-4, 4, denom=4)


@pytest.mark.parametrize("dtype", [F32, I32])
@SOME
@given(data=st.data())
def test_dot_general_random_dims(dtype, data):
    lshape, rshape, dn = data.draw(dot_problems())
    el = DYADIC if dtype == F32 else st.integers(-20, 20)
    a = data.draw(arrays(dtype, lshape, el))
    b = data.draw(arrays(dtype, rshape, el))
    check_against_jax(lambda x, y: lax.dot_general(x, y, dn), a, b)


EINSUMS = [
    ("ij,jk->ik", (3, 4), (4, 2)),          # matmul
    ("bij,bjk->bik", (2, 3, 4), (2, 4, 5)),  # batched matmul
    ("ibj,jbk->bik", (3, 2, 4), (4, 2, 5)),  # batch dim in the middle of both
    ("ijb,bjk->kib", (3, 4, 2), (2, 4, 5)),  # batch last / first, output permuted
    ("i,i->", (5,), (5,)),                   # vector . vector
    ("ij,j->i", (3, 4), (4,)),               # matrix . vector
    ("j,jk->k", (4,), (4, 3)),               # vector . matrix
    ("ijk,jkl->il", (2, 3, 4), (3, 4, 5)),   # contract two dims
    ("ikj,lkj->il", (2, 3, 4), (5, 3, 4)),   # contract two dims, rhs "transposed"
    ("i,j->ij", (3,), (4,)),                 # outer product (no contraction)
    ("bi,bi->b", (3, 4), (3, 4)),            # batched dot
    ("abcd,adce->bae", (2, 3, 4, 2), (2, 2, 4, 3)),  # two batch dims, two contracted
]


@pytest.mark.parametrize("spec,sa,sb", EINSUMS, ids=[e[0] for e in EINSUMS])
@FEW
@given(data=st.data())
def test_einsum(spec, sa, sb, data):
    a = data.draw(arrays(F32, sa, DYADIC))
    b = data.draw(arrays(F32, sb, DYADIC))
    check_against_jax(lambda x, y: jnp.einsum(spec, x, y), a, b)


@FEW
@given(data=st.data())
def test_matmul_dot_vdot(data):
    m, k, n = (data.draw(st.integers(1, 5)) for _ in range(3))
    pos = float_elements(0.5, 2.0)
    a = data.draw(arrays(F32, (m, k), pos))
    b = data.draw(arrays(F32, (k, n), pos))
    v = data.draw(arrays(F32, (k,), pos))
    check_against_jax(jnp.matmul, a, b)
    check_against_jax(lambda x, y: x @ y, a, v)
    check_against_jax(jnp.dot, v, b)
    check_against_jax(jnp.vdot, v, v)
    check_against_jax(lambda x, y: jnp.tensordot(x, y, axes=1), a, b)
    check_against_jax(lambda x, y: jnp.matmul(x[None], jnp.stack([y, y])), a, b)


def test_dot_preferred_element_type_same_dtype():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    check_against_jax(lambda x: lax.dot(x, x.T, preferred_element_type=jnp.float32), a)
