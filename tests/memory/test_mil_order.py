"""The memory ordering of ML Programs (coreml/mil_order.py): outputs bit for bit what the
emitted order gives, peaks never higher, side effects in their order."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlxjax
import rlxjax.coreml.format as coreml_format
from helpers import without_and_with
from models import workloads
from test_memory_analysis import WORKLOADS, feeds_of


def _compile_both(monkeypatch, build):
    return without_and_with(monkeypatch, coreml_format, "order_for_memory", build)


def _check_step(monkeypatch, loss, params, batch, has_aux=False):
    def build():
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), has_aux=has_aux)
        st = step.init(params, *batch)
        c = step.last_compiled
        return c, c.executable.runner("reference").run(
            feeds_of(c, st.params, st.opt_state, *batch))

    (c0, r0), (c1, r1) = _compile_both(monkeypatch, build)
    assert r0.keys() == r1.keys()
    for k in r0:
        assert r0[k].dtype == r1[k].dtype and r0[k].tobytes() == r1[k].tobytes(), k
    assert c1.op_histogram() == c0.op_histogram()  # the same ops, in another order
    assert c1.memory_analysis().temp_size_in_bytes <= c0.memory_analysis().temp_size_in_bytes
    return c0.memory_analysis(), c1.memory_analysis()


def test_big_temporaries_are_consumed_early(monkeypatch):
    """Written as exp, sin, cos of one value and then their sums, the emitted order holds
    all three temporaries at once; the memory order sums each as soon as it exists."""
    def f(x):
        a, b, c = jnp.exp(x), jnp.sin(x), jnp.cos(x * 3)
        return jnp.sum(a, axis=0) + jnp.sum(b, axis=0) * jnp.sum(c, axis=0)

    x = np.linspace(-2, 2, 64 * 128, dtype=np.float32).reshape(64, 128)

    def build():
        c = rlxjax.coreml_jit(f).lower(x).compile()
        return c, c.executable.runner("reference").run(feeds_of(c, x))

    (c0, r0), (c1, r1) = _compile_both(monkeypatch, build)
    assert all(r0[k].tobytes() == r1[k].tobytes() for k in r0)
    assert c1.op_histogram() == c0.op_histogram()
    big = x.nbytes
    assert c0.memory_analysis().temp_size_in_bytes >= 3 * big  # exp, sin, x * 3 / cos
    assert c1.memory_analysis().temp_size_in_bytes < 2.1 * big  # x * 3, cos(x * 3), sums


@pytest.mark.slow
def test_train_step_outputs_are_bit_identical_and_peak_lower(monkeypatch):
    from models import TransformerBlock, rng_data

    xt, = rng_data(2, (2, 8, 32))
    tb = TransformerBlock()  # workloads()["transformer_block"], built alone
    loss = lambda p, x: jnp.mean(tb.apply(p, x) ** 2)  # noqa: E731
    before, after = _check_step(monkeypatch, loss, tb.init(jax.random.PRNGKey(1), xt), (xt,))
    assert after.temp_size_in_bytes < 0.8 * before.temp_size_in_bytes  # measured 0.69x


@pytest.mark.slow
@pytest.mark.parametrize("name", WORKLOADS)
def test_every_workload_is_bit_identical(monkeypatch, name):
    loss, params, batch = workloads()[name]
    _check_step(monkeypatch, loss, params, batch, has_aux=name == "batchnorm_train")


def test_random_draws_keep_their_order(monkeypatch):
    """Device random draws (impure ops) keep their relative order."""
    def f(x, key):
        a = jax.random.normal(key, x.shape)
        b = jax.random.uniform(jax.random.fold_in(key, 1), x.shape)
        return jnp.tanh(x) * a + b, jnp.exp(x) @ x.T

    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(6, 8)
    key = jax.random.PRNGKey(0)

    def build():
        c = rlxjax.coreml_jit(f, random="device").lower(x, key).compile()
        return c, [op.type for op in c.mil_ops() if op.type.startswith("random_")]

    (c0, t0), (c1, t1) = _compile_both(monkeypatch, build)
    assert t0 and t0 == t1
    names0 = [op.outputs[0].name for op in c0.mil_ops() if op.type.startswith("random_")]
    names1 = [op.outputs[0].name for op in c1.mil_ops() if op.type.startswith("random_")]
    assert names0 == names1
