"""The transpose folding of ML Programs (coreml/mil_matmul_transpose.py): a transpose of the
last two dims next to a matmul becomes the matmul's flag; outputs bit for bit what the
program without the pass gives, the transposed copies gone."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

import rlxjax
import rlxjax.coreml.format as coreml_format
from helpers import without_and_with
from models import workloads
from test_memory_analysis import WORKLOADS, feeds_of


def _both(monkeypatch, build):
    return without_and_with(monkeypatch, coreml_format, "fold_matmul_transposes", build)


def _same_bits(r0, r1):
    assert r0.keys() == r1.keys()
    for k in r0:
        assert r0[k].dtype == r1[k].dtype and r0[k].tobytes() == r1[k].tobytes(), k


def _transposes(c):
    return c.op_histogram().get("transpose", 0)


@settings(max_examples=4, deadline=None)
@given(st.integers(1, 3), st.integers(1, 9), st.integers(1, 9), st.integers(1, 9),
       st.booleans())
def test_matmuls_of_transposes_equal_jax(b, m, k, n, batched):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    shape = (b,) if batched else ()
    a = rng.standard_normal(shape + (m, k)).astype(np.float32)
    w = rng.standard_normal(shape + (n, k)).astype(np.float32)

    def f(a, w):
        wt = jnp.swapaxes(w, -1, -2)
        return (a @ wt, jnp.swapaxes(jnp.tanh(a) @ wt, -1, -2) + 1.0,
                jnp.swapaxes(a, -1, -2) @ a)

    c = rlxjax.coreml_jit(f, backend="reference").lower(a, w).compile()
    if not batched:  # (a batched dot_general enters matmul through reshapes: untouched)
        assert _transposes(c) == 0
    for got, want in zip(c(a, w), jax.jit(f)(a, w)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def test_tied_embedding_reads_the_table_as_it_is(monkeypatch):
    """``h @ emb.T`` (a tied output projection) and its gradient: no transposed table."""
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((50, 8)).astype(np.float32)
    tok = rng.integers(0, 50, (6,)).astype(np.int32)

    def loss(p, tok):
        h = jnp.tanh(p["emb"][tok] @ p["w"])
        return jnp.mean(jax.nn.log_softmax(h @ p["emb"].T)[:, 0])

    params = {"emb": emb, "w": rng.standard_normal((8, 8)).astype(np.float32)}

    def build():
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-3))
        st_ = step.init(params, tok)
        c = step.last_compiled
        return c, c.executable.runner("reference").run(feeds_of(c, st_.params, st_.opt_state,
                                                                tok))

    (c0, r0), (c1, r1) = _both(monkeypatch, build)
    _same_bits(r0, r1)
    assert _transposes(c0) >= 2 and _transposes(c1) == 0
    assert c1.memory_analysis().temp_size_in_bytes < c0.memory_analysis().temp_size_in_bytes


@pytest.mark.slow
@pytest.mark.parametrize("name", WORKLOADS)
def test_every_workload_is_bit_identical(monkeypatch, name):
    loss, params, batch = workloads()[name]
    has_aux = name == "batchnorm_train"

    def build():
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), has_aux=has_aux)
        st_ = step.init(params, *batch)
        c = step.last_compiled
        return c, c.executable.runner("reference").run(
            feeds_of(c, st_.params, st_.opt_state, *batch))

    (c0, r0), (c1, r1) = _both(monkeypatch, build)
    _same_bits(r0, r1)
    assert _transposes(c1) <= _transposes(c0)
