"""Control flow: lax.cond / switch -> MIL cond, while_loop / fori_loop -> MIL while_loop,
scan -> MIL while_loop (forward, and a reverse while_loop for its gradient). Everything is compared
with JAX (jax.jit, jax.grad) on the reference backend and passes coremltools' loader."""
from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlxjax
from helpers import assert_tree_close, check_against_jax, examples
from rlxjax.errors import UnsupportedPrimitiveError

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _deterministic_inputs(request):
    # Each test draws its inputs from its own seed, so they do not depend on which tests
    # an xdist worker happened to run before it.
    global RNG
    RNG = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def _f32(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _check_grad(loss, *args, argnums=0, rtol=1e-5):
    """coreml_grad and coreml_jit(jax.grad) against jax.grad. A gradient element is a sum
    of products whose size is that of the largest cotangents, not of the element itself,
    so the absolute tolerance is float32 rounding at the scale of the largest gradient."""
    want = jax.grad(loss, argnums=argnums)(*args)
    scale = max(float(np.max(np.abs(w))) for w in jax.tree_util.tree_leaves(want))
    atol = 1e-6 * max(1.0, scale)
    got = rlxjax.coreml_grad(loss, argnums=argnums)(*args)
    assert_tree_close(got, want, rtol=rtol, atol=atol)
    got2 = rlxjax.coreml_jit(jax.grad(loss, argnums=argnums))(*args)
    assert_tree_close(got2, want, rtol=rtol, atol=atol)


def _histogram(fun, *args):
    return rlxjax.coreml_jit(fun).lower(*args).compile().op_histogram()


# -- cond / switch -----------------------------------------------------------------------------
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_both_branches_match_jax(sign):
    def f(x, w):
        return jax.lax.cond(x.sum() > 0, lambda a, b: jnp.tanh(a @ b),
                            lambda a, b: (jnp.sin(a) @ b) * 2.0, x, w)

    x = np.abs(_f32(4, 3)) * sign
    compiled = check_against_jax(f, x, _f32(3, 5))
    assert compiled.op_histogram().get("cond") == 1


@pytest.mark.parametrize("index", [-3, 0, 1, 2, 7])
def test_switch_clamps_index_like_jax(index):
    branches = [lambda a: a + 1.0, lambda a: a * 3.0, lambda a: -jnp.exp(a)]

    def f(i, x):
        return jax.lax.switch(i, branches, x)

    compiled = check_against_jax(f, np.int32(index), _f32(2, 3))
    assert compiled.op_histogram().get("cond") == 2  # three branches: two nested conds


def test_cond_with_constant_index_compiles_one_branch():
    def f(x):
        return jax.lax.switch(1, [jnp.sin, jnp.cos, jnp.tanh], x)

    compiled = check_against_jax(f, _f32(5))
    hist = compiled.op_histogram()
    assert "cond" not in hist and hist.get("cos") == 1 and "sin" not in hist


def test_cond_with_integer_and_bool_values():
    def f(p, k, m):
        return jax.lax.cond(p, lambda k, m: (k * 2, ~m), lambda k, m: (k - 1, m), k, m)

    k = np.arange(6, dtype=np.int32).reshape(2, 3)
    m = np.array([True, False, True])
    for p in (True, False):
        check_against_jax(f, np.bool_(p), k, m)


def test_cond_branch_passing_an_operand_through():
    def f(x, y):
        return jax.lax.cond(x[0] > 0, lambda a, b: (a, b), lambda a, b: (b, a * 2.0), x, y)

    for s in (1.0, -1.0):
        check_against_jax(f, np.full(3, s, np.float32), _f32(3))


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_gradient(sign):
    def loss(w, x):
        y = jax.lax.cond(x.sum() > 0, lambda a, w: jnp.tanh(a @ w),
                         lambda a, w: jnp.sin(a) @ w * 2.0, x, w)
        return (y ** 2).sum()

    _check_grad(loss, _f32(3, 4), np.abs(_f32(5, 3)) * sign, argnums=(0, 1))


def test_cond_gradient_ignores_the_untaken_branch():
    # sqrt's derivative at a negative number is NaN; the untaken branch must not leak it
    # into the gradient (a select over both branches would).
    def loss(x):
        return jax.lax.cond(x[0] > 0, lambda a: jnp.sqrt(a).sum(), lambda a: (a * a).sum(), x)

    for x in (np.array([-1.0, -4.0], np.float32), np.array([1.0, 4.0], np.float32)):
        got = rlxjax.coreml_grad(loss)(x)
        assert np.all(np.isfinite(got))
        assert_tree_close(got, jax.grad(loss)(x))


def test_switch_gradient_with_int_operand_and_unused_output():
    def loss(w, i, n):
        y, k = jax.lax.switch(i, [lambda w, n: (w * 2.0, n), lambda w, n: (jnp.exp(w), n + 1),
                                  lambda w, n: (w * w, n * 2)], w, n)
        return y.sum() * k.astype(jnp.float32)

    for i in (0, 1, 2):
        _check_grad(loss, _f32(4), np.int32(i), np.int32(3))


# -- while_loop / fori_loop ----------------------------------------------------------------------
def test_while_loop_with_dynamic_trip_count():
    def f(x, n):
        return jax.lax.fori_loop(0, n, lambda i, c: c * 0.5 + jnp.sin(c) * i, x)

    for n in (0, 1, 5):
        compiled = check_against_jax(f, _f32(2, 3), np.int32(n))
    assert compiled.op_histogram().get("while_loop") == 1


def test_while_loop_reads_outer_values_and_carries_mixed_types():
    def f(x, w, limit):
        def cond(c):
            i, v, done = c
            return (i < 20) & ~done & (jnp.abs(v).sum() < limit)

        def body(c):
            i, v, done = c
            v = jnp.tanh(v @ w) + 1.0
            return i + 1, v, v.sum() > 100.0

        return jax.lax.while_loop(cond, body, (jnp.int32(0), x, jnp.bool_(False)))

    check_against_jax(f, _f32(3), _f32(3, 3), np.float32(7.0))


def test_nested_loops():
    def f(x):
        def outer(i, c):
            return jax.lax.fori_loop(0, i + 1, lambda j, d: d + jnp.cos(d) * j, c)

        return jax.lax.while_loop(lambda c: c[0] < 4, lambda c: (c[0] + 1, outer(c[0], c[1])),
                                  (jnp.int32(0), x))

    check_against_jax(f, _f32(4))


def test_gradient_through_a_while_loop_is_a_clear_error():
    def loss(x, n):
        return jax.lax.fori_loop(0, n, lambda i, c: c * c, x).sum()

    with pytest.raises(UnsupportedPrimitiveError, match="while_loop.*scan"):
        rlxjax.coreml_grad(loss)(_f32(3), np.int32(2))


def test_gradient_not_flowing_through_a_while_loop_is_fine():
    def loss(x, n):
        k = jax.lax.fori_loop(0, n, lambda i, c: c + i, jnp.int32(0))
        return (x * x).sum() * k.astype(jnp.float32)

    _check_grad(loss, _f32(3), np.int32(4))


# -- scan ----------------------------------------------------------------------------------------
def _rnn(w, u, h0, xs, reverse=False):
    def step(h, x):
        h = jnp.tanh(h @ w + x @ u)
        return h, (h.sum(), h)

    return jax.lax.scan(step, h0, xs, reverse=reverse)


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_forward_matches_jax(reverse):
    args = (_f32(4, 4, scale=0.5), _f32(3, 4), _f32(4), _f32(6, 3))
    compiled = check_against_jax(lambda *a: _rnn(*a, reverse=reverse), *args)
    assert compiled.op_histogram().get("while_loop") == 1


def test_scan_program_does_not_grow_with_length():
    def f(xs):
        return jax.lax.scan(lambda c, x: (c * 0.9 + x, c), jnp.zeros(3), xs)

    short, long = _histogram(f, _f32(2, 3)), _histogram(f, _f32(50, 3))
    assert short == long


def test_scan_gradient_program_does_not_grow_with_length():
    def loss(w, xs):
        h, _ = jax.lax.scan(lambda h, x: (jnp.tanh(h @ w + x), None), jnp.zeros(3), xs)
        return (h * h).sum()

    def hist(n):
        return rlxjax.coreml_grad(loss).lower(_f32(3, 3), _f32(n, 3)).compile().op_histogram()

    short, long = hist(2), hist(40)
    assert short == long and short.get("while_loop") == 2  # forward and reverse loops


def test_scan_with_consts_int_and_bool_outputs_and_fp16():
    def f(xs, k):
        def step(c, x):
            c = c + x * k
            return c, (c > 0, jnp.int32(3) * (c > 0).astype(jnp.int32))

        return jax.lax.scan(step, jnp.zeros(2), xs)

    check_against_jax(f, _f32(5, 2), np.float32(1.5))
    check_against_jax(f, _f32(5, 2), np.float32(1.5), precision="fp16", rtol=2e-3, atol=2e-3)


def test_fori_loop_with_static_bounds_is_a_scan_and_differentiable():
    def loss(x):
        return jax.lax.fori_loop(0, 4, lambda i, c: jnp.sin(c) * (i + 1.0), x).sum()

    check_against_jax(loss, _f32(3))
    _check_grad(loss, _f32(3))


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_gradient(reverse):
    def loss(w, u, h0, xs):
        h, (s, hs) = _rnn(w, u, h0, xs, reverse=reverse)
        return (h ** 2).sum() + s.sum() + (hs * xs[:, :1]).sum()

    _check_grad(loss, _f32(4, 4, scale=0.5), _f32(3, 4), _f32(4), _f32(5, 3),
                argnums=(0, 1, 2, 3))


def test_nested_control_flow_gradient():
    def loss(w, xs):
        def step(c, x):
            c = jax.lax.cond(x.sum() > 0, lambda c: jnp.tanh(c @ w), lambda c: c * 0.5 + x, c)
            inner, _ = jax.lax.scan(lambda a, _: (jnp.sin(a), None), c, None, length=2)
            return inner, inner.sum()

        c, ys = jax.lax.scan(step, jnp.ones(3), xs)
        return c.sum() + (ys ** 2).sum()

    _check_grad(loss, _f32(3, 3, scale=0.5), _f32(6, 3), argnums=(0, 1))


@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(length=st.integers(1, 6), width=st.integers(1, 4), reverse=st.booleans(),
       seed=st.integers(0, 2**16))
def test_scan_property(length, width, reverse, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((width, width)) * 0.5).astype(np.float32)
    xs = rng.standard_normal((length, 2, width)).astype(np.float32)

    def loss(w, xs):
        def step(c, x):
            c = jnp.tanh(c @ w + x)
            return c, jnp.exp(-c * c).sum(axis=-1)

        c, ys = jax.lax.scan(step, jnp.zeros((2, width)), xs, reverse=reverse)
        return (c * c).sum() + (ys * jnp.arange(1, length + 1)[:, None]).sum()

    check_against_jax(loss, w, xs, rtol=1e-5, atol=1e-5)
    want = jax.grad(loss, argnums=(0, 1))(w, xs)
    assert_tree_close(rlxjax.coreml_grad(loss, argnums=(0, 1))(w, xs), want,
                      rtol=1e-4, atol=1e-5)


def test_scan_in_a_training_step_matches_optax():
    import optax

    def loss(params, xs, target):
        def step(h, x):
            h = jnp.tanh(h @ params["w"] + x @ params["u"])
            return h, None

        h, _ = jax.lax.scan(step, jnp.zeros((xs.shape[1], 4)), xs)
        return ((h @ params["v"] - target) ** 2).mean()

    params = {"w": _f32(4, 4, scale=0.3), "u": _f32(2, 4), "v": _f32(4, 1)}
    xs, target = _f32(5, 8, 2), _f32(8, 1)
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt)
    state = step.init(params)
    p, o = params, opt.init(params)

    @jax.jit
    def ref_step(p, o):
        l, g = jax.value_and_grad(loss)(p, xs, target)
        u, o = opt.update(g, o, p)
        return optax.apply_updates(p, u), o, l

    for _ in range(20):
        state, l1 = step(state, xs, target)
        p, o, l2 = ref_step(p, o)
        np.testing.assert_allclose(l1, l2, rtol=1e-4)
    got = jax.tree_util.tree_map(np.asarray, step.params(state))
    assert_tree_close(got, p, rtol=1e-4, atol=1e-5)


def test_norms_inside_a_scanned_layer_stack_are_recognised_and_differentiated():
    import flax.linen as nn

    class Layer(nn.Module):
        @nn.compact
        def __call__(self, h, _):
            h = h + nn.Dense(8)(nn.LayerNorm()(h))
            return h, None

    class Stack(nn.Module):
        @nn.compact
        def __call__(self, x):
            scanned = nn.scan(Layer, variable_axes={"params": 0}, split_rngs={"params": True},
                              length=3)
            h, _ = scanned()(x, None)
            return h

    x = _f32(4, 8)
    model = Stack()
    params = model.init(jax.random.PRNGKey(0), x)

    def loss(params, x):
        return (model.apply(params, x) ** 2).mean()

    lowered = rlxjax.coreml_jit(loss).lower(params, x)
    (scan,) = [n for n in lowered.graph.nodes if n.op == "scan"]
    assert [n.op for n in scan.regions["body"].nodes].count("layer_norm") == 1
    check_against_jax(loss, params, x, rtol=1e-5, atol=1e-5)
    want = jax.grad(loss)(params, x)
    assert_tree_close(rlxjax.coreml_grad(loss)(params, x), want, rtol=1e-4, atol=1e-5)
