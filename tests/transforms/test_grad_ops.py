"""Gradients of every differentiable RLX op, built by rlxjax's own backward pass
(``rlxjax.coreml_grad``), compared with ``jax.grad`` on hypothesis-drawn shapes and values.

Each op is tested through a scalar loss ``sum(f(x, ...) * w)`` with a fixed weight ``w``
of dyadic values k/4 (so that the cotangent itself is exact and the sums that ``sum_to`` and
the reductions perform depend on the summation order only through f's own rounding).
Every program is validated by coremltools' loader and run on the reference backend.

Tolerances: rtol 1e-5 / atol 1e-6 (helpers.FP32_TOL) unless a row says otherwise with the
measured error that justifies it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import lax

import rlxjax
from helpers import assert_tree_close, examples
from primitive_strategies import (F32, arrays, bshapes, dot_problems, dyadic_elements,
                                  float_elements, shapes)

FEW = settings(max_examples=examples(6), deadline=None)
DY = dyadic_elements(-4, 4, denom=4)


def _weight(shape):
    """A fixed dyadic weight (k/4, |k| <= 8) of the given shape."""
    rng = np.random.default_rng(abs(hash(tuple(shape))) % (2 ** 32))
    return (rng.integers(-8, 9, size=shape) / 4).astype(np.float32)


def weighted(f):
    """Scalar loss sum(f(*args) * w) with a weight fixed per output shape."""

    def loss(*args):
        y = f(*args)
        return jnp.sum(y * _weight(np.shape(y)).astype(y.dtype))

    return loss


def grad_of(loss, args, argnums=0, value=False, has_aux=False, **kw):
    """Compile rlxjax's gradient of ``loss`` at ``args``, validate it and return the result."""
    make = rlxjax.coreml_value_and_grad if value else rlxjax.coreml_grad
    cf = make(loss, argnums=argnums, has_aux=has_aux, backend="reference", **kw)
    compiled = cf.lower(*args).compile()
    compiled.validate()
    static = kw.get("static_argnums", ())
    static = (static,) if isinstance(static, int) else tuple(static)
    return compiled(*[a for i, a in enumerate(args) if i not in static])


def check_grad(f, *args, argnums=0, rtol=1e-5, atol=1e-6):
    loss = weighted(f)
    got = grad_of(loss, args, argnums)
    want = jax.jit(jax.grad(loss, argnums))(*args)  # one XLA compile, not one per op
    assert_tree_close(got, want, rtol=rtol, atol=atol)


# -- elementwise unary ------------------------------------------------------------------------
# Domains keep away from poles and from points where the derivative itself is ill-conditioned.
POS = float_elements(0.05, 20.0)
UNARY = [
    ("neg", lambda x: -x, float_elements()),
    ("exp", jnp.exp, float_elements(-10, 10)),
    ("exp2", jnp.exp2, float_elements(-10, 10)),
    ("log", jnp.log, POS),
    ("log1p", jnp.log1p, float_elements(-0.9, 20)),
    ("expm1", jnp.expm1, float_elements(-10, 10)),
    ("tanh", jnp.tanh, float_elements(-5, 5)),
    ("logistic", jax.nn.sigmoid, float_elements(-10, 10)),
    ("sqrt", jnp.sqrt, POS),
    ("rsqrt", lax.rsqrt, POS),
    ("abs", jnp.abs, st.one_of(float_elements(), st.just(0.0))),
    ("erf", lax.erf, float_elements(-3, 3)),
    ("sin", jnp.sin, float_elements(-5, 5)),
    ("cos", jnp.cos, float_elements(-5, 5)),
    ("square", jnp.square, float_elements()),
    ("integer_pow_0", lambda x: lax.integer_pow(x, 0), float_elements()),
    ("integer_pow_1", lambda x: lax.integer_pow(x, 1), float_elements()),
    ("integer_pow_2", lambda x: lax.integer_pow(x, 2), float_elements()),
    ("integer_pow_3", lambda x: x ** 3, float_elements(-5, 5)),
    ("integer_pow_7", lambda x: lax.integer_pow(x, 7), float_elements(-2, 2)),
    ("integer_pow_-1", lambda x: lax.integer_pow(x, -1), float_elements(away_from_zero=0.2)),
    ("integer_pow_-3", lambda x: x ** -3, float_elements(-5, 5, away_from_zero=0.3)),
    ("stop_gradient", lambda x: lax.stop_gradient(x) * x, float_elements()),
    ("convert_f16_roundtrip",
     lambda x: x.astype(jnp.float16).astype(jnp.float32) * x, float_elements()),
    ("convert_to_int", lambda x: x.astype(jnp.int32).astype(jnp.float32) + x, float_elements()),
    ("copy", lambda x: lax.copy_p.bind(x), float_elements()),
]


@pytest.mark.parametrize("name,fn,elements", UNARY, ids=[r[0] for r in UNARY])
@FEW
@given(data=st.data())
def test_unary_grad(name, fn, elements, data):
    x = data.draw(arrays(F32, shapes(), elements))
    check_grad(fn, x)


# -- elementwise binary, with numpy broadcasting (exercises sum_to) ---------------------------
NONZERO = float_elements(-5, 5, away_from_zero=0.25)
BINARY = [
    ("add", jnp.add, float_elements(), float_elements()),
    ("sub", jnp.subtract, float_elements(), float_elements()),
    ("mul", jnp.multiply, DY, DY),
    ("div", jnp.divide, float_elements(-5, 5), NONZERO),
    ("rem", jnp.fmod, float_elements(-5, 5),  # lax.rem with broadcasting
     float_elements(-5, 5, away_from_zero=0.25)),
    ("max", jnp.maximum, DY, DY),   # dyadic values: ties are frequent
    ("min", jnp.minimum, DY, DY),
    ("pow", jnp.power, float_elements(0.1, 4), float_elements(-2, 2)),
]


def _both_args(fn):
    return lambda x, y: fn(x, y)


@pytest.mark.parametrize("name,fn,ex,ey", BINARY, ids=[r[0] for r in BINARY])
@FEW
@given(data=st.data())
def test_binary_grad_broadcasting(name, fn, ex, ey, data):
    sx, sy = data.draw(bshapes(2)).input_shapes
    x = data.draw(arrays(F32, sx, ex))
    y = data.draw(arrays(F32, sy, ey))
    if name == "rem":  # keep x/y away from integers, where trunc(x/y) jumps
        q = np.asarray(x / y)
        if np.any(np.abs(q - np.round(q)) < 1e-3):
            return
    check_grad(fn, x, y, argnums=(0, 1))


@pytest.mark.parametrize("shapes_", [((), (3, 4)), ((1, 4), (3, 4)), ((3, 1), (1, 4)),
                                     ((4,), (2, 3, 4))], ids=str)
@pytest.mark.parametrize("fn", [jnp.add, jnp.subtract, jnp.multiply, jnp.divide],
                         ids=["add", "sub", "mul", "div"])
def test_binary_grad_scalar_and_row_broadcast(shapes_, fn):
    rng = np.random.default_rng(0)
    x = rng.uniform(0.5, 2, shapes_[0]).astype(np.float32)
    y = rng.uniform(0.5, 2, shapes_[1]).astype(np.float32)
    check_grad(fn, x, y, argnums=(0, 1))
    check_grad(fn, y, x, argnums=(0, 1))


def test_max_min_ties_split_cotangent():
    x = np.array([1.0, 2.0, 3.0, -1.0, 0.0], np.float32)
    y = np.array([1.0, 1.0, 4.0, -1.0, -0.0], np.float32)
    for fn in (jnp.maximum, jnp.minimum):
        check_grad(fn, x, y, argnums=(0, 1))


def test_pow_zero_base_and_zero_exponent():
    # d/dy x^y at x == 0 uses log(1) (JAX's convention); d/dx at y == 0 is 0, not 0*inf.
    x = np.array([0.0, 0.0, 0.0, 2.0, 0.0, 1.5], np.float32)
    y = np.array([2.0, 0.5, 0.0, 0.0, 1.0, 3.0], np.float32)
    check_grad(jnp.power, x, y, argnums=(0, 1))
    check_grad(jnp.power, x, y, argnums=1)


def test_integer_pow_at_zero():
    x = np.array([0.0, 1.0, -2.0], np.float32)
    for n in (0, 1, 2, 3):
        check_grad(lambda v, n=n: lax.integer_pow(v, n), x)


# -- select / clamp ---------------------------------------------------------------------------
@FEW
@given(data=st.data())
def test_select_grad(data):
    sc, sx, sy = data.draw(bshapes(3)).input_shapes
    c = data.draw(arrays(np.bool_, sc))
    x = data.draw(arrays(F32, sx, DY))
    y = data.draw(arrays(F32, sy, DY))
    check_grad(lambda c, x, y: jnp.where(c, x, y), c, x, y, argnums=(1, 2))


@FEW
@given(data=st.data())
def test_clip_grad(data):
    # jnp.clip is maximum/minimum (ties split); values on a k/4 grid hit the bounds often.
    x = data.draw(arrays(F32, shapes(), DY))
    check_grad(lambda x: jnp.clip(x, -1.0, 1.5), x)
    check_grad(lambda x, lo, hi: jnp.clip(x, lo, hi), x, np.float32(-1.0), np.float32(1.5),
               argnums=(0, 1, 2))


@FEW
@given(data=st.data())
def test_lax_clamp_grad(data):
    # lax.clamp has its own JVP: no gradient at all on exact ties with a bound.
    # (jax.grad w.r.t. a scalar bound of an array operand fails inside JAX's clamp JVP,
    # so scalar bounds are only tested w.r.t. x; array bounds w.r.t. everything.)
    shape = data.draw(shapes())
    x = data.draw(arrays(F32, shape, DY))
    lo, hi = data.draw(arrays(F32, shape, DY)), data.draw(arrays(F32, shape, DY))
    check_grad(lambda lo, x, hi: lax.clamp(lo, x, hi), lo, x, hi, argnums=(0, 1, 2))
    lo, hi = np.float32(data.draw(DY)), np.float32(data.draw(DY))
    check_grad(lambda x: lax.clamp(lo, x, hi), x)


def test_lax_clamp_grad_array_bounds():
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0], np.float32)
    lo = np.array([-1.0, -1.0, -1.0, 2.0, 1.0, 0.0], np.float32)
    hi = np.array([1.0, 1.0, 1.0, 1.0, 2.0, 2.0], np.float32)
    check_grad(lambda lo, x, hi: lax.clamp(lo, x, hi), lo, x, hi, argnums=(0, 1, 2))


# -- reductions -------------------------------------------------------------------------------
@st.composite
def reduce_problems(draw, elements=DY):
    shape = draw(shapes(min_dims=1))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), unique=True, min_size=1,
                         max_size=len(shape)).map(tuple))
    return draw(arrays(F32, shape, elements)), axes


@pytest.mark.parametrize("fn", [jnp.sum, jnp.max, jnp.min], ids=["sum", "max", "min"])
@FEW
@given(prob=reduce_problems(st.integers(-2, 2).map(float)))  # small ints: many ties
def test_reduce_grad(fn, prob):
    x, axes = prob
    check_grad(lambda v: fn(v, axis=axes), x)


@FEW
@given(prob=reduce_problems(st.one_of(st.just(0.0), float_elements(-2, 2))))
def test_reduce_prod_grad(prob):
    # JAX's reduce_prod gradient is the product of the other elements (exact with zeros).
    x, axes = prob
    check_grad(lambda v: jnp.prod(v, axis=axes), x)


def test_reduce_prod_grad_zeros():
    x = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0], [1.5, -2.0, 4.0], [0.0, 7.0, 0.0]],
                 np.float32)
    check_grad(lambda v: jnp.prod(v, axis=1), x)
    check_grad(lambda v: jnp.prod(v, axis=0), x)
    check_grad(jnp.prod, x)


# -- dot_general ------------------------------------------------------------------------------
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_dot_general_grad(data):
    lshape, rshape, dn = data.draw(dot_problems())
    a = data.draw(arrays(F32, lshape, DY))
    b = data.draw(arrays(F32, rshape, DY))
    check_grad(lambda x, y: lax.dot_general(x, y, dn), a, b, argnums=(0, 1))


def test_dot_general_preferred_element_type_grad():
    a = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    b = np.arange(12, dtype=np.float32).reshape(3, 4) / 8
    check_grad(lambda x, y: lax.dot(x, y, preferred_element_type=jnp.float32), a, b,
               argnums=(0, 1))


# -- shape ops --------------------------------------------------------------------------------
@FEW
@given(data=st.data())
def test_broadcast_in_dim_grad(data):
    shape = data.draw(shapes(max_dims=2))
    out = data.draw(st.lists(st.integers(1, 3), min_size=len(shape), max_size=len(shape)))
    # operand dims of size 1 are stretched to the drawn size, others kept; a new leading dim
    target = (2,) + tuple(o if d == 1 else d for d, o in zip(shape, out))
    x = data.draw(arrays(F32, shape, DY))
    check_grad(lambda v: lax.broadcast_in_dim(v, target, tuple(range(1, len(shape) + 1))), x)
    check_grad(lambda v: jnp.broadcast_to(v, target), x)


@FEW
@given(data=st.data())
def test_reshape_transpose_grad(data):
    shape = data.draw(shapes(min_dims=1))
    x = data.draw(arrays(F32, shape, DY))
    perm = tuple(data.draw(st.permutations(range(len(shape)))))
    check_grad(lambda v: jnp.reshape(v, (-1,)), x)
    check_grad(lambda v: jnp.transpose(v, perm) * 2.0, x)


@FEW
@given(data=st.data())
def test_squeeze_expand_dims_rev_grad(data):
    shape = data.draw(shapes(min_dims=1))
    x = data.draw(arrays(F32, shape, DY))[None]
    axes = data.draw(st.lists(st.integers(0, len(shape)), unique=True, min_size=1))
    check_grad(lambda v: jnp.squeeze(v, 0), x)
    check_grad(lambda v: jnp.expand_dims(v, 1), x)
    check_grad(lambda v: lax.rev(v, tuple(axes)), x)


@FEW
@given(data=st.data())
def test_concatenate_grad(data):
    shape = data.draw(shapes(min_dims=1))
    axis = data.draw(st.integers(0, len(shape) - 1))
    sizes = data.draw(st.lists(st.integers(1, 3), min_size=2, max_size=3))
    xs = [data.draw(arrays(F32, shape[:axis] + (n,) + shape[axis + 1:], DY)) for n in sizes]
    argnums = tuple(range(len(xs)))
    check_grad(lambda *v: jnp.concatenate(v, axis=axis), *xs, argnums=argnums)
    check_grad(lambda *v: jnp.concatenate(v, axis=axis), *xs, argnums=1)


@st.composite
def slice_problems(draw):
    shape = draw(shapes(min_dims=1, max_side=7))
    start, limit, strides = [], [], []
    for d in shape:
        s = draw(st.integers(0, d - 1))
        l = draw(st.integers(s + 1, d))
        start.append(s), limit.append(l), strides.append(draw(st.integers(1, 3)))
    return shape, tuple(start), tuple(limit), tuple(strides)


@FEW
@given(prob=slice_problems(), data=st.data())
def test_slice_grad(prob, data):
    shape, start, limit, strides = prob
    x = data.draw(arrays(F32, shape, DY))
    check_grad(lambda v: lax.slice(v, start, limit, strides), x)


@st.composite
def pad_problems(draw):
    shape = draw(shapes(min_dims=1, max_dims=3, max_side=4))
    cfg = []
    for d in shape:
        interior = draw(st.integers(0, 2))
        full = d + max(0, d - 1) * interior
        lo = draw(st.integers(-(full - 1), 3))
        hi = draw(st.integers(-(full - 1 + min(lo, 0)), 3))
        cfg.append((lo, hi, interior))
    return shape, tuple(cfg)


@FEW
@given(prob=pad_problems(), data=st.data())
def test_pad_grad(prob, data):
    shape, cfg = prob
    x = data.draw(arrays(F32, shape, DY))
    v = np.float32(data.draw(DY))
    check_grad(lambda x, v: lax.pad(x, v, cfg), x, v, argnums=(0, 1))
    # jax.grad w.r.t. the padding value alone fails inside JAX (its pad transpose sums a
    # None operand cotangent), so the oracle for argnums=1 is the second half of (0, 1).
    loss = weighted(lambda x, v: lax.pad(x, v, cfg))
    assert_tree_close(grad_of(loss, (x, v), 1), jax.grad(loss, (0, 1))(x, v)[1])


def test_pad_grad_negative_and_interior():
    x = (np.arange(12, dtype=np.float32).reshape(3, 4) - 5) / 4
    for cfg in [((-1, 2, 1), (1, -2, 0)), ((0, 0, 2), (-3, -1, 1)), ((2, -3, 0), (0, 1, 3))]:
        check_grad(lambda x, v: lax.pad(x, v, cfg), x, np.float32(0.75), argnums=(0, 1))
        # the padded result itself is needed by the backward pass: a runtime padding value
        check_grad(lambda x, v: lax.pad(x, v, cfg) ** 2, x, np.float32(0.75), argnums=(0, 1))


# -- API --------------------------------------------------------------------------------------
def _mlp_loss(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((h @ params["w2"]) ** 2)


def _params():
    rng = np.random.default_rng(1)
    return {"w1": rng.normal(size=(3, 4)).astype(np.float32),
            "b1": rng.normal(size=(4,)).astype(np.float32),
            "w2": rng.normal(size=(4, 2)).astype(np.float32)}


X = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)


@pytest.mark.parametrize("argnums", [0, 1, (0,), (0, 1), (1, 0)], ids=str)
def test_argnums_and_pytree_params(argnums):
    got = grad_of(_mlp_loss, (_params(), X), argnums)
    want = jax.grad(_mlp_loss, argnums)(_params(), X)
    assert_tree_close(got, want)


def test_tuple_params_value_and_grad():
    def loss(wb, x):
        w, (b, c) = wb
        return jnp.sum(jnp.sin(x @ w + b) * c)

    rng = np.random.default_rng(3)
    wb = (rng.normal(size=(3, 2)).astype(np.float32),
          (rng.normal(size=(2,)).astype(np.float32), np.float32(1.5)))
    got = grad_of(loss, (wb, X), 0, value=True)
    want = jax.value_and_grad(loss)(wb, X)
    assert_tree_close(got, want)


@pytest.mark.parametrize("value", [False, True], ids=["grad", "value_and_grad"])
def test_has_aux(value):
    def loss(params, x):
        y = x @ params["w1"]
        return jnp.sum(y ** 2), {"mean": jnp.mean(y), "y": y}

    got = grad_of(loss, (_params(), X), 0, value=value, has_aux=True)
    jf = jax.value_and_grad if value else jax.grad
    want = jf(loss, has_aux=True)(_params(), X)
    assert_tree_close(got, want)


def test_unused_input_gets_zeros():
    def loss(a, b, c):
        return jnp.sum(a * 2.0) + jnp.sum(lax.stop_gradient(c))

    a, b, c = (np.ones((2, 3), np.float32), np.ones((4,), np.float32),
               np.ones((3,), np.float32))
    got = grad_of(loss, (a, b, c), (0, 1, 2))
    want = jax.grad(loss, (0, 1, 2))(a, b, c)
    assert_tree_close(got, want)


def test_int_argument_in_argnums_is_rejected():
    def loss(x, n):
        return jnp.sum(x * n)

    x, n = np.ones(3, np.float32), np.int32(2)
    with pytest.raises(rlxjax.ArgumentError):
        rlxjax.coreml_grad(loss, argnums=1, backend="reference").lower(x, n)
    # but an int argument outside argnums is fine
    got = grad_of(loss, (x, n), 0)
    assert_tree_close(got, jax.grad(loss)(x, n))


def test_non_scalar_loss_is_rejected():
    with pytest.raises(rlxjax.ArgumentError):
        rlxjax.coreml_grad(lambda x: x * 2.0, backend="reference").lower(X)
    with pytest.raises(rlxjax.ArgumentError):
        rlxjax.coreml_grad(lambda x: (jnp.sum(x), jnp.sum(x)),
                           backend="reference").lower(X)


def test_static_argnums_with_argnums():
    def loss(params, act, x):
        f = jnp.tanh if act == "tanh" else jax.nn.relu
        return jnp.mean(f(x @ params["w1"] + params["b1"]))

    for act in ("tanh", "relu"):
        got = grad_of(loss, (_params(), act, X), (0, 2), static_argnums=1)
        want = jax.grad(loss, (0, 2))(_params(), act, X)
        assert_tree_close(got, want)
