"""Norm backward ops (norm_grad family) through coreml_grad: for every rlxjax.nn norm, the
gradient of ``sum(norm(...) * w)`` w.r.t. every operand is compiled, validated by
coremltools' loader, run on the reference backend and compared with ``jax.grad``; the
graph must hold the norm's own backward node (not a decomposition of it)."""
from __future__ import annotations

import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, reject, settings
from hypothesis import strategies as st

import rlxjax
import rlxjax.nn as rnn
from helpers import assert_tree_close, examples
from rlxjax.coreml.lower import lower_graph
from rlxjax.coreml.targets import get_target
from rlxjax.ir import DType, Graph, TensorType

SETTINGS = settings(max_examples=examples(6), deadline=None)
# fp32. The backward formula (dx = inv·(sy − mean(sy) − x̂·mean(sy·x̂))) is not the one
# JAX's autodiff of the reference evaluates, so the two round differently; over 30
# examples of each test below the largest difference measured was 3.6e-6 absolute on
# gradients of magnitude up to ~12.
TOL = dict(rtol=1e-4, atol=1e-5)
AFFINE = [(True, True), (True, False), (False, True), (False, False)]


def _arr(rng, shape, scale=1.0, offset=0.0):
    return (offset + scale * rng.standard_normal(shape)).astype(np.float32)


def _grad_program(loss, args, argnums, precision="fp32"):
    f = rlxjax.coreml_grad(loss, argnums=argnums, backend="reference", precision=precision)
    compiled = f.lower(*args).compile()
    compiled.validate()
    return compiled


def check_grads(loss, args, argnums, grad_op, tol=TOL):
    """Compare coreml_grad with jax.grad; the graph must hold ``grad_op``. Returns the
    compiled program. The weights ``w`` of the loss are passed as arguments (left out of
    argnums) rather than closed over, so the backward is not constant-folded away.

    Hypothesis finds ill-conditioned inputs (a batch of two nearly equal samples, a row
    with variance near eps) where no fp32 evaluation of a norm's gradient is accurate:
    JAX's own fp32 gradient is then off the float64 one by more than ``tol``. Such
    examples say nothing about the formulas tested here and are rejected; accuracy on
    hard inputs is measured against float64 by the numerics tests."""
    compiled = _grad_program(loss, args, argnums)
    got = compiled(*args)
    ops = compiled.graph.op_histogram()
    assert grad_op in ops, ops
    want = jax.jit(jax.grad(loss, argnums=argnums))(*args)  # one XLA compile, not one per op
    exact = _grad_f64(loss, args, argnums)
    for w, e in zip(jax.tree_util.tree_leaves(want), jax.tree_util.tree_leaves(exact)):
        if not np.allclose(np.asarray(w, np.float64), e, rtol=tol["rtol"] / 2,
                           atol=tol["atol"] / 2):
            reject()
    assert_tree_close(got, want, **tol)
    return compiled


def _require_spread(x, axes, floor=0.05):
    """Reject examples where some normalised group is nearly constant (variance below
    ``floor``, data of scale ~2): the gradient there is dominated by cancellation in any
    fp32 evaluation order and JAX's and rlxjax's differ by 1e-4 relative or more. Such
    inputs are measured against float64 by the numerics tests, not here."""
    if x.size and np.min(np.var(x.astype(np.float64), axis=tuple(axes))) < floor:
        reject()


def _grad_f64(loss, args, argnums):
    with jax.enable_x64(True):
        return jax.tree_util.tree_map(
            np.asarray,
            jax.jit(jax.grad(loss, argnums=argnums))(*[np.asarray(a, np.float64) for a in args]))


def _affine_args(rng, x, pshape, has_g, has_b):
    g = _arr(rng, pshape, 0.5, 1.0) if has_g else None
    b = _arr(rng, pshape) if has_b else None
    return g, b


def _loss_over(norm, has_g, has_b, **kw):
    """loss(x, gamma?, beta?, w) = sum(norm(x, gamma, beta) * w), present operands only."""
    def loss(x, *rest):
        *ops, w = rest
        it = iter(ops)
        g = next(it) if has_g else None
        b = next(it) if has_b else None
        return jnp.sum(norm(x, g, b, **kw) * w)
    return loss


def _run_affine(norm, grad_op, rng, x, pshape, affine, **kw):
    has_g, has_b = affine
    g, b = _affine_args(rng, x, pshape, has_g, has_b)
    ops = [a for a in (x, g, b) if a is not None]
    w = _arr(rng, x.shape)
    loss = _loss_over(norm, has_g, has_b, **kw)
    return check_grads(loss, (*ops, w), tuple(range(len(ops))), grad_op)


# -- LayerNorm, RMSNorm ------------------------------------------------------------------
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
@SETTINGS
@given(rank=st.integers(1, 3), data=st.data())
def test_trailing_norm_grads(name, rank, data):
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axis = data.draw(st.integers(-rank, -1))
    eps = data.draw(st.sampled_from([1e-6, 1e-5, 1e-3, 0.1]))
    affine = data.draw(st.sampled_from(AFFINE))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = _arr(rng, shape, 2.0, 1.0)
    _run_affine(getattr(rnn, name), name + "_grad", rng, x, shape[axis:], affine,
                axis=axis, eps=eps)


# -- GroupNorm ---------------------------------------------------------------------------
@SETTINGS
@given(spatial=st.lists(st.integers(1, 3), min_size=0, max_size=2),
       groups=st.sampled_from([1, 2, 3]), cpg=st.integers(1, 3), n=st.integers(1, 2),
       layout=st.sampled_from(["first", "last", "middle"]),
       affine=st.sampled_from(AFFINE), eps=st.sampled_from([1e-5, 1e-2]),
       seed=st.integers(0, 2**16))
def test_group_norm_grads(spatial, groups, cpg, n, layout, affine, eps, seed):
    c, spatial = groups * cpg, tuple(spatial)
    if layout == "first":
        shape, axis = (n, c) + spatial, 1
    elif layout == "last":
        shape, axis = (n,) + spatial + (c,), -1
    else:  # channels between two spatial dims
        shape, axis = (n, 2, c) + spatial, 2
    rng = np.random.default_rng(seed)
    x = _arr(rng, shape, 3.0, -2.0)
    _run_affine(rnn.group_norm, "group_norm_grad", rng, x, (c,), affine,
                num_groups=groups, eps=eps, channel_axis=axis)


# -- LayerNorm2d -------------------------------------------------------------------------
@SETTINGS
@given(shape=st.lists(st.integers(1, 3), min_size=3, max_size=4), affine=st.sampled_from(AFFINE),
       eps=st.sampled_from([1e-6, 1e-3]), seed=st.integers(0, 2**16))
def test_layer_norm2d_grads(shape, affine, eps, seed):
    rng = np.random.default_rng(seed)
    x = _arr(rng, tuple(shape), 2.0, 1.0)
    _require_spread(x, (1,))
    _run_affine(rnn.layer_norm2d, "layer_norm2d_grad", rng, x, (shape[1],), affine, eps=eps)


# -- BatchNorm (frozen statistics, and training form) ----------------------------------
@st.composite
def batch_case(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))
    return (shape, draw(st.integers(-rank, rank - 1)), draw(st.sampled_from(AFFINE)),
            draw(st.sampled_from([1e-5, 1e-3])), draw(st.integers(0, 2**16)))


@SETTINGS
@given(case=batch_case())
def test_batch_norm_frozen_grads(case):
    shape, axis, (has_g, has_b), eps, seed = case
    rng = np.random.default_rng(seed)
    x = _arr(rng, shape, 2.0, 1.0)
    c = (shape[axis],)
    g, b = _affine_args(rng, x, c, has_g, has_b)
    mean, var = _arr(rng, c), np.abs(_arr(rng, c)) + 0.5
    w = _arr(rng, shape)
    ops = [a for a in (x, g, b) if a is not None]

    def loss(*a):
        *affine_ops, m, v, w_ = a
        norm = _loss_over(lambda x_, g_, b_: rnn.batch_norm(x_, g_, b_, m, v, eps=eps,
                                                            axis=axis), has_g, has_b)
        return norm(*affine_ops, w_)

    args = (*ops, mean, var, w)
    check_grads(loss, args, tuple(range(len(args) - 1)), "batch_norm_grad")


@SETTINGS
@given(case=batch_case(), momentum=st.sampled_from([0.0, 0.9, 0.99]),
       stats_in_loss=st.sampled_from([(False, False), (True, True), (True, False),
                                      (False, True)]))
def test_batch_norm_train_grads(case, momentum, stats_in_loss):
    shape, axis, (has_g, has_b), eps, seed = case
    rng = np.random.default_rng(seed)
    x = _arr(rng, shape, 2.0, 1.0)
    _require_spread(x, [i for i in range(x.ndim) if i != axis % x.ndim])
    c = (shape[axis],)
    g, b = _affine_args(rng, x, c, has_g, has_b)
    rmean, rvar = _arr(rng, c), np.abs(_arr(rng, c)) + 0.5
    w, wm, wv = _arr(rng, shape), _arr(rng, c), _arr(rng, c)
    ops = [a for a in (x, g, b) if a is not None]
    use_m, use_v = stats_in_loss

    def loss(*a):
        *affine_ops, rm, rv, w_, wm_, wv_ = a
        it = iter(affine_ops[1:])
        g_ = next(it) if has_g else None
        b_ = next(it) if has_b else None
        y, new_m, new_v = rnn.batch_norm_train(affine_ops[0], g_, b_, eps=eps, axis=axis,
                                               momentum=momentum, running_mean=rm,
                                               running_var=rv)
        out = jnp.sum(y * w_)
        if use_m:
            out = out + jnp.sum(new_m * wm_)
        if use_v:
            out = out + jnp.sum(new_v * wv_)
        return out

    args = (*ops, rmean, rvar, w, wm, wv)
    check_grads(loss, args, tuple(range(len(ops) + 2)), "batch_norm_train_grad")


@pytest.mark.parametrize("use_m, use_v", [(True, False), (False, True), (True, True)])
def test_batch_norm_train_running_stats_only(use_m, use_v):
    # Without a cotangent for y no batch_norm_train_grad node is needed: x's gradient
    # comes from the batch mean/var inside the running-stat updates alone.
    rng = np.random.default_rng(4)
    x, rm, rv = _arr(rng, (3, 4, 2), 2.0, 1.0), _arr(rng, (4,)), np.abs(_arr(rng, (4,))) + 0.5
    g, b, wm, wv = _arr(rng, (4,)), _arr(rng, (4,)), _arr(rng, (4,)), _arr(rng, (4,))

    def loss(x_, g_, b_, rm_, rv_, wm_, wv_):
        _, new_m, new_v = rnn.batch_norm_train(x_, g_, b_, axis=1, momentum=0.8,
                                               running_mean=rm_, running_var=rv_)
        terms = [jnp.sum(new_m * wm_)] * use_m + [jnp.sum(new_v * wv_)] * use_v
        return sum(terms[1:], terms[0])

    args = (x, g, b, rm, rv, wm, wv)
    argnums = (0, 1, 2, 3, 4)
    compiled = _grad_program(loss, args, argnums)
    assert_tree_close(compiled(*args), jax.grad(loss, argnums=argnums)(*args), **TOL)
    assert "batch_norm_train_grad" not in compiled.graph.op_histogram()


# -- AdaLayerNorm, GatedResidual --------------------------------------------------------
_BROADCAST = [lambda b, t, d: (d,), lambda b, t, d: (b, 1, d), lambda b, t, d: (1, t, d),
              lambda b, t, d: (b, t, d), lambda b, t, d: (1, d), lambda b, t, d: (b, t, 1)]


@SETTINGS
@given(dims=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5)),
       kind=st.sampled_from(["layer", "rms"]), scale_i=st.integers(0, 5),
       shift_i=st.integers(0, 5), eps=st.sampled_from([1e-6, 1e-3]),
       seed=st.integers(0, 2**16))
def test_ada_layer_norm_grads(dims, kind, scale_i, shift_i, eps, seed):
    rng = np.random.default_rng(seed)
    x = _arr(rng, dims, 2.0, 1.0)
    scale, shift = _arr(rng, _BROADCAST[scale_i](*dims)), _arr(rng, _BROADCAST[shift_i](*dims))
    w = _arr(rng, dims)

    def loss(x_, sc, sh, w_):
        return jnp.sum(rnn.ada_layer_norm(x_, sc, sh, kind=kind, eps=eps) * w_)

    check_grads(loss, (x, scale, shift, w), (0, 1, 2), "ada_layer_norm_grad")


@SETTINGS
@given(dims=st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 5)),
       gate_i=st.integers(0, 5), seed=st.integers(0, 2**16))
def test_gated_residual_grads(dims, gate_i, seed):
    rng = np.random.default_rng(seed)
    x, y, w = _arr(rng, dims), _arr(rng, dims), _arr(rng, dims)
    gate = _arr(rng, _BROADCAST[gate_i](*dims))

    def loss(x_, y_, g_, w_):
        return jnp.sum(rnn.gated_residual(x_, y_, g_) * w_)

    check_grads(loss, (x, y, gate, w), (0, 1, 2), "gated_residual_grad")


# -- only what is needed is computed ----------------------------------------------------
@pytest.mark.parametrize("argnums, selected", [
    (0, ("dx",)), (1, ("dgamma",)), ((1, 2), ("dgamma", "dbeta")), ((0, 1), ("dx", "dgamma"))])
def test_layer_norm_grad_selects_outputs(argnums, selected):
    rng = np.random.default_rng(5)
    x, g, b, w = _arr(rng, (4, 6)), _arr(rng, (6,)), _arr(rng, (6,)), _arr(rng, (4, 6))

    def loss(x_, g_, b_, w_):
        return jnp.sum(rnn.layer_norm(x_, g_, b_) * w_)

    compiled = check_grads(loss, (x, g, b, w), argnums, "layer_norm_grad")
    (node,) = compiled.graph.iter_nodes("layer_norm_grad")
    assert node.params["outputs"] == selected
    assert len(node.outputs) == len(selected)


def test_group_norm_grad_x_only_skips_parameter_sums():
    rng = np.random.default_rng(6)
    x, g, b, w = (_arr(rng, (2, 4, 3)), _arr(rng, (4,)), _arr(rng, (4,)),
                  _arr(rng, (2, 4, 3)))

    def loss(x_, g_, b_, w_):
        return jnp.sum(rnn.group_norm(x_, g_, b_, num_groups=2) * w_)

    compiled = check_grads(loss, (x, g, b, w), 0, "group_norm_grad")
    (node,) = compiled.graph.iter_nodes("group_norm_grad")
    assert node.params["outputs"] == ("dx",)
    assert "reduce_sum" not in compiled.op_histogram()  # no dgamma / dbeta sums


def _mil_op_count(op, in_types, **params):
    """Non-const MIL ops of a program holding one ``op`` node and nothing else."""
    graph = Graph("one_node")
    ins = [graph.add_input(f"in{i}", t) for i, t in enumerate(in_types)]
    for k, v in enumerate(graph.add_node(op, ins, params).outputs):
        graph.add_output(f"out{k}", v)
    with tempfile.TemporaryDirectory() as d:
        model, _, _ = lower_graph(graph, get_target("iOS17"), "fp32", d)
    block = next(iter(model.mlProgram.functions["main"].block_specializations.values()))
    return sum(o.type != "const" for o in block.operations)


@pytest.mark.parametrize("shape", [(4, 8), (2, 3, 8)])
def test_layer_norm_input_and_gamma_backward_op_count(shape):
    t, p = TensorType(shape, DType.f32), TensorType(shape[-1:], DType.f32)
    n = _mil_op_count("layer_norm_grad", [t, p, t], axis=len(shape) - 1, eps=1e-5,
                      has_gamma=True, outputs=("dx", "dgamma"))
    # 7 (centred stats, x̂) + 1 (dy·γ) + 7 (dx) + 2 (dγ: mul, reduce_sum)
    assert n <= 18, n


# -- fp16 compute ------------------------------------------------------------------------
def _fp16_cases():
    rng = np.random.default_rng(7)
    x, w = _arr(rng, (3, 8)), _arr(rng, (3, 8))
    g, b = _arr(rng, (8,), 0.5, 1.0), _arr(rng, (8,))
    x4, w4 = _arr(rng, (2, 4, 3, 2)), _arr(rng, (2, 4, 3, 2))
    g4, b4 = _arr(rng, (4,), 0.5, 1.0), _arr(rng, (4,))
    m4, v4 = _arr(rng, (4,)), np.abs(_arr(rng, (4,))) + 0.5
    sc, sh = _arr(rng, (3, 1)), _arr(rng, (8,))
    return {
        "layer_norm": (lambda x_, g_, b_, w_: jnp.sum(rnn.layer_norm(x_, g_, b_) * w_),
                       (x, g, b, w)),
        "rms_norm": (lambda x_, g_, b_, w_: jnp.sum(rnn.rms_norm(x_, g_, b_) * w_), (x, g, b, w)),
        "group_norm": (lambda x_, g_, b_, w_: jnp.sum(
            rnn.group_norm(x_, g_, b_, num_groups=2) * w_), (x4, g4, b4, w4)),
        "layer_norm2d": (lambda x_, g_, b_, w_: jnp.sum(rnn.layer_norm2d(x_, g_, b_) * w_),
                         (x4, g4, b4, w4)),
        "batch_norm": (lambda x_, g_, b_, m_, v_, w_: jnp.sum(
            rnn.batch_norm(x_, g_, b_, m_, v_, axis=1) * w_), (x4, g4, b4, m4, v4, w4)),
        "batch_norm_train": (lambda x_, g_, b_, w_: jnp.sum(rnn.batch_norm_train(
            x_, g_, b_, axis=1, running_mean=m4, running_var=v4)[0] * w_), (x4, g4, b4, w4)),
        "ada_layer_norm": (lambda x_, s_, h_, w_: jnp.sum(rnn.ada_layer_norm(x_, s_, h_) * w_),
                           (x, sc, sh, w)),
        "gated_residual": (lambda x_, y_, g_, w_: jnp.sum(rnn.gated_residual(x_, y_, g_) * w_),
                           (x, w[::-1].copy(), sc, w)),
    }


@pytest.mark.parametrize("name", list(_fp16_cases()))
def test_norm_grads_in_fp16(name):
    loss, args = _fp16_cases()[name]
    argnums = tuple(range(len(args) - 1))
    compiled = _grad_program(loss, args, argnums, precision="fp16")
    assert name + "_grad" in compiled.graph.op_histogram()
    want = jax.jit(jax.grad(loss, argnums=argnums))(*args)  # one XLA compile, not one per op
    # fp16 compute (11 significant bits, rel. step 4.9e-4) of a chain of ~15 rounded ops
    # and sums over <= 24 elements, on gradients of magnitude up to ~6: the largest
    # difference measured was 4.8e-3 (ada_layer_norm); 1e-2 leaves a factor of 2.
    for got_i, want_i in zip(compiled(*args), want):
        np.testing.assert_allclose(got_i, np.asarray(want_i), rtol=1e-2, atol=1e-2)
