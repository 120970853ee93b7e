"""rlxjax.nn in plain JAX: each norm is one primitive equation, and eager / jit / grad /
vmap agree with the jax.numpy references (and with flax / equinox layers)."""
from __future__ import annotations

import equinox as eqx
import flax.linen as flax_nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlxjax.nn as rnn
from rlxjax.nn import reference as R

from helpers import examples

FWD_TOL = dict(rtol=1e-5, atol=1e-6)
GRAD_TOL = dict(rtol=1e-4, atol=1e-5)
# flax / equinox order the same maths differently (e.g. flax folds gamma into the rsqrt
# factor before multiplying, equinox clamps the variance at 0 and applies
# `weight * out + bias`): a few fp32 ulps on O(1) values, so 1e-5 both ways.
LIB_TOL = dict(rtol=1e-5, atol=1e-5)
FP16_TOL = dict(rtol=2e-2, atol=2e-2)

SETTINGS = settings(max_examples=examples(10), deadline=None, derandomize=True)
FEW = settings(max_examples=examples(5), deadline=None, derandomize=True)

EPS = st.sampled_from([1e-6, 1e-5, 1e-3, 0.1])
dim = st.integers(1, 4)


class Case:
    """One call: ``pos`` names the positional operands (absent names are passed as None),
    ``kw`` names keyword array operands, ``static`` holds the other keyword params."""

    def __init__(self, op, arrays, pos, kw=(), static=None):
        self.op, self.arrays, self.pos, self.kw = op, arrays, tuple(pos), tuple(kw)
        self.static = static or {}

    @property
    def fn(self):
        return getattr(rnn, self.op)

    @property
    def ref(self):
        return getattr(R, self.op + "_ref")

    @property
    def names(self):  # operands present, in bind order
        return [n for n in self.pos + self.kw if n in self.arrays]

    def call(self, fn, arrays=None):
        a = self.arrays if arrays is None else arrays
        return fn(*[a.get(n) for n in self.pos], **{n: a[n] for n in self.kw}, **self.static)

    def __repr__(self):
        shapes = {k: v.shape for k, v in self.arrays.items()}
        return f"Case({self.op}, {shapes}, {self.static})"


def _arrays(draw, shapes, positive=()):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    out = {}
    for name, shape in shapes.items():
        if shape is None:
            continue
        a = rng.standard_normal(shape).astype(np.float32)
        if name in positive:
            a = np.abs(a) + 0.5
        if name == "x":  # non-zero mean and a spread of scales
            a = a * 1.5 + 0.3
        out[name] = jnp.asarray(a)
    return out


def _maybe(draw, shape):
    return shape if draw(st.booleans()) else None


@st.composite
def trailing_norm_case(draw, op):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(dim) for _ in range(rank))
    if shape[-1] == 1:
        shape = shape[:-1] + (3,)
    axis = draw(st.integers(-rank, rank - 1))
    trail = shape[axis % rank:]
    arrs = _arrays(draw, dict(x=shape, gamma=_maybe(draw, trail), beta=_maybe(draw, trail)))
    return Case(op, arrs, ("x", "gamma", "beta"), static=dict(axis=axis, eps=draw(EPS)))


@st.composite
def group_norm_case(draw, channels_last=None):
    n = draw(st.integers(1, 3))
    groups = draw(st.integers(1, 3))
    c = groups * draw(st.integers(1, 3))
    spatial = tuple(draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2))))
    if channels_last is None:
        channels_last = draw(st.booleans())
    shape = (n,) + spatial + (c,) if channels_last else (n, c) + spatial
    arrs = _arrays(draw, dict(x=shape, gamma=_maybe(draw, (c,)), beta=_maybe(draw, (c,))))
    return Case("group_norm", arrs, ("x", "gamma", "beta"),
                static=dict(num_groups=groups, eps=draw(EPS),
                            channel_axis=-1 if channels_last else 1))


def _feature_shape(draw, min_rank=1):
    rank = draw(st.integers(min_rank, 3))
    shape = tuple(draw(dim) for _ in range(rank))
    axis = draw(st.integers(-rank, rank - 1))
    return shape, axis


@st.composite
def batch_norm_case(draw):
    shape, axis = _feature_shape(draw)
    c = (shape[axis],)
    arrs = _arrays(draw, dict(x=shape, gamma=_maybe(draw, c), beta=_maybe(draw, c),
                              mean=c, var=c), positive=("var",))
    return Case("batch_norm", arrs, ("x", "gamma", "beta", "mean", "var"),
                static=dict(axis=axis, eps=draw(EPS)))


@st.composite
def batch_norm_train_case(draw):
    shape, axis = _feature_shape(draw)
    if np.prod(shape) == shape[axis]:  # at least two samples per feature
        shape = (2,) + shape
        axis = axis if axis < 0 else axis + 1
    c = (shape[axis],)
    arrs = _arrays(draw, dict(x=shape, gamma=_maybe(draw, c), beta=_maybe(draw, c),
                              running_mean=c, running_var=c), positive=("running_var",))
    return Case("batch_norm_train", arrs, ("x", "gamma", "beta"),
                kw=("running_mean", "running_var"),
                static=dict(axis=axis, eps=draw(EPS),
                            momentum=draw(st.sampled_from([0.0, 0.9, 0.99]))))


@st.composite
def layer_norm2d_case(draw):
    shape = (draw(dim), draw(st.integers(2, 4))) + tuple(
        draw(dim) for _ in range(draw(st.integers(1, 2))))
    c = (shape[1],)
    arrs = _arrays(draw, dict(x=shape, gamma=_maybe(draw, c), beta=_maybe(draw, c)))
    return Case("layer_norm2d", arrs, ("x", "gamma", "beta"), static=dict(eps=draw(EPS)))


def _broadcastable(draw, shape):
    """A shape that broadcasts to ``shape`` (numpy rules): drop leading dims, set some to 1."""
    k = draw(st.integers(0, len(shape)))
    return tuple(1 if draw(st.booleans()) else d for d in shape[k:])


@st.composite
def ada_layer_norm_case(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(dim) for _ in range(rank - 1)) + (draw(st.integers(2, 5)),)
    arrs = _arrays(draw, dict(x=shape, scale=_broadcastable(draw, shape),
                              shift=_broadcastable(draw, shape)))
    return Case("ada_layer_norm", arrs, ("x", "scale", "shift"),
                static=dict(kind=draw(st.sampled_from(["layer", "rms"])), eps=draw(EPS)))


@st.composite
def gated_residual_case(draw):
    shape = tuple(draw(dim) for _ in range(draw(st.integers(1, 3))))
    arrs = _arrays(draw, dict(x=shape, y=shape, gate=_broadcastable(draw, shape)))
    return Case("gated_residual", arrs, ("x", "y", "gate"))


CASES = {
    "layer_norm": trailing_norm_case("layer_norm"),
    "rms_norm": trailing_norm_case("rms_norm"),
    "group_norm": group_norm_case(),
    "batch_norm": batch_norm_case(),
    "batch_norm_train": batch_norm_train_case(),
    "layer_norm2d": layer_norm2d_case(),
    "ada_layer_norm": ada_layer_norm_case(),
    "gated_residual": gated_residual_case(),
}
OPS = list(CASES)
PRIM_NAME = {op: "rlx_" + op for op in OPS}


def assert_close(got, want, **tol):
    got_l, got_t = jax.tree_util.tree_flatten(got)
    want_l, want_t = jax.tree_util.tree_flatten(want)
    assert got_t == want_t
    for g, w in zip(got_l, want_l):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape, w.dtype)
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), **tol)


def eqn_prims(jaxpr):
    return [e.primitive.name for e in jaxpr.jaxpr.eqns]


# ---------------------------------------------------------------------------------------
# one primitive, eager / jit / grad / vmap against the reference


@pytest.mark.parametrize("op", OPS)
@SETTINGS
@given(data=st.data())
def test_single_equation(op, data):
    case = data.draw(CASES[op])
    names = case.names
    jaxpr = jax.make_jaxpr(lambda *ops: case.call(case.fn, dict(zip(names, ops))))(
        *[case.arrays[n] for n in names])
    assert eqn_prims(jaxpr) == [PRIM_NAME[op]]
    eqn = jaxpr.jaxpr.eqns[0]
    assert eqn.primitive is rnn.PRIMITIVES[PRIM_NAME[op]]
    assert len(eqn.invars) == len(names)
    for v in eqn.params.values():
        hash(v)
    if "axis" in eqn.params:
        assert 0 <= eqn.params["axis"] < case.arrays["x"].ndim


def _stack(trees):
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *trees)


def _sum_sin(tree):
    return sum(jnp.sum(jnp.sin(o)) for o in jax.tree_util.tree_leaves(tree))


@pytest.mark.parametrize("op", OPS)
@FEW
@given(data=st.data())
def test_matches_reference_under_transforms(op, data):
    """The default suite's examples of ``_under_transforms`` (two XLA compiles each)."""
    _under_transforms(op, data)


@pytest.mark.slow
@pytest.mark.parametrize("op", OPS)
@settings(max_examples=25, deadline=None, derandomize=True)
@given(data=st.data())
def test_matches_reference_under_transforms_more_examples(op, data):
    _under_transforms(op, data)


def _under_transforms(op, data):
    """Eager, jit, grad w.r.t. every operand, jvp (other operands' tangents are symbolic
    zeros), vmap of x alone and of x with the next operand, jit(vmap), vmap(grad) -- all
    against the jax.numpy reference; vmaps against a per-example loop of it.

    Everything but the eager call is traced into ONE jitted function per side (the
    primitive's side runs its jit / JVP / batching rules at trace time): compiling twice
    costs far less than compiling each transform, or each eager reference op, separately.
    """
    case = data.draw(CASES[op])
    names = case.names
    ops = [case.arrays[n] for n in names]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    normal = lambda shape: jnp.asarray(rng.standard_normal(shape).astype(np.float32))  # noqa
    out_shapes = jax.eval_shape(lambda: case.call(case.ref))
    w = [normal(o.shape) for o in jax.tree_util.tree_leaves(out_shapes)]
    tx = normal(case.arrays["x"].shape)
    b = data.draw(st.integers(1, 3))
    second = next((n for n in names if n != "x"), None)
    vsets = [("x",)] + ([("x", second)] if second else [])
    stacked = {n: normal((b,) + case.arrays[n].shape) for n in ("x", second) if n}
    if second in ("var", "running_var"):
        stacked[second] = jnp.abs(stacked[second]) + 0.5

    def run(fn, use_vmap):
        def loss(*ops):
            out = case.call(fn, dict(zip(names, ops)))
            return sum(jnp.sum(o * wi) for o, wi in zip(jax.tree_util.tree_leaves(out), w))

        def batched(f):  # f: (*per-example args) -> out; vmap or python loop
            if use_vmap:
                return jax.vmap(f)
            return lambda *bs: _stack([f(*(a[i] for a in bs)) for i in range(b)])

        def body(ops, stacked):
            arrs = dict(zip(names, ops))
            call = lambda **kw: case.call(fn, dict(arrs, **kw))  # noqa: E731
            res = {"jit": call()}
            res["grad"] = jax.grad(loss, tuple(range(len(ops))))(*ops)
            res["jvp"] = jax.jvp(lambda x: call(x=x), (arrs["x"],), (tx,))
            for v in vsets:
                f = lambda *bops, v=v: call(**dict(zip(v, bops)))  # noqa: E731
                res["vmap" + "+".join(v)] = batched(f)(*[stacked[n] for n in v])
            res["vmap(grad)"] = batched(jax.grad(lambda x: _sum_sin(call(x=x))))(stacked["x"])
            return res
        return jax.jit(body)

    got = run(case.fn, True)(ops, stacked)
    want = run(case.ref, False)(ops, stacked)
    for key in want:
        tol = GRAD_TOL if "grad" in key or key == "jvp" else FWD_TOL
        try:
            assert_close(got[key], want[key], **tol)
        except AssertionError as e:
            raise AssertionError(f"{key}: {e}") from None
    assert_close(case.call(case.fn), want["jit"], **FWD_TOL)  # eager
    # only x batched: the batching rule keeps the primitive (batch_norm_train's statistics
    # would change, so it vmaps its reference instead)
    fx = jax.vmap(lambda x: case.call(case.fn, dict(case.arrays, x=x)))
    prims = eqn_prims(jax.make_jaxpr(fx)(stacked["x"]))
    assert prims.count(PRIM_NAME[op]) == (0 if op == "batch_norm_train" else 1), prims
    # ... and so does reverse mode (the JVP rule binds the primitive for the primal)
    gx = jax.grad(lambda x: _sum_sin(case.call(case.fn, dict(case.arrays, x=x))))
    assert PRIM_NAME[op] in eqn_prims(jax.make_jaxpr(gx)(case.arrays["x"]))


def test_vmap_non_leading_batch_dim():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((3, 4, 5)).astype(np.float32))
    g = jnp.asarray(rng.standard_normal((3, 4)).astype(np.float32))
    got = jax.vmap(lambda xi: rnn.layer_norm(xi, g, axis=0), in_axes=2, out_axes=1)(x)
    want = jnp.stack([R.layer_norm_ref(x[:, :, i], g, axis=0) for i in range(5)], axis=1)
    assert_close(got, want, **FWD_TOL)
    gate = jnp.asarray(rng.standard_normal((5, 4)).astype(np.float32))
    got = jax.vmap(rnn.gated_residual, in_axes=(None, 2, 0))(x[:, :, 0], x, gate)
    want = jnp.stack([x[:, :, 0] + gate[i] * x[:, :, i] for i in range(5)])
    assert_close(got, want, **FWD_TOL)


@pytest.mark.parametrize("op", OPS)
@FEW
@given(data=st.data())
def test_fp16_in_fp16_out(op, data):
    case = data.draw(CASES[op])
    half = {n: a.astype(jnp.float16) for n, a in case.arrays.items()}
    names = case.names
    jitted = lambda fn: jax.jit(lambda *ops: case.call(fn, dict(zip(names, ops))))  # noqa
    want = jitted(case.ref)(*[half[n] for n in names])
    for got in (case.call(case.fn, half), jitted(case.fn)(*[half[n] for n in names])):
        for leaf in jax.tree_util.tree_leaves(got):
            assert leaf.dtype == jnp.float16
        assert_close(got, want, **FP16_TOL)


def test_operands_cast_to_x_dtype():
    x = jnp.ones((2, 3), jnp.float16)
    y = rnn.layer_norm(x, np.ones(3, np.float32), jnp.zeros(3, jnp.float32))
    assert y.dtype == jnp.float16
    jaxpr = jax.make_jaxpr(lambda x, g: rnn.layer_norm(x, g))(x, jnp.ones(3, jnp.float16))
    assert eqn_prims(jaxpr) == ["rlx_layer_norm"]


def test_primitives_exported():
    from rlxjax.nn import primitives as P
    assert set(rnn.PRIMITIVES) == set(PRIM_NAME.values())
    assert P.layer_norm_p.name == "rlx_layer_norm"
    assert P.batch_norm_train_p.multiple_results
    assert rnn.PRIMITIVES["rlx_gated_residual"] is P.gated_residual_p


# ---------------------------------------------------------------------------------------
# against flax.linen and equinox


def _flax_apply(module, x, params, **kw):
    return module.apply({"params": params} if params else {}, x, **kw)


@FEW
@given(case=trailing_norm_case("layer_norm"))
def test_layer_norm_vs_flax_and_equinox(case):
    x, g, b = (case.arrays.get(n) for n in ("x", "gamma", "beta"))
    axis, eps = case.static["axis"] % x.ndim, case.static["eps"]
    got = case.call(case.fn)
    axes = tuple(range(axis, x.ndim))
    m = flax_nn.LayerNorm(epsilon=eps, use_fast_variance=False, reduction_axes=axes,
                          feature_axes=axes, use_scale=g is not None, use_bias=b is not None)
    params = {k: v for k, v in (("scale", g), ("bias", b)) if v is not None}
    assert_close(got, _flax_apply(m, x, params), **LIB_TOL)

    trail = x.shape[axis:]
    e = eqx.nn.LayerNorm(trail, eps=eps, use_weight=g is not None, use_bias=b is not None)
    e = eqx.tree_at(lambda e: (e.weight, e.bias), e, (g, b), is_leaf=lambda v: v is None)
    f = e
    for _ in range(axis):
        f = jax.vmap(f)
    assert_close(got, f(x), **LIB_TOL)


@FEW
@given(case=trailing_norm_case("rms_norm"))
def test_rms_norm_vs_flax_and_equinox(case):
    x, g, b = (case.arrays.get(n) for n in ("x", "gamma", "beta"))
    axis, eps = case.static["axis"] % x.ndim, case.static["eps"]
    got = case.call(case.fn)
    axes = tuple(range(axis, x.ndim))
    if b is None:  # flax's RMSNorm has no bias
        m = flax_nn.RMSNorm(epsilon=eps, reduction_axes=axes, feature_axes=axes,
                            use_scale=g is not None)
        assert_close(got, _flax_apply(m, x, {"scale": g} if g is not None else {}), **LIB_TOL)
    e = eqx.nn.RMSNorm(x.shape[axis:], eps=eps, use_weight=g is not None,
                       use_bias=b is not None)
    e = eqx.tree_at(lambda e: (e.weight, e.bias), e, (g, b), is_leaf=lambda v: v is None)
    f = e
    for _ in range(axis):
        f = jax.vmap(f)
    assert_close(got, f(x), **LIB_TOL)


@FEW
@given(case=group_norm_case(channels_last=True))
def test_group_norm_vs_flax(case):
    x, g, b = (case.arrays.get(n) for n in ("x", "gamma", "beta"))
    m = flax_nn.GroupNorm(num_groups=case.static["num_groups"], epsilon=case.static["eps"],
                          use_fast_variance=False, use_scale=g is not None,
                          use_bias=b is not None)
    params = {k: v for k, v in (("scale", g), ("bias", b)) if v is not None}
    assert_close(case.call(case.fn), _flax_apply(m, x, params), **LIB_TOL)


@FEW
@given(case=group_norm_case(channels_last=False))
def test_group_norm_vs_equinox(case):
    x, g, b = (case.arrays.get(n) for n in ("x", "gamma", "beta"))
    c = x.shape[1]
    g = jnp.ones((c,)) if g is None else g   # equinox: both affine params or neither
    b = jnp.zeros((c,)) if b is None else b
    e = eqx.nn.GroupNorm(case.static["num_groups"], c, eps=case.static["eps"])
    e = eqx.tree_at(lambda e: (e.weight, e.bias), e, (g, b))
    got = rnn.group_norm(x, g, b, num_groups=case.static["num_groups"],
                         eps=case.static["eps"], channel_axis=1)
    assert_close(got, jax.vmap(e)(x), **LIB_TOL)


@FEW
@given(case=batch_norm_train_case())
def test_batch_norm_train_vs_flax(case):
    a = case.arrays
    x, g, b = a["x"], a.get("gamma"), a.get("beta")
    s = case.static
    m = flax_nn.BatchNorm(use_running_average=False, axis=s["axis"], momentum=s["momentum"],
                          epsilon=s["eps"], use_fast_variance=False,
                          use_scale=g is not None, use_bias=b is not None)
    variables = {"batch_stats": {"mean": a["running_mean"], "var": a["running_var"]}}
    params = {k: v for k, v in (("scale", g), ("bias", b)) if v is not None}
    if params:
        variables["params"] = params
    want_y, updates = m.apply(variables, x, mutable=["batch_stats"])
    y, new_mean, new_var = case.call(case.fn)
    assert_close(y, want_y, **LIB_TOL)
    assert_close(new_mean, updates["batch_stats"]["mean"], **LIB_TOL)
    assert_close(new_var, updates["batch_stats"]["var"], **LIB_TOL)
    # and flax's inference path agrees with the frozen-statistics op
    m_inf = m.clone(use_running_average=True)
    got_inf = rnn.batch_norm(x, g, b, a["running_mean"], a["running_var"], eps=s["eps"],
                             axis=s["axis"])
    assert_close(got_inf, m_inf.apply(variables, x), **LIB_TOL)


# ---------------------------------------------------------------------------------------
# validation


X = jnp.ones((2, 6, 3, 3))


@pytest.mark.parametrize("call, match", [
    (lambda: rnn.layer_norm(X, jnp.ones(4)), "gamma must have shape"),
    (lambda: rnn.layer_norm(X, axis=4), "out of range"),
    (lambda: rnn.layer_norm(X, axis=1.5), "must be an int"),
    (lambda: rnn.layer_norm(X, eps=-1.0), "eps"),
    (lambda: rnn.rms_norm(X, None, jnp.ones((3,)), axis=1), "beta must have shape"),
    (lambda: rnn.layer_norm(jnp.ones((2, 3), jnp.int32)), "floating-point"),
    (lambda: rnn.group_norm(X, None, None, num_groups=4), "does not divide"),
    (lambda: rnn.group_norm(X, None, None, num_groups=0), "positive int"),
    (lambda: rnn.group_norm(X, None, None, num_groups=2, channel_axis=0), "channel_axis"),
    (lambda: rnn.group_norm(X, jnp.ones(3), None, num_groups=2), "gamma must have shape"),
    (lambda: rnn.batch_norm(X, None, None, jnp.ones(6), jnp.ones(6)), "mean must have shape"),
    (lambda: rnn.batch_norm(X, None, None, None, jnp.ones(3)), "mean is required"),
    (lambda: rnn.batch_norm_train(X, None, None, running_mean=jnp.ones(3),
                                  running_var=jnp.ones(3), momentum=2.0), "momentum"),
    (lambda: rnn.layer_norm2d(jnp.ones((2, 3)), None, None), "rank >= 3"),
    (lambda: rnn.ada_layer_norm(X, jnp.ones(3), jnp.ones(3), kind="group"), "kind"),
    (lambda: rnn.ada_layer_norm(X, jnp.ones((2, 1, 1, 1, 3)), jnp.ones(3)), "broadcast"),
    (lambda: rnn.ada_layer_norm(X, jnp.ones((6, 2)), jnp.ones(3)), "broadcast"),
    (lambda: rnn.gated_residual(X, jnp.ones((2, 6, 3)), 1.0), "same shape"),
    (lambda: rnn.gated_residual(X, X, jnp.ones(2)), "does not broadcast"),
])
def test_validation_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
