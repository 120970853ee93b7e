"""Call-like primitives are inlined (nested jit, checkpoint/remat, custom_jvp, custom_vjp,
closed_call); pytrees in and out; input names from pytree paths; deployment targets; fp16
precision; static_argnums. Every program is compared with jax.jit and validated."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st
from jax.extend.core import primitives as jex_prims

import rlxjax
from helpers import check_against_jax
from primitive_strategies import F32, FEW, arrays, float_elements, shapes


# -- nested calls ------------------------------------------------------------------------------
@jax.jit
def _inner(x, y):
    return jnp.tanh(x) * y


@functools.partial(jax.jit, static_argnums=1)
def _inner_static(x, n):
    return x * n + 1.0


def _nested(x, y):
    z = jax.jit(lambda a: _inner(a, y) + 1.0)(x)
    return _inner_static(z, 3) - jax.jit(jnp.sin)(y)


def _remat(x, y):
    f = jax.checkpoint(lambda a, b: jnp.sin(a) * jnp.exp(-b * b))
    g = jax.remat(lambda a: jnp.cos(a) + a, policy=jax.checkpoint_policies.nothing_saveable)
    return g(f(x, y))


@jax.custom_vjp
def _clipped_sin(x):
    return jnp.sin(x)


_clipped_sin.defvjp(lambda x: (jnp.sin(x), x), lambda r, g: (jnp.clip(g * jnp.cos(r), -1, 1),))


@jax.custom_jvp
def _my_softsign(x):
    return x / (1.0 + jnp.abs(x))


_my_softsign.defjvp(lambda p, t: (_my_softsign(p[0]), t[0] / (1.0 + jnp.abs(p[0])) ** 2))


def _closed_call(x, y):
    """A jaxpr with a closed_call equation. JAX's public API no longer emits closed_call from
    user code (it appears after custom_vjp DCE), so build the equation with JAX internals."""
    from jax._src import core
    from jax._src.interpreters import partial_eval as pe

    inner = jax.make_jaxpr(lambda a, b: jnp.tanh(a) + b)(x, y)
    outer = jax.make_jaxpr(lambda a, b: a)(x, y).jaxpr
    out = core.Var(inner.out_avals[0])
    eqn = pe.new_jaxpr_eqn(list(outer.invars), [out], jex_prims.closed_call_p,
                           dict(call_jaxpr=inner), core.no_effects,
                           core.source_info_util.new_source_info())
    return core.eval_jaxpr(outer.replace(eqns=[eqn], outvars=[out]), [], x, y)[0] * 2.0


def _closure_convert(x, y):
    g = lambda a: jnp.sin(a * y) + y
    gc, consts = jax.closure_convert(g, x)
    return gc(x, *consts)


CALLS = [
    ("nested_jit", _nested),
    ("checkpoint_remat", _remat),
    ("custom_vjp", lambda x, y: _clipped_sin(x) + y),
    ("custom_jvp", lambda x, y: _my_softsign(x) * y),
    ("closed_call", _closed_call),
    ("closure_convert", _closure_convert),
    ("relu", lambda x, y: jax.nn.relu(x) + jax.nn.relu6(y)),
    ("gelu_exact", lambda x, y: jax.nn.gelu(x, approximate=False)),
    ("gelu_tanh", lambda x, y: jax.nn.gelu(x, approximate=True)),
    ("softplus", lambda x, y: jax.nn.softplus(x)),
    ("silu", lambda x, y: jax.nn.silu(x)),
    ("logsumexp", lambda x, y: jax.nn.logsumexp(x, axis=-1) + jax.nn.logsumexp(y)),
    ("softmax", lambda x, y: jax.nn.softmax(x, axis=-1)),
    ("log_softmax", lambda x, y: jax.nn.log_softmax(x, axis=-1)),
]


@pytest.mark.parametrize("name,fn", CALLS, ids=[c[0] for c in CALLS])
@FEW
@given(data=st.data())
def test_inlined_calls(name, fn, data):
    shape = data.draw(shapes(min_dims=1))
    x = data.draw(arrays(F32, shape, float_elements(-5, 5)))
    y = data.draw(arrays(F32, shape, float_elements(-5, 5)))
    check_against_jax(fn, x, y)


# -- pytrees and names ---------------------------------------------------------------------
def test_pytree_inputs_outputs():
    params = {"w": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
              "b": (np.ones(3, np.float32), {"scale": np.float32(0.5)})}
    x = np.linspace(-1, 1, 4, dtype=np.float32).reshape(2, 2)

    def f(params, x, n):
        h = x @ params["w"] + params["b"][0]
        return {"h": h * params["b"][1]["scale"], "stats": (h.sum(), [h.max(axis=0), n + 1])}

    compiled = check_against_jax(f, params, x, np.int32(3))
    names = [s.name for s in compiled.input_specs]
    assert names == ["params.b.0", "params.b.1.scale", "params.w", "x", "n"], names
    assert [s.name for s in compiled.output_specs] == [
        "out.h", "out.stats.0", "out.stats.1.0", "out.stats.1.1"]


def test_flax_param_names():
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(2)(jax.nn.relu(nn.Dense(4)(x)))

    model = MLP()
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    params = model.init(jax.random.PRNGKey(0), x)["params"]

    def forward(params, x):
        return model.apply({"params": params}, x)

    compiled = check_against_jax(forward, params, x)
    names = {s.name for s in compiled.input_specs}
    assert names == {"params.Dense_0.kernel", "params.Dense_0.bias", "params.Dense_1.kernel",
                     "params.Dense_1.bias", "x"}, names
    assert "params.Dense_0.kernel" == compiled.input_specs[1].name


def test_equinox_module_input():
    import equinox as eqx

    mlp = eqx.nn.MLP(3, 2, 4, 1, key=jax.random.PRNGKey(1))
    params, static = eqx.partition(mlp, eqx.is_array)
    x = np.linspace(-1, 1, 3, dtype=np.float32)

    def forward(params, x):
        return eqx.combine(params, static)(x)

    compiled = check_against_jax(forward, params, x)
    assert any(s.name.startswith("params.layers.0.weight") for s in compiled.input_specs)


# -- static_argnums ------------------------------------------------------------------------
def test_static_argnums():
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)

    def f(x, axis, mode):
        r = jnp.sum(x, axis=axis)
        return jnp.tanh(r) if mode == "tanh" else r * 2

    check_against_jax(f, x, 1, "tanh", static_argnums=(1, 2))
    check_against_jax(f, x, 0, "double", static_argnums=(1, 2))
    check_against_jax(lambda n, x: x ** n, 3, x, static_argnums=0)

    # The callable form caches one program per static value.
    cf = rlxjax.coreml_jit(f, static_argnums=(1, 2), backend="reference")
    for axis, mode in ((1, "tanh"), (0, "double"), (1, "tanh")):
        np.testing.assert_allclose(cf(x, axis, mode), f(x, axis, mode), rtol=1e-5, atol=1e-6)


# -- targets and precision ------------------------------------------------------------------
def _mlp(params, x):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    return jax.nn.sigmoid(h @ params["w2"]).sum(axis=-1), jnp.argmax(h, axis=-1)


def _mlp_inputs(rng):
    return ({"w1": rng.uniform(-1, 1, (3, 4)).astype(np.float32),
             "b1": rng.uniform(-1, 1, (4,)).astype(np.float32),
             "w2": rng.uniform(-1, 1, (4, 2)).astype(np.float32)},
            rng.uniform(-1, 1, (5, 3)).astype(np.float32))


@pytest.mark.parametrize("target", ["iOS15", "iOS16", "iOS17", "iOS18"])
def test_targets(target):
    params, x = _mlp_inputs(np.random.default_rng(0))
    check_against_jax(_mlp, params, x, target=target)
    xi = np.array([[7, -7], [3, -1]], np.int32)
    check_against_jax(lambda a: (jax.lax.div(a, np.int32(2)), jnp.fmod(a, 3), a > 0, a.sum()),
                      xi, target=target)
    check_against_jax(lambda a: (jnp.round(a), jnp.log1p(a), jnp.expm1(a), jnp.mean(a)),
                      np.array([-1.5, 0.5, 2.5, 1e-9], np.float32), target=target)


# fp16 bound: every fp16 rounding (inputs, and each op's result) has relative error
# <= 2^-11 = 4.9e-4. FP16_FUNCS chain 3-4 roundings per result on inputs in [-2, 2] with
# outputs of magnitude <= ~3, so |err| stays around 1e-3 (allowed: 2e-3 + 2e-3 * |want|).
# Measured max abs error vs JAX fp32 over 200 random draws per function (reference backend):
# elementwise 1.52e-3, sigmoid_mix 1.08e-3, reduce_mean 1.55e-3, dot 5.3e-4.
FP16_TOL = dict(rtol=2e-3, atol=2e-3)
FP16_FUNCS = [
    ("elementwise", lambda x, y: jnp.tanh(x) * y + jnp.exp(-x * x)),
    ("sigmoid_mix", lambda x, y: jax.nn.sigmoid(x - y) + jnp.abs(y) * 0.25),
    ("reduce_mean", lambda x, y: jnp.mean(x * y, axis=-1)),
    ("dot", lambda x, y: jnp.tanh(x @ y.T / 4)),
]


@pytest.mark.parametrize("name,fn", FP16_FUNCS, ids=[f[0] for f in FP16_FUNCS])
@pytest.mark.parametrize("target", ["iOS15", "iOS17"])
@FEW
@given(data=st.data())
def test_fp16_precision(name, fn, target, data):
    shape = data.draw(shapes(min_dims=2, max_dims=2, max_side=3))
    x = data.draw(arrays(F32, shape, float_elements(-2, 2)))
    y = data.draw(arrays(F32, shape, float_elements(-2, 2)))
    check_against_jax(fn, x, y, precision="fp16", target=target, **FP16_TOL)


def test_fp16_keeps_int_and_bool_exact():
    x = np.array([[1, -2, 3], [4, 5, -6]], np.int32)
    check_against_jax(lambda a: (a * 3, a > 0, jnp.argmax(a, axis=1)), x, precision="fp16")
