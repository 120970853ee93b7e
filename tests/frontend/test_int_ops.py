"""Integer bit operations: and / or / xor / not, the three shifts, population_count and
clz, compared exactly with jax.jit (int32 on hypothesis-drawn values over the whole range,
the edge values always included; shift amounts beyond the bit width and negative).

MIL has no bitwise integer op, so each is composed from int32 arithmetic
(rlxjax/coreml/rules/bitwise.py) without any intermediate that overflows; the constant
folder has its own numpy implementation, checked here too. int8 / uint8 go through int32
in the frontend (frontend/rules/bitwise.py): checked on constants (folded), since their
program inputs are another part of the issue.
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

I32 = np.int32
EDGES = np.array([0, 1, -1, 2, -2, 2 ** 30, -2 ** 30, 2 ** 31 - 1, -2 ** 31, 0x55555555,
                  -0x55555556, 12345, -12345], I32)
INT32 = st.integers(-2 ** 31, 2 ** 31 - 1)
AMOUNTS = st.one_of(st.integers(0, 31), st.integers(-40, 70), st.sampled_from([-2 ** 31, 32]))


def _with_edges(x):
    x = np.array(x, I32)
    flat = x.reshape(-1)
    flat[:min(flat.size, EDGES.size)] = EDGES[:flat.size]
    return x


def _bitwise_all(x, y, s):
    """Every int32 bit op at once: one compile per example."""
    return (x & y, x | y, x ^ y, ~x, lax.shift_left(x, s), lax.shift_right_logical(x, s),
            lax.shift_right_arithmetic(x, s), lax.population_count(x), lax.clz(x))


@settings(max_examples=4, deadline=None)
@given(st.data())
def test_int32_bit_ops_match_jax(data):
    shape = (4, 13)  # one shape: XLA compiles the oracle once
    x = _with_edges(data.draw(hnp.arrays(I32, shape, elements=INT32)))
    y = data.draw(hnp.arrays(I32, shape, elements=INT32))
    s = data.draw(hnp.arrays(I32, shape, elements=AMOUNTS))
    check_against_jax(_bitwise_all, x, y, s)


@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_int32_bit_ops_broadcast(data):
    x, y, s = (data.draw(hnp.arrays(I32, sh, elements=el))
               for sh, el in zip(((3, 1), (1, 4), ()), (INT32, INT32, AMOUNTS)))
    check_against_jax(lambda x, y, s: (x & y, x ^ y, x << s, x >> s,  # jnp broadcasts
                                       lax.shift_right_logical(*jnp.broadcast_arrays(y, s))),
                      x, y, s)


def test_every_shift_amount_and_every_bit():
    x = np.array([1, -1, -2 ** 31, 2 ** 31 - 1, 0x12345678, -0x12345679], I32)
    s = np.arange(-3, 36, dtype=I32)
    xs, ss = np.broadcast_arrays(x[:, None], s[None, :])
    check_against_jax(_bitwise_all, xs.copy(), xs[::-1].copy(), ss.copy())
    powers = np.concatenate([2 ** np.arange(31), -(2 ** np.arange(32))]).astype(np.int64)
    check_against_jax(lambda v: (lax.population_count(v), lax.clz(v), ~v),
                      np.concatenate([powers, powers - 1, powers + 1]).astype(I32))


def test_constant_operands_fold_to_the_same_bits():
    x = _with_edges(np.random.default_rng(0).integers(-2 ** 31, 2 ** 31, (40,)))
    s = np.random.default_rng(1).integers(-5, 40, (40,)).astype(I32)
    compiled = rlxjax.coreml_jit(lambda: _bitwise_all(x, x[::-1], s),
                                 backend="reference").lower().compile()
    assert [n.op for n in compiled.graph.nodes] == ["constant"] * 9  # all folded
    # (jax.jit of the constants would let XLA's constant folder compute clz, which it
    # gets wrong for negative values: -32 instead of 0)
    for got, want in zip(compiled(), jax.jit(_bitwise_all)(x, x[::-1].copy(), s)):
        np.testing.assert_array_equal(got, want)


def test_no_intermediate_leaves_int32():
    """The lowering promises exactness without wrap-around: run its MIL ops on int64 (no
    overflow possible) and check every int32 value they produce fits in int32."""
    from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS

    seen = []
    originals = {}
    for name in ("add", "sub", "mul", "floor_div", "mod"):
        originals[name] = MIL_OP_IMPLS[name]

        def wide(inputs, _name=name, _orig=originals[name]):
            x, y = (np.asarray(inputs[k]) for k in ("x", "y"))
            if x.dtype == I32 or y.dtype == I32:
                big = _orig({"x": x.astype(np.int64), "y": y.astype(np.int64)})[0]
                seen.append((_name, int(big.min(initial=0)), int(big.max(initial=0))))
            return _orig(inputs)

        MIL_OP_IMPLS[name] = wide
    try:
        x = _with_edges(np.random.default_rng(2).integers(-2 ** 31, 2 ** 31, (64,)))
        s = np.arange(-32, 32, dtype=I32)
        rlxjax.coreml_jit(_bitwise_all, backend="reference")(x, x[::-1].copy(), s)
    finally:
        MIL_OP_IMPLS.update(originals)
    assert seen
    bad = [t for t in seen if t[1] < -2 ** 31 or t[2] > 2 ** 31 - 1]
    assert not bad, bad


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_8_bit_ops_follow_their_bit_width(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(3)
    x = rng.integers(info.min, info.max + 1, (64,)).astype(dtype)
    y = rng.integers(info.min, info.max + 1, (64,)).astype(dtype)
    s = rng.integers(info.min, info.max + 1, (64,)).astype(dtype)
    s[:12] = np.arange(12)
    x[:4] = [0, info.min, info.max, -1 if info.min else 1]

    def fn(x, y, s):
        return (x & y, x | y, x ^ y, ~x, lax.shift_left(x, s), lax.shift_right_logical(x, s),
                lax.shift_right_arithmetic(x, s), lax.population_count(x), lax.clz(y))

    # rlxjax folds the constants (its frontend's int32 composition, then numpy); JAX gets
    # them as arguments (XLA's own constant folder gets clz of negative values wrong)
    compiled = rlxjax.coreml_jit(lambda d: (fn(x, y, s), d)[0],
                                 backend="reference").lower(np.zeros(1, np.float32)).compile()
    for got, want in zip(compiled(np.zeros(1, np.float32)), jax.jit(fn)(x, y, s)):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_int8_and_uint8_bitwise_reductions_and_cumulative_ops():
    rng = np.random.default_rng(4)
    a = rng.integers(-128, 128, (6, 8)).astype(np.int8)
    b = rng.integers(0, 256, (6, 8)).astype(np.uint8)

    def fn():
        return (lax.cumsum(a, 0), lax.cumprod(b, 1), lax.cummax(a, 1, reverse=True),
                jax.numpy.sum(a, axis=0, dtype=np.int8), jax.numpy.prod(b, axis=1, dtype=np.uint8),
                lax.reduce(a, np.int8(-1), lax.bitwise_and, (1,)),
                lax.reduce(b, np.uint8(0), lax.bitwise_xor, (0,)),
                lax.reduce_window(a, np.int8(3), lax.mul, (2, 3), (1, 1), "SAME"))

    compiled = rlxjax.coreml_jit(lambda d: (fn(), d)[0],
                                 backend="reference").lower(np.zeros(1, np.float32)).compile()
    for got, want in zip(compiled(np.zeros(1, np.float32)), jax.jit(fn)()):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_bool_logic_still_uses_the_logical_ops():
    x = np.array([True, False, True]), np.array([True, True, False])
    compiled = check_against_jax(lambda a, b: (a & b, a | b, a ^ b, ~a), *x)
    assert "floor_div" not in compiled.op_histogram()


def test_uint32_bit_ops_need_a_proven_range():
    from rlxjax.errors import UnsupportedDTypeError

    with pytest.raises(UnsupportedDTypeError, match="shift_left"):
        rlxjax.coreml_jit(lambda x: x + lax.shift_left(lax.iota(np.uint32, 4), np.uint32(3))
                          .astype(np.int32), backend="reference")(np.arange(4, dtype=I32))
