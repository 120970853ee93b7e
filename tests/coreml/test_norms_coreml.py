"""The norm family through coreml_jit: every rlxjax.nn norm, compiled, validated by
coremltools' loader, run on the reference backend and compared with jax.jit of the
jax.numpy reference (rlxjax.nn.reference)."""
from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlxjax.nn as rnn
from helpers import check_against_jax, examples
from rlxjax.nn import reference as ref

SETTINGS = settings(max_examples=examples(8), deadline=None)
# fp32: one pass of mean/variance over <= 60 elements; numpy and XLA may sum in another
# order, which moves results by a few ulps of values of order 1-10 (measured <= 2e-6).
TOL = dict(rtol=1e-5, atol=1e-5)


def _arr(rng, shape, scale=1.0, offset=0.0):
    return (offset + scale * rng.standard_normal(shape)).astype(np.float32)


def _compare(fn, reffn, *args):
    """Compile fn (the primitive) and compare with jax.jit of the jnp reference."""
    compiled = check_against_jax(fn, *args, **TOL)
    want = jax.jit(reffn)(*args)
    got = compiled(*args)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(g, np.asarray(w), **TOL)
    return compiled


def _optional_affine(f, has_g, has_b, **kw):
    """f(x, gamma?, beta?) taking only the operands that are present, positionally."""
    def call(x, *rest):
        it = iter(rest)
        g = next(it) if has_g else None
        b = next(it) if has_b else None
        return f(x, g, b, **kw)
    return call


@st.composite
def trailing_case(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, -1))
    eps = draw(st.sampled_from([1e-6, 1e-5, 1e-3, 0.1]))
    affine = draw(st.sampled_from([(True, True), (True, False), (False, True), (False, False)]))
    return shape, axis, eps, affine, draw(st.integers(0, 2**16))


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm"])
@SETTINGS
@given(case=trailing_case())
def test_trailing_norms(name, case):
    shape, axis, eps, (has_g, has_b), seed = case
    rng = np.random.default_rng(seed)
    x = _arr(rng, shape, 2.0, 1.0)
    pshape = shape[axis:]
    g = _arr(rng, pshape) if has_g else None
    b = _arr(rng, pshape) if has_b else None
    fn, rf = getattr(rnn, name), getattr(ref, name + "_ref")
    args = [a for a in (x, g, b) if a is not None]
    kw = dict(axis=axis, eps=eps)
    compiled = _compare(_optional_affine(fn, has_g, has_b, **kw),
                        _optional_affine(rf, has_g, has_b, **kw), *args)
    hist = compiled.op_histogram()
    if name == "layer_norm":  # fp32: MIL's own layer_norm (runtime gamma/beta after it)
        assert hist["layer_norm"] == 1 and "reduce_mean" not in hist, hist
    else:
        assert "reduce_mean" in hist
        assert not {"layer_norm", "batch_norm", "instance_norm"} & set(hist)


@st.composite
def group_case(draw):
    spatial = tuple(draw(st.lists(st.integers(1, 3), min_size=0, max_size=2)))
    groups = draw(st.sampled_from([1, 2, 3]))
    cpg = draw(st.integers(1, 3))
    n = draw(st.integers(1, 3))
    channel_axis = draw(st.sampled_from([1, -1]))
    affine = draw(st.sampled_from([(True, True), (False, False), (True, False)]))
    eps = draw(st.sampled_from([1e-5, 1e-2]))
    return n, groups * cpg, spatial, groups, channel_axis, affine, eps, draw(st.integers(0, 2**16))


@SETTINGS
@given(case=group_case())
def test_group_norm(case):
    n, c, spatial, groups, channel_axis, (has_g, has_b), eps, seed = case
    rng = np.random.default_rng(seed)
    shape = (n, c) + spatial if channel_axis == 1 else (n,) + spatial + (c,)
    x = _arr(rng, shape, 3.0, -2.0)
    g = _arr(rng, (c,)) if has_g else None
    b = _arr(rng, (c,)) if has_b else None

    kw = dict(num_groups=groups, eps=eps, channel_axis=channel_axis)
    args = [a for a in (x, g, b) if a is not None]
    _compare(_optional_affine(rnn.group_norm, has_g, has_b, **kw),
             _optional_affine(ref.group_norm_ref, has_g, has_b, **kw), *args)


def test_group_norm_middle_channel_axis():
    rng = np.random.default_rng(0)
    x, g, b = _arr(rng, (2, 3, 4, 5)), _arr(rng, (4,)), _arr(rng, (4,))
    kw = dict(num_groups=2, eps=1e-5, channel_axis=2)
    _compare(lambda *a: rnn.group_norm(*a, **kw), lambda *a: ref.group_norm_ref(*a, **kw), x, g, b)


@pytest.mark.parametrize("axis", [1, -1])
def test_batch_norm_frozen_and_train(axis):
    rng = np.random.default_rng(1)
    x = _arr(rng, (4, 3, 5), 2.0, 3.0)
    c = x.shape[axis]
    g, b, m = _arr(rng, (c,)), _arr(rng, (c,)), _arr(rng, (c,))
    v = np.abs(_arr(rng, (c,))) + 0.1
    _compare(lambda *a: rnn.batch_norm(*a, eps=1e-3, axis=axis),
             lambda *a: ref.batch_norm_ref(*a, eps=1e-3, axis=axis), x, g, b, m, v)
    kw = dict(eps=1e-5, axis=axis, momentum=0.9)
    _compare(lambda x_, g_, b_, m_, v_: rnn.batch_norm_train(x_, g_, b_, running_mean=m_,
                                                             running_var=v_, **kw),
             lambda x_, g_, b_, m_, v_: ref.batch_norm_train_ref(x_, g_, b_, running_mean=m_,
                                                                 running_var=v_, **kw),
             x, g, b, m, v)


def test_layer_norm2d_ada_and_gated_residual():
    rng = np.random.default_rng(2)
    x = _arr(rng, (2, 6, 3, 4))
    g, b = _arr(rng, (6,)), _arr(rng, (6,))
    _compare(lambda *a: rnn.layer_norm2d(*a, eps=1e-6),
             lambda *a: ref.layer_norm2d_ref(*a, eps=1e-6), x, g, b)
    t = _arr(rng, (2, 5, 8))
    scale, shift = _arr(rng, (2, 1, 8)), _arr(rng, (8,))
    for kind in ("layer", "rms"):
        _compare(lambda *a: rnn.ada_layer_norm(*a, kind=kind),
                 lambda *a: ref.ada_layer_norm_ref(*a, kind=kind), t, scale, shift)
    _compare(rnn.gated_residual, ref.gated_residual_ref, t, _arr(rng, (2, 5, 8)), scale)


def test_norms_in_fp16_and_on_every_target():
    rng = np.random.default_rng(3)
    x, g, b = _arr(rng, (3, 8)), _arr(rng, (8,)), _arr(rng, (8,))
    for target in ("iOS15", "iOS16", "iOS17", "iOS18"):
        check_against_jax(lambda *a: rnn.layer_norm(*a), x, g, b, target=target, **TOL)
    # fp16 compute: inputs of order 1, 8-element rows; fp16 has 11 significant bits
    # (rel. step 4.9e-4), and a norm is a handful of rounded ops: 5e-3 is ~10 steps.
    check_against_jax(lambda *a: rnn.layer_norm(*a), x, g, b, precision="fp16",
                      rtol=5e-3, atol=5e-3)
