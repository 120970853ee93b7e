"""Dead randomness costs nothing (issue 17, deliverable 1); live randomness is named.

flax's and equinox's own models as written hold randomness they do not use in
deterministic mode: ``nn.Dropout(deterministic=True)`` given a key, ``nn.RNN`` building its
zero carry from a key, an nnx model holding ``nnx.Dropout(rngs=...)`` (a key and a uint32
counter in its state) in eval mode, ``eqx.nn.Dropout(inference=True)`` called with a key.
Each compiles; the key (and counter) arguments are no program inputs; every result is
compared with jax.jit of the same function (jax.grad, JAX + optax for the gradient and
the training step). Equations with effects are never removed, and live randomness is an
error naming the draw, the user's line and the argument its key comes from.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import flax.linen as nn
from flax import nnx

import rlxjax
from helpers import FP32_TOL, TEST_BACKEND, assert_tree_close, check_against_jax, jax_loop
from rlxjax.errors import ArgumentError, UnsupportedDTypeError, UnsupportedPrimitiveError

F32 = np.float32
RNG = np.random.default_rng(17)
KEYS = {"key": jax.random.key, "PRNGKey": jax.random.PRNGKey}


def _x(*shape):
    return RNG.normal(size=shape).astype(F32)


def _params(init, *args):
    """Random parameters of init's shapes (initialising eagerly costs seconds per model)."""
    return jax.tree_util.tree_map(lambda s: (0.5 * RNG.normal(size=s.shape)).astype(s.dtype),
                                  jax.eval_shape(init, *args))


def _inputs(compiled):
    return [s.name for s in compiled.input_specs]


# -- flax linen --------------------------------------------------------------------------
class DropoutMLP(nn.Module):
    @nn.compact
    def __call__(self, x, train: bool):
        x = nn.relu(nn.Dense(16)(x))
        x = nn.Dropout(0.3, deterministic=not train)(x)
        return nn.Dense(3)(x)


@pytest.mark.parametrize("make_key", sorted(KEYS))
def test_linen_dropout_deterministic_with_a_key_passed(make_key):
    x = _x(4, 8)
    model = DropoutMLP()
    params = _params(lambda k, x: model.init(k, x, False), jax.random.key(0), x)

    def f(params, x, key):
        return model.apply(params, x, False, rngs={"dropout": key})

    compiled = check_against_jax(f, params, x, KEYS[make_key](3))
    assert not any(n.startswith("key") for n in _inputs(compiled))
    assert "x" in _inputs(compiled)


def test_linen_rnn_without_initial_carry():
    xs = _x(2, 5, 4)
    rnn = nn.RNN(nn.LSTMCell(6))  # its zero carry comes from random_seed + random_split
    params = _params(rnn.init, jax.random.key(0), xs)
    assert "random_seed" in str(jax.make_jaxpr(lambda p, x: rnn.apply(p, x))(params, xs))
    check_against_jax(lambda p, x: rnn.apply(p, x), params, xs)


def test_linen_dropout_live_is_named_with_the_users_line_and_the_key_argument():
    x = _x(4, 8)
    model = DropoutMLP()
    params = _params(lambda k, x: model.init(k, x, False), jax.random.key(0), x)

    def train_loss(params, x, rng):
        return model.apply(params, x, True, rngs={"dropout": rng}).sum()

    with pytest.raises(UnsupportedPrimitiveError) as e:
        rlxjax.coreml_jit(train_loss).lower(params, x, jax.random.key(1))
    msg = str(e.value)
    assert e.value.primitive == "random_bits"
    assert "jax.random.bernoulli" in msg and "random_bits" in msg
    assert "test_dead_random.py" in e.value.source  # the model's line, not flax's
    assert "flax/linen/stochastic.py" in msg          # ... which it goes through
    assert "argument 'rng'" in msg
    assert "random='inputs'" in msg and "deterministic=True" in msg  # the ways out
    assert "rlxjax.nn.dropout" in msg


# -- flax nnx ----------------------------------------------------------------------------
class NnxDropout(nnx.Module):
    def __init__(self, rngs):
        self.l1 = nnx.Linear(8, 16, rngs=rngs)
        self.drop = nnx.Dropout(0.5, rngs=rngs)
        self.l2 = nnx.Linear(16, 3, rngs=rngs)

    def __call__(self, x):
        return self.l2(self.drop(nnx.relu(self.l1(x))))


def _nnx_split(train: bool):
    model = nnx.eval_shape(lambda: NnxDropout(nnx.Rngs(0)))  # shapes only: fast
    model.train() if train else model.eval()
    graphdef, state = nnx.split(model)

    def value(s):
        if jax.dtypes.issubdtype(s.dtype, jax.dtypes.prng_key):
            return jax.random.key(0)
        return (0.5 * RNG.normal(size=s.shape)).astype(s.dtype)

    return graphdef, jax.tree_util.tree_map(value, state)


def test_nnx_dropout_in_eval_mode_ignores_its_rng_state():
    graphdef, state = _nnx_split(train=False)
    x = _x(4, 8)
    # its state holds a PRNG key and a uint32 counter: neither becomes a program input
    dtypes = {str(a.dtype) for a in jax.tree_util.tree_leaves(state)}
    assert "uint32" in dtypes and any("key" in d for d in dtypes)
    compiled = check_against_jax(lambda s, x: nnx.merge(graphdef, s)(x), state, x)
    assert not [n for n in _inputs(compiled) if "rngs" in n]
    assert len(compiled.input_specs) == 5  # 4 weights and x


def test_nnx_dropout_in_train_mode_is_named():
    graphdef, state = _nnx_split(train=True)
    with pytest.raises(UnsupportedPrimitiveError, match=r"jax\.random\.bernoulli .*"
                       r"test_dead_random\.py.*flax/nnx.*arguments 's\.drop\.rngs"):
        rlxjax.coreml_jit(lambda s, x: nnx.merge(graphdef, s)(x)).lower(state, _x(4, 8))


# -- equinox -----------------------------------------------------------------------------
def test_equinox_dropout_in_inference_mode_with_a_key():
    eqx = pytest.importorskip("equinox")

    class Net(eqx.Module):
        mlp: eqx.nn.MLP
        drop: eqx.nn.Dropout

        def __call__(self, x, key):
            return self.mlp(self.drop(x, key=key))

    net = eqx.filter_eval_shape(lambda: Net(eqx.nn.MLP(6, 2, 8, 1, key=jax.random.key(0)),
                                            eqx.nn.Dropout(0.4)))
    net = eqx.nn.inference_mode(net)
    params, static = eqx.partition(net, lambda a: isinstance(a, jax.ShapeDtypeStruct))
    params = _params(lambda: params)
    x = _x(6)
    f = lambda p, x, k: eqx.combine(p, static)(x, k)  # noqa: E731
    compiled = check_against_jax(f, params, x, jax.random.key(5))
    assert _inputs(compiled)[-1] == "x"


# -- keys passed but unused ----------------------------------------------------------------
@settings(max_examples=4, deadline=None)
@given(make_key=st.sampled_from(sorted(KEYS)), n=st.integers(1, 3),
       shape=st.sampled_from([(), (2,), (2, 3)]))
def test_unused_keys_anywhere_in_the_arguments(make_key, n, shape):
    keys = jax.random.split(KEYS[make_key](1), n)
    x = _x(*shape) if shape else F32(2.5)

    def f(rngs, x, more):
        k = rngs["a"][0][0]
        k2 = jax.random.fold_in(jax.random.split(k)[0], 3)  # key arithmetic, dead
        _ = jax.random.normal(k2, (4,))                      # a draw, dead
        return x * 2.0 + more["w"]

    args = ({"a": [keys], "b": KEYS[make_key](2)}, x, {"w": F32(1.0), "k": KEYS[make_key](3)})
    compiled = check_against_jax(f, *args)
    assert _inputs(compiled) == ["x", "more.w"]
    # other key values: the same program, same results
    cf = rlxjax.coreml_jit(f, backend=TEST_BACKEND)
    other = ({"a": [keys[::-1]], "b": KEYS[make_key](9)}, x,
             {"w": F32(1.0), "k": KEYS[make_key](4)})
    assert_tree_close(cf(*args), cf(*other), rtol=0, atol=0)
    assert len(cf._cache) == 1


def test_an_unused_key_of_another_shape_is_an_argument_error():
    compiled = rlxjax.coreml_jit(lambda x, k: x + 1.0).lower(_x(3), jax.random.key(0)).compile()
    with pytest.raises(ArgumentError, match=r"argument 'k' is .*compiled for key"):
        compiled(_x(3), jax.random.split(jax.random.key(0)))
    with pytest.raises(ArgumentError, match=r"argument 'k' is uint32"):
        compiled(_x(3), jax.random.PRNGKey(0))


@settings(max_examples=4, deadline=None)
@given(i=st.integers(0, 9))
def test_a_uint32_index_argument_is_an_int32_input(i):
    """flax's decode cache_index: a uint32 argument read as an index."""
    from jax import lax

    pe = _x(1, 10, 4)

    def f(x, cache):
        zero = np.uint32(0)
        return x + lax.dynamic_slice(pe, (zero, cache["cache_index"], zero), (1, 1, 4))

    x = _x(1, 1, 4)
    compiled = check_against_jax(f, x, {"cache_index": np.uint32(i)}, rtol=0, atol=0)
    assert [s.dtype for s in compiled.input_specs] == ["float32", "int32"]
    with pytest.raises(ArgumentError, match=r"argument 'cache\.cache_index' holds 2147483648"):
        compiled(x, {"cache_index": np.uint32(2**31)})
    with pytest.raises(ArgumentError, match=r"'cache\.cache_index' is int32"):
        compiled(x, {"cache_index": np.int32(2)})


def test_uint32_arithmetic_that_may_overflow_names_the_argument():
    with pytest.raises(UnsupportedDTypeError, match=r"'add'.*uint32 argument\(s\) 'k\.c'.*"
                       r"random='inputs'"):
        rlxjax.coreml_jit(lambda x, k: (x, k["c"] + 1)).lower(_x(2), {"c": np.uint32(3)})


# -- nested jaxprs, effects ----------------------------------------------------------------
# custom derivatives: JAX keeps every argument of the function (its rule may read it), so
# the dead draw uses a key made inside
@jax.custom_jvp
def _sin_with_a_dead_draw(x):
    _ = jax.random.normal(jax.random.key(3), x.shape)
    return jnp.sin(x)


_sin_with_a_dead_draw.defjvp(
    lambda primals, tangents: (_sin_with_a_dead_draw(*primals),
                               jnp.cos(primals[0]) * tangents[0]))


@jax.custom_vjp
def _square_with_a_dead_draw(x):
    _ = jax.random.bernoulli(jax.random.PRNGKey(1), 0.5, x.shape)
    return x * x


_square_with_a_dead_draw.defvjp(lambda x: (_square_with_a_dead_draw(x), x),
                                lambda x, g: (2.0 * x * g,))

NESTED = {
    "jit": lambda x, k: jax.jit(lambda x, k: (x * 3.0, jax.random.normal(k, x.shape)))(x, k)[0],
    "cond": lambda x, k: jax.lax.cond(
        x.sum() > 0, lambda: (x + 1.0, jax.random.normal(k, x.shape)),
        lambda: (x - 1.0, jax.random.uniform(k, x.shape)))[0],
    "scan": lambda x, k: jax.lax.scan(
        lambda c, i: ((c[0] * 1.5, jax.random.fold_in(c[1], i)), jax.random.normal(c[1], ())),
        (x, k), jnp.arange(3))[0][0],
    "custom_jvp": lambda x, k: _sin_with_a_dead_draw(x),
    "custom_vjp": lambda x, k: _square_with_a_dead_draw(x),
    "remat": lambda x, k: jax.checkpoint(
        lambda x, k: (jnp.tanh(x), jax.random.split(k)))(x, k)[0],
}


@pytest.mark.parametrize("where", sorted(NESTED))
def test_dead_randomness_inside_nested_jaxprs(where):
    x = _x(3)
    check_against_jax(NESTED[where], x, jax.random.key(4))
    # and under rlxjax's own reverse mode (custom rules kept), against jax.grad
    loss = lambda x, k: NESTED[where](x, k).sum()  # noqa: E731
    got = rlxjax.coreml_grad(loss, backend=TEST_BACKEND)(x, jax.random.key(4))
    assert_tree_close(got, jax.grad(loss)(x, jax.random.key(4)), **FP32_TOL)


def test_a_key_passed_into_a_custom_derivative_function_is_named():
    @jax.custom_jvp
    def f(x, k):  # the primal ignores k, its rule might not
        return jnp.sin(x)

    f.defjvp(lambda p, t: (f(*p), jnp.cos(p[0]) * t[0]))
    with pytest.raises(UnsupportedDTypeError, match=r"argument 'k' is a JAX PRNG key .*"
                       r"'custom_jvp_call' at .*test_dead_random\.py.*close over the key"):
        rlxjax.coreml_jit(lambda x, k: f(x, k)).lower(_x(3), jax.random.key(0))


def test_dead_equations_with_effects_are_kept():
    from jax.experimental import io_callback

    def f(x):
        io_callback(lambda a: a, jax.ShapeDtypeStruct((3,), F32), x)  # result unused
        return x * 2.0

    with pytest.raises(UnsupportedPrimitiveError, match="io_callback"):
        rlxjax.coreml_jit(f).lower(_x(3))

    def g(x):
        jax.debug.print("{}", x)
        return x * 2.0

    with pytest.raises(UnsupportedPrimitiveError, match="debug"):
        rlxjax.coreml_jit(jax.jit(g)).lower(_x(3))


# -- gradients and training with a dead key ------------------------------------------------
def _mlp_loss(model):
    def loss(params, x, y, rng):
        out = model.apply(params, x, False, rngs={"dropout": rng})
        return jnp.mean((out - y) ** 2)

    return loss


def test_grad_with_a_dead_key_argument():
    x, y = _x(4, 8), _x(4, 3)
    model = DropoutMLP()
    params = _params(lambda k, x: model.init(k, x, False), jax.random.key(0), x)
    loss = _mlp_loss(model)
    key = jax.random.key(7)
    got = rlxjax.coreml_value_and_grad(loss, backend=TEST_BACKEND)(params, x, y, key)
    want = jax.jit(jax.value_and_grad(loss))(params, x, y, key)
    assert_tree_close(got, want, **FP32_TOL)
    with pytest.raises(ArgumentError, match=r"'rng' is key<fry>"):
        rlxjax.coreml_grad(loss, argnums=3, backend=TEST_BACKEND).lower(params, x, y, key)


@pytest.mark.parametrize("mode", ["io", pytest.param("mlstate", marks=pytest.mark.slow)])
def test_train_step_with_a_dead_key_in_the_batch(mode):
    optax = pytest.importorskip("optax")
    x, y = _x(8, 8), _x(8, 3)
    model = DropoutMLP()
    params = _params(lambda k, x: model.init(k, x, False), jax.random.key(0), x)
    loss = _mlp_loss(model)
    key = jax.random.key(2)
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, state=mode, backend=TEST_BACKEND)
    state = step.init(params)
    losses = []
    for _ in range(3):
        state, v = step(state, x, y, key)
        losses.append(float(v))
    want_params, want_losses = jax_loop(loss, opt, params, (x, y, key), 3)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4)
    got_params = jax.tree_util.tree_map(np.asarray, step.params(state))
    assert_tree_close(got_params, want_params, rtol=1e-4, atol=1e-5)
    assert [f.name for f in step.last_compiled.input_specs][-2:] == ["x", "y"]
    # a key among the trained parameters is refused, by name
    with pytest.raises(ArgumentError, match=r"'params\.rng' is key"):
        rlxjax.coreml_train_step(lambda p, x: p["w"].sum() * x.sum(), opt,
                                 backend=TEST_BACKEND).lower(
            {"w": _x(2), "rng": key}, opt.init({"w": _x(2)}), _x(2))
