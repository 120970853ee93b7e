"""Per-primitive tests: broadcast_in_dim, reshape, transpose, squeeze, expand_dims, rev,
concatenate, slice, iota — compared with jax.jit on hypothesis-drawn shapes. These ops move
values without arithmetic, so every comparison is exact in practice (fp32 tolerance kept)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax import lax

from helpers import check_against_jax
from primitive_strategies import BOOL, F32, FEW, I32, SOME, arrays, axes_subsets, shapes

DTYPES = [F32, I32, BOOL]


@pytest.mark.parametrize("dtype", DTYPES)
@SOME
@given(data=st.data())
def test_broadcast_in_dim(dtype, data):
    out_shape = data.draw(shapes(max_dims=4))
    # Pick a sorted subset of output dims for the operand; each may be 1 or the full size.
    dims = tuple(sorted(data.draw(axes_subsets(len(out_shape)))))
    in_shape = tuple(data.draw(st.sampled_from([1, out_shape[d]])) for d in dims)
    x = data.draw(arrays(dtype, in_shape))
    check_against_jax(lambda v: lax.broadcast_in_dim(v, out_shape, dims), x)
    check_against_jax(lambda v: jnp.broadcast_to(v, (2,) + tuple(in_shape)), x)


@pytest.mark.parametrize("dtype", DTYPES)
@FEW
@given(data=st.data())
def test_reshape(dtype, data):
    shape = data.draw(shapes())
    x = data.draw(arrays(dtype, shape))
    n = int(np.prod(shape))
    # A random factorisation of n into up to 3 factors (with 1s).
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    a = data.draw(st.sampled_from(divisors))
    b = data.draw(st.sampled_from([d for d in divisors if (n // a) % d == 0]))
    target = (a, b, n // a // b)
    check_against_jax(lambda v: v.reshape(target), x)
    check_against_jax(lambda v: v.reshape(-1), x)
    check_against_jax(lambda v: v.reshape(target[::-1]).reshape(shape), x)


@pytest.mark.parametrize("dtype", DTYPES)
@FEW
@given(data=st.data())
def test_transpose(dtype, data):
    shape = data.draw(shapes(max_dims=4))
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    x = data.draw(arrays(dtype, shape))
    check_against_jax(lambda v: jnp.transpose(v, perm), x)
    check_against_jax(lambda v: v.T, x)


@FEW
@given(data=st.data())
def test_squeeze_expand_dims(data):
    shape = data.draw(shapes(max_dims=4, min_side=1, max_side=3))
    x = data.draw(arrays(F32, shape))
    ones = tuple(i for i, d in enumerate(shape) if d == 1)
    if ones:
        sub = data.draw(st.lists(st.sampled_from(ones), unique=True, min_size=1).map(tuple))
        check_against_jax(lambda v: jnp.squeeze(v, axis=sub), x)
        check_against_jax(lambda v: lax.squeeze(v, tuple(a - len(shape) for a in sub)), x)
    check_against_jax(jnp.squeeze, x)
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check_against_jax(lambda v: jnp.expand_dims(v, axis), x)
    check_against_jax(lambda v: lax.expand_dims(v, (0, len(shape) + 1)), x)
    check_against_jax(lambda v: v[None, ..., None], x)


@pytest.mark.parametrize("dtype", DTYPES)
@FEW
@given(data=st.data())
def test_rev(dtype, data):
    shape = data.draw(shapes())
    axes = data.draw(axes_subsets(len(shape)))
    x = data.draw(arrays(dtype, shape))
    check_against_jax(lambda v: jnp.flip(v, axes), x)
    check_against_jax(jnp.flip, x)


@pytest.mark.parametrize("dtype", DTYPES)
@FEW
@given(data=st.data())
def test_concatenate(dtype, data):
    shape = data.draw(shapes(min_dims=1))
    axis = data.draw(st.integers(0, len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    xs = [data.draw(arrays(dtype, shape[:axis] + (s,) + shape[axis + 1:])) for s in sizes]
    check_against_jax(lambda *vs: jnp.concatenate(vs, axis=axis), *xs)
    check_against_jax(lambda *vs: jnp.concatenate(vs, axis=axis - len(shape)), *xs)
    stack_axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    check_against_jax(lambda a: jnp.stack([a, a[::-1]], axis=stack_axis), xs[0])
    check_against_jax(lambda a: jnp.stack([a[0, ...]], axis=0), xs[0])


@pytest.mark.parametrize("dtype", DTYPES)
@SOME
@given(data=st.data())
def test_slice(dtype, data):
    shape = data.draw(shapes(min_dims=1))
    start, limit, strides = [], [], []
    for d in shape:
        s = data.draw(st.integers(0, d - 1))
        start.append(s)
        limit.append(data.draw(st.integers(s + 1, d)))
        strides.append(data.draw(st.integers(1, 3)))
    x = data.draw(arrays(dtype, shape))
    check_against_jax(lambda v: lax.slice(v, start, limit, strides), x)
    check_against_jax(lambda v: lax.slice(v, start, limit), x)
    idx = tuple(slice(s, l, st_) for s, l, st_ in zip(start, limit, strides))
    check_against_jax(lambda v: v[idx], x)


@FEW
@given(data=st.data())
def test_iota(data):
    shape = data.draw(shapes(min_dims=1))
    dim = data.draw(st.integers(0, len(shape) - 1))
    x = data.draw(arrays(F32, shape))
    check_against_jax(lambda v: v + lax.broadcasted_iota(jnp.float32, shape, dim), x)
    check_against_jax(lambda v: lax.broadcasted_iota(jnp.int32, shape, dim) * 2 + (v > 0), x)
    n = shape[-1]
    check_against_jax(lambda v: v * jnp.arange(n, dtype=jnp.float32), x)
    check_against_jax(lambda v: v + jnp.arange(n), x.astype(np.int32))
    check_against_jax(lambda v: v * jnp.arange(1.0, 1.0 + 0.5 * n, 0.5)[:n], x)


def test_iota_only_output():
    # A program whose only output is a compile-time constant.
    x = np.zeros((2,), np.float32)
    check_against_jax(lambda v: jnp.arange(5), x)
    check_against_jax(lambda v: (jnp.arange(6.0).reshape(2, 3), v), x)


@pytest.mark.parametrize("cfg", [((1, 2, 1), (0, -1, 0)), ((2, 0, 0), (1, 1, 2)), ((0, 0, 0), (3, 3, 0))])
def test_pad_int32_and_bool(cfg):
    # MIL's pad takes float tensors only: integer and bool padding is built by concat.
    x = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    check_against_jax(lambda v: lax.pad(v, np.int32(-7), cfg), x)
    check_against_jax(lambda v: lax.pad(v, np.bool_(True), cfg), x > 0)
