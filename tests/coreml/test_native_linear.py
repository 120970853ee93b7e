"""Constant-parameter layers lower to Core ML's native ops (issue 16): a Dense whose kernel
is a known constant is MIL ``linear`` with its bias add fused in (rules/linear.py,
coreml/mil_linear_bias.py); an NCHW inference batch norm with constant statistics is MIL
``batch_norm`` (rules/norm.py). Same values as JAX at the usual tolerances; parameters that
are program inputs keep the matmul / written-out forms."""
from __future__ import annotations

import flax.linen as nn
import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rlxjax
import rlxjax.nn as rnn
from helpers import TEST_BACKEND, assert_tree_close, check_against_jax

FP16 = dict(precision="fp16", rtol=5e-3, atol=5e-3)


class MLP(nn.Module):
    widths: tuple = (16, 12, 4)

    @nn.compact
    def __call__(self, x):
        for i, w in enumerate(self.widths):
            x = nn.Dense(w, bias_init=nn.initializers.normal(1.0))(x)
            if i < len(self.widths) - 1:
                x = nn.relu(x)
        return x


def _mlp(rank, k=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 3, k)[3 - rank:]).astype(np.float32)
    m = MLP()
    return m, m.init(jax.random.PRNGKey(seed), x), x


@pytest.mark.parametrize("rank", [1, 2, 3])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_closed_over_dense_is_linear_with_bias(rank, precision):
    m, p, x = _mlp(rank)
    tol = FP16 if precision == "fp16" else {}
    c = check_against_jax(lambda x: m.apply(p, x), x, **tol)
    hist = c.op_histogram()
    assert hist.get("linear") == 3 and "matmul" not in hist and "add" not in hist, hist


def test_export_inference_mlp_is_linear():
    m, p, x = _mlp(2)
    c = rlxjax.export_inference(lambda p, x: m.apply(p, x), p, x, backend=TEST_BACKEND)
    c.validate()
    assert c.op_histogram() == {"linear": 3, "maximum": 2}
    assert_tree_close(c(x), jax.jit(m.apply)(p, x), rtol=1e-5, atol=1e-6)


def test_params_as_inputs_keep_matmul():
    m, p, x = _mlp(2)
    c = check_against_jax(m.apply, p, x)
    hist = c.op_histogram()
    assert hist.get("matmul") == 3 and "linear" not in hist, hist


def test_rank4_and_shared_pre_bias_values():
    """x of rank 4 is outside MIL linear's 1-3: matmul. A linear whose pre-bias value is
    also returned keeps its bias add (the add is not its only reader)."""
    m, p, x = _mlp(3)
    x4 = np.stack([x, x + 1])
    c = check_against_jax(lambda x: m.apply(p, x), x4)
    assert "linear" not in c.op_histogram()
    w = np.asarray(p["params"]["Dense_0"]["kernel"])
    bias = np.asarray(p["params"]["Dense_0"]["bias"])
    c = check_against_jax(lambda x: (x @ w, x @ w + bias), x)
    assert c.op_histogram() == {"linear": 1, "add": 1}, c.op_histogram()


def test_transposed_constant_weight():
    """``x @ W.T`` (weight stored [N, K], contracted on its last dim) is linear too."""
    rng = np.random.default_rng(3)
    x, w, bias = (rng.normal(size=s).astype(np.float32) for s in ((4, 5), (7, 5), (7,)))
    c = check_against_jax(lambda x: jax.lax.dot_general(x, w, (((1,), (1,)), ((), ()))) + bias,
                          x)
    assert c.op_histogram() == {"linear": 1}, c.op_histogram()


def _stats(c, seed):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=c).astype(np.float32), rng.uniform(0.2, 3, c).astype(np.float32),
            rng.normal(size=c).astype(np.float32), rng.normal(size=c).astype(np.float32))


@settings(max_examples=6, deadline=None)
@given(rank=st.integers(3, 5), c=st.integers(1, 5), affine=st.sampled_from(["gb", "g", ""]),
       fp16=st.booleans(), seed=st.integers(0, 99))
def test_nchw_batch_norm_with_constant_stats_is_native(rank, c, affine, fp16, seed):
    mean, var, g, b = _stats(c, seed)
    g, b = (g if "g" in affine else None), (b if "b" in affine else None)
    shape = (2, c) + (3, 2, 2)[:rank - 2]
    x = np.random.default_rng(seed).normal(size=shape).astype(np.float32)
    c = check_against_jax(lambda x: rnn.batch_norm(x, g, b, mean, var, eps=1e-3, axis=1), x,
                          **(FP16 if fp16 else {}))
    hist = c.op_histogram()
    assert hist.get("batch_norm") == 1 and sum(hist.values()) == 1 + 2 * fp16, hist


def test_flax_batch_norm_export_is_native():
    x = np.random.default_rng(0).normal(size=(2, 6, 5, 4)).astype(np.float32)
    m = nn.BatchNorm(use_running_average=True, axis=1)
    mean, var, g, b = _stats(6, 1)
    v = {"params": {"scale": g, "bias": b}, "batch_stats": {"mean": mean, "var": var}}
    c = rlxjax.export_inference(lambda v, x: m.apply(v, x), v, x, backend=TEST_BACKEND)
    c.validate()
    assert c.op_histogram() == {"batch_norm": 1}
    assert_tree_close(c(x), jax.jit(m.apply)(v, x), rtol=1e-5, atol=1e-5)


def test_batch_norm_channel_last_or_runtime_stats_unchanged():
    mean, var, g, b = _stats(6, 2)
    x = np.random.default_rng(2).normal(size=(2, 5, 4, 6)).astype(np.float32)
    c = check_against_jax(lambda x: rnn.batch_norm(x, g, b, mean, var, axis=-1), x)
    assert "batch_norm" not in c.op_histogram()
    xc = np.moveaxis(x, -1, 1)
    c = check_against_jax(lambda x, m: rnn.batch_norm(x, g, b, m, var, axis=1), xc, mean)
    assert "batch_norm" not in c.op_histogram()


def test_kernel_read_twice_is_stored_once():
    """A [K, N] kernel read by two products is not transposed (that would store it twice):
    both stay matmul on the one constant; read once, it is linear with one [N, K] copy."""
    rng = np.random.default_rng(4)
    w = rng.normal(size=(6, 5)).astype(np.float32)
    x, y = rng.normal(size=(3, 6)).astype(np.float32), rng.normal(size=(2, 6)).astype(np.float32)
    c = check_against_jax(lambda x, y: (x @ w, y @ w), x, y)
    assert c.op_histogram() == {"matmul": 2}, c.op_histogram()
    assert w.nbytes <= c.cost_analysis()["weight_bytes"] < 2 * w.nbytes  # (+ small flags)
    c = check_against_jax(lambda x: x @ w, x)
    assert c.op_histogram() == {"linear": 1}
    assert w.nbytes <= c.cost_analysis()["weight_bytes"] < 2 * w.nbytes  # (+ small flags)


def test_shared_row_bias_fuses_into_each_linear():
    """One [1, N] bias constant added after two linears: fused into both (a [N] copy for the
    first, the constant itself retyped for the last reader)."""
    rng = np.random.default_rng(5)
    w1, w2 = (rng.normal(size=(6, 4)).astype(np.float32) for _ in range(2))
    bias = rng.normal(size=(1, 4)).astype(np.float32)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    c = check_against_jax(lambda x: (x @ w1 + bias, jax.numpy.tanh(x) @ w2 + bias), x)
    assert c.op_histogram() == {"linear": 2, "tanh": 1}, c.op_histogram()


def test_tied_embedding_export_stores_the_table_once(tmp_path):
    """An LM head tied to the embedding (logits = h @ E.T, E also gathered): the head's
    linear reads the embedding's own constant, so weight.bin holds E once."""
    import os

    class Tied(nn.Module):
        @nn.compact
        def __call__(self, tok):
            emb = nn.Embed(300, 32)
            h = nn.Dense(32)(emb(tok))
            return h @ emb.embedding.T

    tok = np.array([[1, 7, 299, 3]], np.int32)
    m = Tied()
    p = m.init(jax.random.PRNGKey(0), tok)
    c = rlxjax.export_inference(m.apply, p, tok)
    assert c.op_histogram().get("linear", 0) == 2
    assert_tree_close(c(tok), jax.jit(m.apply)(p, tok), rtol=1e-5, atol=1e-5)
    c.save(str(tmp_path / "tied.mlpackage"))
    size = os.path.getsize(tmp_path / "tied.mlpackage/Data/com.apple.CoreML/weights/weight.bin")
    table = 300 * 32 * 4
    assert table <= size < 2 * table, size  # the table once (+ the 32x32 kernel, headers)
