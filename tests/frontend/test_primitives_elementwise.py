"""Per-primitive tests: elementwise arithmetic, transcendental, rounding, comparison, logic,
select, clamp and casts, compared with jax.jit on hypothesis-drawn shapes and values.

Tolerances: fp32 rtol 1e-5 / atol 1e-6 (helpers.FP32_TOL) everywhere unless a row says
otherwise with the measured error that justifies it. Integer and bool results are exact.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax import lax

import rlxjax
from helpers import check_against_jax
from primitive_strategies import (BOOL, F32, FEW, I32, SOME, arrays, bshapes, float_elements,
                                  shapes)

# -- float unary --------------------------------------------------------------------------------
# (name, function, elements). Domains keep each op away from poles and from values where a
# one-ulp input difference changes the result by more than rtol (e.g. cos near its zeros).
POS = float_elements(0.01, 50.0)
NO_HALF_TIES = float_elements(-10, 10, exclude_near=(1.0, 0.5, 1e-3))
NEAR_INT = st.integers(-6, 6).map(float)  # floor/ceil/sign are exact: integers are fine inputs

FLOAT_UNARY = [
    ("neg", lambda x: -x, float_elements()),
    ("exp", jnp.exp, float_elements(-20, 20)),
    ("exp2", jnp.exp2, float_elements(-20, 20)),
    ("log", jnp.log, POS),
    ("log1p", jnp.log1p, float_elements(-0.9, 50)),
    ("expm1", jnp.expm1, float_elements(-20, 20)),
    ("tanh", jnp.tanh, float_elements(-8, 8)),
    ("logistic", jax.nn.sigmoid, float_elements(-20, 20)),
    ("sqrt", jnp.sqrt, float_elements(0, 100)),
    ("rsqrt", lax.rsqrt, POS),
    ("abs", jnp.abs, float_elements()),
    ("sign", jnp.sign, st.one_of(float_elements(), NEAR_INT)),
    ("floor", jnp.floor, st.one_of(float_elements(), NEAR_INT)),
    ("ceil", jnp.ceil, st.one_of(float_elements(), NEAR_INT)),
    ("round_even", jnp.round, NO_HALF_TIES),
    ("round_away", lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO), NO_HALF_TIES),
    ("erf", lax.erf, float_elements(-4, 4)),
    # erfc = 1 - erf(x) has ~6e-8 absolute (not relative) error: fine at atol 1e-6 here.
    ("erfc", lax.erfc, float_elements(-4, 4)),
    ("is_finite", lambda x: jnp.isfinite(x), float_elements()),
    ("sin", jnp.sin, float_elements(-10, 10)),
    ("cos", jnp.cos, float_elements(-10, 10)),
    ("square", jnp.square, float_elements()),
    ("integer_pow_2", lambda x: lax.integer_pow(x, 2), float_elements()),
    ("integer_pow_3", lambda x: x ** 3, float_elements()),
    ("integer_pow_5", lambda x: lax.integer_pow(x, 5), float_elements(-5, 5)),
    ("integer_pow_0", lambda x: lax.integer_pow(x, 0), float_elements()),
    ("integer_pow_1", lambda x: lax.integer_pow(x, 1), float_elements()),
    ("integer_pow_-1", lambda x: lax.integer_pow(x, -1), float_elements(away_from_zero=0.1)),
    ("integer_pow_-2", lambda x: lax.integer_pow(x, -2), float_elements(away_from_zero=0.1)),
    ("integer_pow_-3", lambda x: x ** -3, float_elements(away_from_zero=0.1)),
    ("stop_gradient", lax.stop_gradient, float_elements()),
    ("copy", lambda x: jnp.array(x, copy=True) * 1.0, float_elements()),
    ("copy_p", lambda x: lax.copy_p.bind(x), float_elements()),
]


@pytest.mark.parametrize("name,fn,elements", FLOAT_UNARY, ids=[r[0] for r in FLOAT_UNARY])
@SOME
@given(data=st.data())
def test_float_unary(name, fn, elements, data):
    x = data.draw(arrays(F32, shapes(), elements))
    check_against_jax(fn, x)


def _round_away(x):
    return lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO)


@pytest.mark.parametrize("fn", [jnp.round, _round_away], ids=["to_even", "away_from_zero"])
def test_round_exact_ties(fn):
    x = np.array([-4.5, -3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, -0.49999997, 0.49999997,
                  2.4999998, -2.5000002, 0.0, -0.0, 7.0], np.float32)
    check_against_jax(fn, x)
    check_against_jax(fn, x.reshape(1, -1)[:, :16].reshape(4, 4))


def test_log1p_expm1_tiny():
    # log(1 + x) and exp(x) - 1 lose every digit here; JAX's log1p/expm1 do not.
    x = np.array([1e-10, -1e-10, 1e-7, -3e-8, 1e-20, 0.0, 1e-30, -1e-30, 5e-4, -5e-4],
                 np.float32)
    check_against_jax(jnp.log1p, x)
    check_against_jax(jnp.expm1, x)


def test_special_values():
    x = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, -0.25], np.float32)
    for fn in (jnp.exp, jnp.tanh, jax.nn.sigmoid, jnp.isfinite, jnp.abs, jnp.floor, jnp.ceil,
               jnp.round, lambda v: lax.round(v, lax.RoundingMethod.AWAY_FROM_ZERO), jnp.expm1,
               jnp.negative, jnp.sign, jnp.square, lambda v: v ** -2, lambda v: v ** 3):
        check_against_jax(fn, x)
    for fn in (jnp.maximum, jnp.minimum, jnp.add, jnp.multiply):
        check_against_jax(fn, x, x[::-1].copy())
    pos = np.array([np.inf, np.nan, 0.0, 1.0, 4.0], np.float32)
    for fn in (jnp.log, jnp.sqrt, jnp.log1p, lax.rsqrt):
        check_against_jax(fn, pos)
    check_against_jax(jnp.log1p, np.array([-1.0, -0.999, -0.5], np.float32))


# -- float binary -------------------------------------------------------------------------------
NONZERO = float_elements(-10, 10, away_from_zero=0.1)
FLOAT_BINARY = [
    ("add", jnp.add, float_elements(), float_elements()),
    ("sub", jnp.subtract, float_elements(), float_elements()),
    ("mul", jnp.multiply, float_elements(), float_elements()),
    ("div", jnp.divide, float_elements(), NONZERO),
    ("rem", jnp.fmod, float_elements(), NONZERO),
    ("max", jnp.maximum, float_elements(), float_elements()),
    ("min", jnp.minimum, float_elements(), float_elements()),
    ("pow", jnp.power, float_elements(0.1, 10), float_elements(-3, 3)),
    ("pow_intexp", jnp.power, float_elements(-4, 4), st.integers(-3, 3).map(float)),
]


@pytest.mark.parametrize("name,fn,ex,ey", FLOAT_BINARY, ids=[r[0] for r in FLOAT_BINARY])
@SOME
@given(data=st.data())
def test_float_binary(name, fn, ex, ey, data):
    sx, sy = data.draw(bshapes()).input_shapes
    x = data.draw(arrays(F32, sx, ex))
    y = data.draw(arrays(F32, sy, ey))
    if name == "pow_intexp":  # 0 ** negative is inf in both, but 0 * inf paths differ: skip 0
        x = np.where(x == 0, np.float32(1), x)
    check_against_jax(fn, x, y)


# -- comparisons on floats, ints and bools ---------------------------------------------------
COMPARE = [("eq", jnp.equal), ("ne", jnp.not_equal), ("lt", jnp.less), ("le", jnp.less_equal),
           ("gt", jnp.greater), ("ge", jnp.greater_equal)]


@pytest.mark.parametrize("name,fn", COMPARE, ids=[c[0] for c in COMPARE])
@pytest.mark.parametrize("dtype", [F32, I32])
@FEW
@given(data=st.data())
def test_compare(name, fn, dtype, data):
    sx, sy = data.draw(bshapes()).input_shapes
    # Few distinct values so that equality actually happens.
    el = st.sampled_from([-2.5, -1.0, 0.0, 1.0, 3.0]) if dtype == F32 else st.integers(-2, 2)
    x = data.draw(arrays(dtype, sx, el))
    y = data.draw(arrays(dtype, sy, el))
    check_against_jax(fn, x, y)


@pytest.mark.parametrize("name,fn", COMPARE, ids=[c[0] for c in COMPARE])
@FEW
@given(data=st.data())
def test_compare_bool(name, fn, data):
    sx, sy = data.draw(bshapes()).input_shapes
    check_against_jax(fn, data.draw(arrays(BOOL, sx)), data.draw(arrays(BOOL, sy)))


# -- integer arithmetic ------------------------------------------------------------------------
SMALL_INT = st.integers(-1000, 1000)
NONZERO_INT = st.integers(-50, 50).filter(lambda v: v != 0)
INT_BINARY = [
    ("add", jnp.add, SMALL_INT, SMALL_INT),
    ("sub", jnp.subtract, SMALL_INT, SMALL_INT),
    ("mul", jnp.multiply, SMALL_INT, SMALL_INT),
    # lax.div truncates toward zero, lax.rem (jnp.fmod) takes the sign of the dividend.
    ("div", lambda a, b: lax.div(*jnp.broadcast_arrays(a, b)), SMALL_INT, NONZERO_INT),
    ("rem", jnp.fmod, SMALL_INT, NONZERO_INT),
    ("floor_divide", jnp.floor_divide, SMALL_INT, NONZERO_INT),
    ("remainder", jnp.remainder, SMALL_INT, NONZERO_INT),
    ("max", jnp.maximum, SMALL_INT, SMALL_INT),
    ("min", jnp.minimum, SMALL_INT, SMALL_INT),
]


@pytest.mark.parametrize("name,fn,ex,ey", INT_BINARY, ids=[r[0] for r in INT_BINARY])
@SOME
@given(data=st.data())
def test_int_binary(name, fn, ex, ey, data):
    sx, sy = data.draw(bshapes()).input_shapes
    check_against_jax(fn, data.draw(arrays(I32, sx, ex)), data.draw(arrays(I32, sy, ey)))


def test_int_div_rem_signs():
    x = np.array([7, -7, 7, -7, 6, -6, 0, 1, -1, 999], np.int32)
    y = np.array([2, 2, -2, -2, 3, -3, 5, -7, 7, -10], np.int32)
    check_against_jax(lax.div, x, y)
    check_against_jax(lax.rem, x, y)
    check_against_jax(jnp.floor_divide, x, y)
    check_against_jax(jnp.remainder, x, y)


INT_UNARY = [
    ("neg", jnp.negative), ("abs", jnp.abs), ("sign", jnp.sign), ("square", jnp.square),
    ("integer_pow_3", lambda x: x ** 3), ("integer_pow_0", lambda x: lax.integer_pow(x, 0)),
]


@pytest.mark.parametrize("name,fn", INT_UNARY, ids=[r[0] for r in INT_UNARY])
@FEW
@given(data=st.data())
def test_int_unary(name, fn, data):
    check_against_jax(fn, data.draw(arrays(I32, shapes(), st.integers(-100, 100))))


# -- bool logic and integer bitwise ------------------------------------------------------------
LOGIC = [("and", jnp.logical_and), ("or", jnp.logical_or), ("xor", jnp.logical_xor),
         ("and_op", lambda a, b: a & b), ("or_op", lambda a, b: a | b),
         ("xor_op", lambda a, b: a ^ b), ("max", jnp.maximum), ("min", jnp.minimum)]


@pytest.mark.parametrize("name,fn", LOGIC, ids=[r[0] for r in LOGIC])
@FEW
@given(data=st.data())
def test_bool_logic(name, fn, data):
    sx, sy = data.draw(bshapes()).input_shapes
    check_against_jax(fn, data.draw(arrays(BOOL, sx)), data.draw(arrays(BOOL, sy)))


@FEW
@given(data=st.data())
def test_bool_not(data):
    x = data.draw(arrays(BOOL, shapes()))
    check_against_jax(jnp.logical_not, x)
    check_against_jax(lambda a: ~a, x)


@pytest.mark.parametrize("fn", [jnp.bitwise_and, jnp.bitwise_or, jnp.bitwise_xor],
                         ids=["and", "or", "xor"])
def test_int_bitwise_binary(fn):  # composed from int32 arithmetic: tests/frontend/test_int_ops.py
    x = np.arange(-3, 3, dtype=np.int32)
    check_against_jax(fn, x, x[::-1].copy())


def test_int_bitwise_not():
    check_against_jax(jnp.bitwise_not, np.arange(-3, 3, dtype=np.int32))


# -- select, clamp -------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [F32, I32, BOOL])
@FEW
@given(data=st.data())
def test_where(dtype, data):
    sc, sa, sb = data.draw(bshapes(3)).input_shapes
    c = data.draw(arrays(BOOL, sc))
    check_against_jax(jnp.where, c, data.draw(arrays(dtype, sa)), data.draw(arrays(dtype, sb)))


@FEW
@given(data=st.data())
def test_select_n_int_predicate(data):
    shape = data.draw(shapes())
    which = data.draw(arrays(I32, shape, st.integers(0, 2)))
    a, b, c = (data.draw(arrays(F32, shape)) for _ in range(3))
    check_against_jax(lambda w, a, b, c: lax.select_n(w, a, b, c), which, a, b, c)
    check_against_jax(lambda w, a, b: lax.select_n(w, a, b), np.minimum(which, 1), a, b)
    check_against_jax(lambda w, a: lax.select_n(w, a), which > 0, a)


@FEW
@given(data=st.data())
def test_clamp(data):
    shape = data.draw(shapes())
    x = data.draw(arrays(F32, shape))
    lo = data.draw(arrays(F32, shape, float_elements(-10, 0)))
    hi = data.draw(arrays(F32, shape, float_elements(0, 10)))
    check_against_jax(jnp.clip, x, lo, hi)
    check_against_jax(lambda x: jnp.clip(x, -1.5, 2.0), x)
    check_against_jax(lambda x: lax.clamp(np.float32(-1.5), x, np.float32(2.0)), x)
    check_against_jax(lax.clamp, lo, x, hi)
    xi = data.draw(arrays(I32, shape))
    check_against_jax(lambda x: lax.clamp(np.int32(-3), x, np.int32(4)), xi)


# -- convert_element_type ------------------------------------------------------------------
CONVERT = [
    ("f32->i32", F32, lambda x: x.astype(jnp.int32), float_elements(-1000, 1000)),
    ("f32->bool", F32, lambda x: x.astype(jnp.bool_), st.one_of(float_elements(), st.just(0.0))),
    ("i32->f32", I32, lambda x: x.astype(jnp.float32), st.integers(-2**24, 2**24)),
    ("i32->bool", I32, lambda x: x.astype(jnp.bool_), st.integers(-2, 2)),
    ("bool->f32", BOOL, lambda x: x.astype(jnp.float32), st.booleans()),
    ("bool->i32", BOOL, lambda x: x.astype(jnp.int32), st.booleans()),
    ("f32->f16->f32", F32, lambda x: x.astype(jnp.float16).astype(jnp.float32),
     float_elements(-70000, 70000)),
    ("f32->f16", F32, lambda x: x.astype(jnp.float16), float_elements(-1000, 1000)),
]


@pytest.mark.parametrize("name,dtype,fn,el", CONVERT, ids=[r[0] for r in CONVERT])
@FEW
@given(data=st.data())
def test_convert(name, dtype, fn, el, data):
    check_against_jax(fn, data.draw(arrays(dtype, shapes(), el)))
