"""The static cost model (coreml/cost.py) against FLOP counts worked out by hand."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import rlxjax
from rlxjax.inspect_package import describe


def _cost(fun, *args):
    return rlxjax.coreml_jit(fun).lower(*args).compile().cost_analysis()


def _row(cost, op_type):
    (row,) = [r for r in cost["ops"] if r["type"] == op_type]
    return row


def test_matmul_counts_two_m_n_k():
    m, k, n = 5, 7, 3
    cost = _cost(lambda a, b: a @ b, np.ones((m, k), np.float32), np.ones((k, n), np.float32))
    row = _row(cost, "matmul")
    assert row["flops"] == 2 * m * n * k
    assert row["bytes_read"] >= 4 * (m * k + k * n) and row["bytes_written"] == 4 * m * n
    assert cost["flops"] == row["flops"]


def test_conv_counts_two_flops_per_multiply_add():
    x = np.ones((1, 3, 8, 8), np.float32)
    w = np.ones((4, 3, 3, 3), np.float32)
    cost = _cost(lambda x, w: jax.lax.conv_general_dilated(x, w, (1, 1), "VALID"), x, w)
    out_elems = 1 * 4 * 6 * 6
    assert _row(cost, "conv")["flops"] == 2 * out_elems * 3 * 3 * 3


def test_elementwise_reduction_and_movement():
    x = np.ones((4, 6), np.float32)
    cost = _cost(lambda x: jnp.exp(x).T.sum(axis=0), x)
    assert _row(cost, "exp")["flops"] == 24
    assert _row(cost, "reduce_sum")["flops"] == 24
    assert all(r["flops"] == 0 for r in cost["ops"] if r["type"] == "transpose")


def test_loop_bodies_are_counted_once_at_depth_one():
    def f(x, n):
        return jax.lax.fori_loop(0, n, lambda i, c: jnp.tanh(c), x)

    cost = _cost(f, np.ones(10, np.float32), np.int32(3))
    tanh = _row(cost, "tanh")
    assert tanh["depth"] == 1 and tanh["flops"] == 10
    assert _row(cost, "while_loop")["depth"] == 0


def test_inspect_reports_cost_and_weights(tmp_path):
    w = np.ones((64, 32), np.float32)
    compiled = rlxjax.coreml_jit(lambda x: x @ w).lower(np.ones((2, 64), np.float32)).compile()
    text = describe(compiled.save(tmp_path / "m.mlpackage"))
    assert "weights: 8.0 KiB" in text  # the 64x32 fp32 constant
    assert f"{2 * 2 * 32 * 64 / 1e3:.2f} kFLOP" in text
