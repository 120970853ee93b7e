"""The reference interpreter's prepared fast paths (runtime/reference/fast.py) give
bit-identical results to the general op implementations, and the programs still match JAX."""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
from rlxjax.runtime.reference import interpreter

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from helpers import assert_tree_close  # noqa: E402

pytestmark = pytest.mark.reference_backend  # about the reference interpreter itself


def _programs(compiled):
    fast = interpreter.ReferenceProgram(compiled.spec, compiled._weights_dir)
    orig = interpreter.fast_step
    interpreter.fast_step = lambda *a, **k: None
    try:
        general = interpreter.ReferenceProgram(compiled.spec, compiled._weights_dir)
    finally:
        interpreter.fast_step = orig
    return fast, general


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind == "f" else a


def _same(compiled, args):
    """Runs both interpreters (twice); returns (number of fast steps, the outputs as the
    JAX-side pytree). The reference interpreter itself, whatever the test backend is."""
    leaves = jax.tree_util.tree_leaves(tuple(args))
    feeds = {s.mil_name: s.to_feature(np.asarray(a)) for s, a in zip(compiled.input_specs, leaves)}
    fast, general = _programs(compiled)
    n_fast = sum(s.run.__qualname__.split(".")[0] != "_general" for s in fast._steps)
    for _ in range(2):  # the second run skips the first-run output checks
        a, b = fast.run(feeds), general.run(feeds)
        assert list(a) == list(b)
        for k in a:
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape
            np.testing.assert_array_equal(_bits(a[k]), _bits(b[k]))
    outs = [s.from_feature(a[s.mil_name]) for s in compiled.output_specs]
    return n_fast, jax.tree_util.tree_unflatten(compiled._traced.out_tree, outs)


def _mixed(x, y, i):
    z = jnp.where(x > y, x * y - 1.5, jnp.maximum(x, y) / (jnp.abs(y) + 0.5))
    m = (z.reshape(4, -1) @ y.reshape(-1, 4)).T
    return (jnp.sum(z, axis=1), jnp.mean(z, axis=(0, 1), keepdims=True), jnp.max(z),
            jnp.exp(jnp.tanh(m)) ** 2, jnp.sqrt(jnp.abs(z)).transpose(2, 0, 1),
            (i * 3 - i // 2) % 5, i.astype(jnp.float32) * 0.5, x == y, jnp.minimum(m, 0.25),
            jnp.pad(z, ((0, 0), (1, 2), (0, 1))) * 2,
            jnp.pad(z, ((1, 0), (0, 0), (0, 0)), constant_values=-1.5),
            x[:, 1:3, ::2] + 1, y[1] - 1, z[:, ::-1, 2:5])


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_fast_paths_match_general_ops(precision):
    r = np.random.default_rng(0)
    x = r.standard_normal((2, 4, 6)).astype(np.float32)
    y = r.standard_normal((2, 4, 6)).astype(np.float32)
    x[0, 0, :3] = [np.nan, np.inf, -0.0]
    y[0, 0, 3:] = [-np.inf, 0.0, -0.0]
    i = r.integers(-9, 9, (3, 5)).astype(np.int32)
    c = rlxjax.coreml_jit(_mixed, precision=precision, backend="reference").lower(
        x, y, i).compile()
    n_fast, got = _same(c, (x, y, i))
    assert n_fast > 10
    if precision == "fp32":
        assert_tree_close(got, jax.jit(_mixed)(x, y, i), rtol=1e-5, atol=1e-6)


def _block_loss(p, x):
    """A pre-norm attention + MLP block (hand-written: no flax init to pay for)."""
    h = (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-6)
    q, k, v = jnp.split(h @ p["qkv"], 3, axis=-1)
    att = jax.nn.softmax(jnp.einsum("btd,bsd->bts", q, k) / 4.0)
    x = x + jnp.einsum("bts,bsd->btd", att, v) @ p["o"]
    return jnp.mean((x + jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"]) ** 2)


def test_fast_paths_on_a_training_gradient():
    r = np.random.default_rng(1)
    f = lambda *s: (r.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    params = {"qkv": f(16, 48), "o": f(16, 16), "w1": f(16, 32), "b1": f(32), "w2": f(32, 16)}
    x = f(2, 8, 16)
    c = rlxjax.coreml_grad(_block_loss, backend="reference").lower(params, x).compile()
    n_fast, got = _same(c, (params, x))
    assert n_fast >= 0.8 * c.cost_analysis()["mil_ops"]
    assert_tree_close(got, jax.jit(jax.grad(_block_loss))(params, x), rtol=1e-4, atol=1e-5)
