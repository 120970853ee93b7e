"""Gradients of gathers and scatters at the edges: out-of-bounds indices under
``mode="promise_in_bounds"``, and rank-0 results of constant folding (issue 13).

``promise_in_bounds`` with an out-of-bounds index is a broken promise: JAX documents that
its gradients are then "not correct" (``lax.GatherScatterMode``): XLA's forward gather
clamps the index, JAX's transpose (a scatter-add in the same mode) drops it, and the
transpose of a dropping scatter-add gathers at the clamped index. rlxjax differentiates
the values it computes (the same as XLA's), so its gradient is jax.grad of the same
function with the gather in ``mode="clip"`` and the scatter in ``mode="drop"`` -- compared
here with exactly that (tools/conformance_pib.py lists the harnesses as valid differences).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import rlxjax
from helpers import assert_tree_close, examples, FP32_TOL
from rlxjax.ir.ops import OPS

F32, I32 = np.float32, np.int32
FEW = settings(max_examples=examples(4), deadline=None)


def _loss(f, w):
    return lambda *a: jnp.sum(f(*a) * w)


def _check(f, reference, args, argnums):
    """rlxjax's forward against jax.jit of ``f``; its gradient against jax.grad of
    ``reference`` (the same values as ``f``, differentiated correctly)."""
    got = rlxjax.coreml_jit(f, backend="reference")(*args)
    assert_tree_close(got, jax.jit(f)(*args), **FP32_TOL)
    np.testing.assert_array_equal(jax.jit(reference)(*args), jax.jit(f)(*args))
    w = np.linspace(0.5, 1.5, np.size(got), dtype=F32).reshape(np.shape(got))
    want = jax.grad(_loss(reference, w), argnums)(*args)
    assert_tree_close(rlxjax.coreml_grad(_loss(f, w), argnums=argnums,
                                         backend="reference")(*args), want, **FP32_TOL)


@FEW
@given(data=st.data())
def test_promise_in_bounds_gather_gradient_is_the_clamped_gather_s(data):
    x = data.draw(hnp.arrays(F32, (5, 3), elements=st.integers(-8, 8).map(lambda k: k / 4)))
    idx = data.draw(hnp.arrays(I32, (4,), elements=st.integers(0, 8)))  # 5..8: out of range
    _check(lambda x, i: x.at[i].get(mode="promise_in_bounds"),
           lambda x, i: x.at[i].get(mode="clip"), (x, idx), 0)


@FEW
@given(data=st.data())
def test_promise_in_bounds_scatter_add_gradient_is_the_dropping_scatter_s(data):
    x = data.draw(hnp.arrays(F32, (5,), elements=st.integers(-8, 8).map(lambda k: k / 4)))
    u = data.draw(hnp.arrays(F32, (3,), elements=st.integers(-8, 8).map(lambda k: k / 4)))
    idx = data.draw(hnp.arrays(I32, (3,), elements=st.integers(0, 8)))
    _check(lambda x, u, i: x.at[i].add(u, mode="promise_in_bounds"),
           lambda x, u, i: x.at[i].add(u, mode="drop"), (x, u, idx), (0, 1))


def test_promise_in_bounds_in_range_matches_jax_grad():
    x = np.arange(15, dtype=F32).reshape(5, 3) / 4
    idx = np.array([4, 0, 2, 2], I32)
    f = lambda x: x.at[idx].get(mode="promise_in_bounds")  # noqa: E731
    w = np.linspace(0.5, 1.5, 12, dtype=F32).reshape(4, 3)
    assert_tree_close(rlxjax.coreml_grad(_loss(f, w), backend="reference")(x),
                      jax.grad(_loss(f, w))(x), **FP32_TOL)


# -- constant folding keeps rank 0 (numpy's ascontiguousarray makes a rank-0 array rank 1) ----

def test_scalar_scatter_gradient_folds_rank0_gathers():
    """The gradient w.r.t. a scalar update of a rank-1 operand gathers one element of a
    constant cotangent: folded, it must stay f32[] (it came out f32[1] and crashed)."""
    x, u = np.array([0.5], F32), np.float32(2.0)
    for f in (lambda x, u: x.at[0].add(u, unique_indices=True),
              lambda x, u: x.at[0].set(u, unique_indices=True),
              lambda x, u: x.at[0].add(u)):
        loss = _loss(f, np.float32(1.5))
        got = rlxjax.coreml_grad(loss, argnums=(0, 1), backend="reference")(x, u)
        assert np.shape(got[1]) == ()
        assert_tree_close(got, jax.grad(loss, (0, 1))(x, u), **FP32_TOL)


def test_fold_impls_keep_rank0():
    x = np.array([3.0, 4.0], F32)
    out = OPS["gather_nd"].impl("fold")({}, x, np.array([1], I32))
    assert out.shape == () and out == 4.0
    out = OPS["transpose"].impl("fold")({"perm": ()}, np.array(2.0, F32))
    assert out.shape == () and out == 2.0
