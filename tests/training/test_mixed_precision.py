"""precision="mixed" training steps (rlxjax/training/mixed_precision.py): fp16
forward/backward, fp32 weights and optimizer state, dynamic loss scaling. Checked against
JAX: the fp32 step (jax.jit), and the same mixed algorithm written in plain JAX
(tests/mixed_reference.py: jnp.float16 through JAX's autodiff, jmp's loss-scale rule). The
loss-curve bound is the one docs/numerics.md documents (bench/mixed_precision.py measures
it)."""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlxjax
from mixed_reference import fp32_step, mixed_init, mixed_step
from models import MLP, cross_entropy, onehot, rng_data, workloads

# docs/numerics.md "Mixed-precision training": bound on the loss curve against fp32 JAX
MAX_REL = 0.05


def lin_loss(p, x):
    return jnp.sum(p["w"] * x) + jnp.sum(p["b"])


P = {"w": np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3),
     "b": np.array([0.5, -0.25], np.float32)}


def _step(state="io", opt=None, **kw):
    return rlxjax.coreml_train_step(lin_loss, opt or optax.adam(1e-2), state=state,
                                    precision="mixed", backend="reference-fast", **kw)


@pytest.mark.parametrize("state", ["io", "mlstate"])
def test_overflow_skips_the_step_and_halves_the_scale(state):
    # d loss / d w = x = 1e4: times the scale 2^15 the fp16 cotangent is inf
    step = _step(state)
    st0 = step.init(P)
    x = np.full((2, 3), 1e4, np.float32)
    st1, loss = step(st0, x)
    np.testing.assert_array_equal(st1.params["w"], P["w"])
    np.testing.assert_array_equal(st1.params["b"], P["b"])
    inner0, inner1 = st0.opt_state.optimizer, st1.opt_state.optimizer
    for a, b in zip(jax.tree_util.tree_leaves(inner0), jax.tree_util.tree_leaves(inner1)):
        np.testing.assert_array_equal(a, b)  # adam's count and moments unchanged
    assert float(st1.opt_state.loss_scale) == 2.0 ** 14
    assert int(st1.opt_state.good_steps) == 0
    want = float(jnp.sum(P["w"].astype(np.float16) * np.float16(1e4)).astype(np.float32)
                 + P["b"].sum())
    assert np.isfinite(float(loss)) and abs(float(loss) - want) <= 1e-3 * abs(want)
    # the scale keeps halving until the cotangent fits: 1e4 * S < 65504 needs S <= 4
    for _ in range(12):
        st1, _ = step(st1, x)
    assert float(st1.opt_state.loss_scale) == 4.0  # (13 halvings: 2^15 -> 2^2)
    st1, _ = step(st1, x)
    assert float(st1.opt_state.loss_scale) == 4.0 and int(st1.opt_state.good_steps) == 1
    assert not np.array_equal(st1.params["w"], P["w"])  # then steps are taken


def test_scale_never_below_min():
    step = _step(loss_scale=rlxjax.DynamicLossScale(initial=8.0, min_scale=2.0))
    st = step.init(P)
    x = np.full((2, 3), np.inf, np.float32)  # every gradient inf at any scale
    for want in (4.0, 2.0, 2.0):
        st, _ = step(st, x)
        assert float(st.opt_state.loss_scale) == want
    np.testing.assert_array_equal(st.params["w"], P["w"])


def test_scale_grows_after_period_finite_steps():
    step = _step(opt=optax.sgd(1e-3),
                 loss_scale=rlxjax.DynamicLossScale(initial=8.0, period=3, factor=4.0))
    st = step.init(P)
    x = np.ones((2, 3), np.float32)
    seen = []
    for _ in range(7):
        st, _ = step(st, x)
        seen.append((float(st.opt_state.loss_scale), int(st.opt_state.good_steps)))
    assert seen == [(8, 1), (8, 2), (32, 0), (32, 1), (32, 2), (128, 0), (128, 1)]
    # an overflow resets the counter (and divides by the factor)
    st, _ = step(st, np.full((2, 3), np.inf, np.float32))
    assert (float(st.opt_state.loss_scale), int(st.opt_state.good_steps)) == (32, 0)


def test_bad_loss_scale_arguments():
    with pytest.raises(rlxjax.ArgumentError, match="precision='mixed'"):
        rlxjax.coreml_train_step(lin_loss, optax.sgd(1.0),
                                 loss_scale=rlxjax.DynamicLossScale())
    with pytest.raises(rlxjax.ArgumentError, match="period"):
        rlxjax.DynamicLossScale(period=0)
    with pytest.raises(rlxjax.ArgumentError, match="factor"):
        rlxjax.DynamicLossScale(factor=1.0)
    with pytest.raises(rlxjax.ArgumentError, match="DynamicLossScale"):
        _step(loss_scale=2.0 ** 15)
    fp32_state = rlxjax.coreml_train_step(lin_loss, optax.adam(1e-2)).init(P)
    with pytest.raises(rlxjax.ArgumentError, match="MixedState"):
        _step()(fp32_state, np.ones((2, 3), np.float32))
    with pytest.raises(rlxjax.ArgumentError, match="trainable"):
        rlxjax.coreml_train_step(lin_loss, optax.sgd(1.0), precision="mixed",
                                 trainable={"w": True, "b": False})
    with pytest.raises(rlxjax.ArgumentError, match="fp32.*mixed"):
        rlxjax.coreml_train_step(lin_loss, optax.sgd(1.0), precision="fp16")


def _max_abs(tree):
    return max(float(np.max(np.abs(x))) for x in jax.tree_util.tree_leaves(tree))


def _two_layer(p, x):
    h = jnp.tanh(x @ p["w1"])
    return jnp.mean((h @ p["w2"]) ** 2)


_PARITY = {}


def _parity_steps():
    if not _PARITY:  # one program each, reused by every example (the scale is state)
        _PARITY["ours"] = rlxjax.coreml_train_step(_two_layer, optax.sgd(1.0),
                                                   precision="mixed", backend="reference-fast")
        _PARITY["jax"] = mixed_step(_two_layer, optax.sgd(1.0))
    return _PARITY["ours"], _PARITY["jax"]


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2 ** 16), scale=st.sampled_from([1.0, 2.0 ** 6, 2.0 ** 10]))
def test_one_step_matches_plain_jax_mixed(seed, scale):
    """One sgd(1) step: params − new params is the unscaled fp16 gradient, which must agree
    with JAX's own fp16 autodiff of the same loss to fp16 accuracy (a few ulps of 2^-11,
    relative to the largest gradient). (Scales where neither side overflows: at 2^15 a
    gradient summing to ≈ 65504 overflows in one and not the other, by rounding.)"""
    r = np.random.default_rng(seed)
    p = {"w1": r.normal(size=(5, 8)).astype(np.float32),
         "w2": r.normal(size=(8, 3)).astype(np.float32)}
    x = r.normal(size=(4, 5)).astype(np.float32)
    step, ref = _parity_steps()
    st0 = step.init(p)
    st0 = rlxjax.TrainState(p, st0.opt_state._replace(loss_scale=np.float32(scale)), 0)
    st, got_loss = step(st0, x)
    rs0 = mixed_init(optax.sgd(1.0), p)._replace(loss_scale=jnp.float32(scale))
    new_p, rstate, want_loss = ref(p, rs0, x)
    got_g = jax.tree_util.tree_map(lambda a, b: a - b, p, st.params)
    want_g = jax.tree_util.tree_map(lambda a, b: a - b, p, new_p)
    assert _max_abs(want_g) > 0  # (a step was taken)
    tol = 8 * 2.0 ** -11 * _max_abs(want_g)
    for a, b in zip(jax.tree_util.tree_leaves(got_g), jax.tree_util.tree_leaves(want_g)):
        np.testing.assert_allclose(a, b, rtol=0, atol=tol)
    assert abs(float(got_loss) - float(want_loss)) <= 4 * 2.0 ** -11 * abs(float(want_loss))
    assert float(st.opt_state.loss_scale) == float(rstate.loss_scale) == scale


def test_aux_is_returned_in_fp32():
    def loss(p, x):
        h = x * p["w"]
        return jnp.sum(h) + jnp.sum(p["b"]), {"mean": jnp.mean(h, axis=0)}

    step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), precision="mixed",
                                    has_aux=True, backend="reference-fast")
    x = np.linspace(-2, 3, 6, dtype=np.float32).reshape(2, 3)
    st, value, aux = step(step.init(P), x)
    want, want_aux = loss(P, x)
    assert np.asarray(aux["mean"]).dtype == np.float32
    np.testing.assert_allclose(aux["mean"], want_aux["mean"], rtol=4 * 2.0 ** -11, atol=0)
    assert abs(float(value) - float(want)) <= 8 * 2.0 ** -11 * abs(float(want))


def _mlp_layernorm():
    """workloads()["mlp_layernorm"], built alone (workloads() initialises six models)."""
    x, = rng_data(0, (8, 16))
    m = MLP()
    return (lambda p, x, y: cross_entropy(m.apply(p, x), y),
            m.init(jax.random.PRNGKey(0), x), (x, onehot(1, 8, 4)))


@functools.lru_cache(maxsize=1)
def _workloads():
    return workloads()


def _curve_deviation(name, steps):
    loss, params, batch = _mlp_layernorm() if name == "mlp_layernorm" else _workloads()[name]
    opt = optax.adam(1e-3)
    step = rlxjax.coreml_train_step(loss, opt, precision="mixed", backend="reference-fast")
    st = step.init(params)
    ref, p, s = fp32_step(loss, opt), params, opt.init(params)
    dev = 0.0
    for _ in range(steps):
        st, got = step(st, *batch)
        p, s, want = ref(p, s, *batch)
        dev = max(dev, abs(float(got) - float(want)) / abs(float(want)))
    return dev


@pytest.mark.slow  # (~6 s; skip/scale/parity unit tests run by default)
def test_short_curve_within_bound():
    assert _curve_deviation("mlp_layernorm", 20) <= MAX_REL


@pytest.mark.slow
@pytest.mark.parametrize("name", ["channelnet_groupnorm", "cnn_groupnorm", "dit_block",
                                  "transformer_block"])
def test_curves_within_bound(name):
    assert _curve_deviation(name, 100) <= MAX_REL


def test_cost_model_bytes_by_dtype():
    """The cost model splits the bytes moved by element type: an fp32 step moves no fp16,
    a mixed step runs its matmuls in fp16 (half their fp32 bytes: same shapes)."""
    def loss(p, x):
        return jnp.mean(jnp.tanh(x @ p["w1"]) @ p["w2"])

    r = np.random.default_rng(0)
    p = {"w1": r.normal(size=(16, 32)).astype(np.float32),
         "w2": r.normal(size=(32, 4)).astype(np.float32)}
    x = r.normal(size=(8, 16)).astype(np.float32)
    cost = {}
    for prec in ("fp32", "mixed"):
        step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), precision=prec)
        cost[prec] = step.lower(p, step.init(p).opt_state, x).compile().cost_analysis()
        c = cost[prec]
        assert sum(c["bytes_by_dtype"].values()) == c["bytes_read"] + c["bytes_written"]
    assert "FLOAT16" not in cost["fp32"]["bytes_by_dtype"]
    assert cost["mixed"]["bytes_by_dtype"]["FLOAT16"] > 0
    mm = {k: sum(o["bytes_read"] + o["bytes_written"] for o in c["ops"]
                 if o["type"] == "matmul") for k, c in cost.items()}
    # (the matmuls' transpose flags are 1-byte bools in both)
    assert mm["fp32"] > 0 and abs(2 * mm["mixed"] - mm["fp32"]) <= 0.01 * mm["fp32"]


@pytest.mark.parametrize("state", ["io", "mlstate"])
def test_saved_mixed_step_passes_coremltools_loaders(state, tmp_path):
    import os

    import coremltools as ct

    from rlxjax.coreml.ct_private import load_milproto

    step = _step(state)
    st = step.init(P)
    st, _ = step(st, np.ones((2, 3), np.float32))
    path = step.save(str(tmp_path / "mixed.mlpackage"))
    model = ct.models.MLModel(path, skip_model_load=True)  # coremltools' model loader
    spec = model.get_spec()
    prog = load_milproto(spec, os.path.join(path, "Data", "com.apple.CoreML", "weights"))
    ops = [op.op_type for op in prog.functions["main"].operations]
    assert "cast" in ops and "select" in ops  # fp16 compute, the skip selects
    if state == "io":  # the scale is an fp32 input, like the moments and the weights
        feats = {f.name: f for f in spec.description.input}
        scale = [f for n, f in feats.items() if "loss_scale" in n]
        assert len(scale) == 1
        f32 = ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT32
        assert scale[0].type.multiArrayType.dataType == f32
