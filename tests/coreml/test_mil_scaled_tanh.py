"""Gemma 2's logit soft-capping ``tanh(x / c) · c`` lowers to ``real_div`` + MIL
``scaled_tanh(alpha=c, beta=1)`` (coreml/mil_scaled_tanh.py): bit for bit the program
without the peephole on the reference interpreter, JAX's values at the usual tolerance,
and left alone where the tanh has another reader (a gradient program reuses it)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlxjax
from helpers import TEST_BACKEND, assert_tree_close
from rlxjax.coreml import format as coreml_format


def _compile(f, x, precision="fp32", grad=False):
    make = rlxjax.coreml_grad if grad else rlxjax.coreml_jit
    c = make(f, target="iOS17", backend=TEST_BACKEND, precision=precision).lower(x).compile()
    c.validate()
    return c


@settings(max_examples=4, deadline=None)
@given(cap=st.sampled_from([50.0, 30.0, 2.0]), precision=st.sampled_from(["fp32", "fp16"]),
       seed=st.integers(0, 20))
def test_soft_cap_is_scaled_tanh(cap, precision, seed):
    x = (np.random.default_rng(seed).standard_normal((8, 16)) * 2 * cap).astype(np.float32)

    def soft_cap(x):  # flax examples/gemma modules.py, keras-hub GemmaAttention
        return jnp.tanh(x / cap) * cap

    c = _compile(soft_cap, x, precision)
    ops = [op.type for op in c.mil_ops() if op.type != "const"]
    assert "scaled_tanh" in ops and "tanh" not in ops, ops
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(coreml_format, "fuse_scaled_tanh", lambda model: 0)
        plain = _compile(soft_cap, x, precision)
    assert "tanh" in [op.type for op in plain.mil_ops()]
    np.testing.assert_array_equal(np.asarray(c(x)), np.asarray(plain(x)), strict=True)
    tol = dict(rtol=2e-6, atol=2e-6 * cap) if precision == "fp32" else \
        dict(rtol=2e-3, atol=2e-3 * cap)
    assert_tree_close(c(x), jax.jit(soft_cap)(x), **tol)


def test_tanh_with_another_reader_stays():
    """The gradient reads tanh's output again (1 − t²): the mul is not its only reader."""
    x = np.linspace(-90, 90, 24, dtype=np.float32).reshape(4, 6)

    def loss(x):
        return jnp.sum(jnp.tanh(x / 50.0) * 50.0 * jnp.cos(x))

    g = _compile(loss, x, grad=True)
    assert "tanh" in [op.type for op in g.mil_ops()]
    assert_tree_close(g(x), jax.jit(jax.grad(loss))(x), rtol=1e-5, atol=1e-5)
