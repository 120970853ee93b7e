"""Core AI training programs beyond io mode: parameters and optimizer state in Core AI
states (state="mlstate", fp32 / int32 as they are), one asset with train_step and predict,
trainable= / compress=, checked against JAX + optax and against the io-mode program."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
from helpers import jax_loop, jax_masked_loop

pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core (rlxjax[coreai])")
optax = pytest.importorskip("optax")

rng = np.random.default_rng(1)


def _f32(*shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def predict(p, x):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    return h @ p["w2"]


def loss(p, x, y):
    return jnp.mean((predict(p, x) - y) ** 2)


P = {"w1": _f32(6, 8), "b1": np.zeros(8, np.float32), "w2": _f32(8, 2)}
X, Y = _f32(16, 6, scale=1.0), _f32(16, 2, scale=1.0)


def _run(step, steps, params=P):
    st, got = step.init(params, X, Y), []
    for _ in range(steps):
        st, value = step(st, X, Y)
        got.append(float(value))
    return st, got


def test_state_mode_trains_as_jax_and_bit_for_bit_as_io_mode():
    opt = optax.adam(1e-2)
    st_io, io = _run(rlxjax.coreml_train_step(loss, opt, format="aimodel"), 20)
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", format="aimodel")
    st, got = _run(step, 20)
    assert got == io  # the same fp32 program around the states: the same bits
    want_p, want = jax_loop(loss, opt, P, (X, Y), 20)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert got[-1] < 0.8 * got[0]
    for k in P:
        assert np.array_equal(st.params[k], st_io.params[k])
        np.testing.assert_allclose(st.params[k], want_p[k], rtol=1e-4, atol=1e-5)
    assert int(st.opt_state[0].count) == 20  # the int32 leaf, kept in an int32 state
    meta = json.loads(step.last_compiled.executable.metadata["rlxjax.train"])
    assert meta["encoding"] == "plain" and "exp_bias" not in meta
    assert {s["dtype"] for s in meta["states"]} == {"float32", "int32"}
    assert not step.last_compiled.input_specs[0].name.startswith("state")


def test_one_asset_trains_and_predicts_from_shared_states(tmp_path):
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", format="aimodel")
    st, _ = _run(step, 3)
    path = step.save(tmp_path / "tp.aimodel", predict=(predict, X[:4]))
    folder = step.export_state(st, tmp_path / "state")
    # one state per leaf (w1, b1, w2 and adam's two moments of each; the step count)
    assert sorted(os.listdir(folder)) == sorted(
        ["state.json", "state_i32_0_value.i32"] + [f"state_f32_{k}_value.f32" for k in range(9)])
    m = rlxjax.load(path, flat=True)
    assert m.functions == ("train_step", "predict") and m.function_name == "train_step"
    assert m.input_names == ("x", "y") and m.output_names == ("out",)
    state = m.make_state(folder)
    # the app's loop: train_step then predict on the same states, against JAX + optax
    want_p, want = jax_loop(loss, opt, P, (X, Y), 5)
    for k in range(3, 5):
        out = m(x=X, y=Y, state=state)
        np.testing.assert_allclose(out["out"], want[k], rtol=1e-4)
    pred = m.run("predict", x=X[:4], state=state)["out"]
    np.testing.assert_allclose(pred, predict(want_p, X[:4]), rtol=1e-4, atol=1e-5)
    # and exactly what the step itself computes from the same state
    st2, _ = step(st, X, Y)
    st2, _ = step(st2, X, Y)
    for k in P:
        np.testing.assert_allclose(st2.params[k], want_p[k], rtol=1e-4, atol=1e-5)
    with pytest.raises(rlxjax.ArgumentError, match="has states"):
        m.run("predict", x=X[:4])


@pytest.mark.slow
def test_an_io_asset_with_predict_takes_the_params_as_inputs(tmp_path):
    opt = optax.sgd(0.1)
    step = rlxjax.coreml_train_step(loss, opt, format="aimodel")
    st, _ = _run(step, 2)
    m = rlxjax.load(step.save(tmp_path / "io.aimodel", predict=(predict, X[:3])), flat=True)
    pf = m.function("predict")
    assert pf.input_names == ("params_b1", "params_w1", "params_w2", "x")
    got = pf(params_b1=st.params["b1"], params_w1=st.params["w1"],
             params_w2=st.params["w2"], x=X[:3])["out"]
    np.testing.assert_allclose(got, predict(st.params, X[:3]), rtol=1e-5, atol=1e-6)


def test_trainable_leaves_train_on_a_frozen_base():
    opt = optax.adam(1e-2)
    flags = {"w1": False, "b1": True, "w2": True}
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", trainable=flags,
                                    format="aimodel")
    st, got = _run(step, 10)
    want, want_tree = jax_masked_loop(P, [True, False, True], loss, opt, 10, [(X, Y)])
    np.testing.assert_allclose(got, want, rtol=1e-4)
    trained = step.params(st)
    assert np.array_equal(trained["w1"], P["w1"])
    np.testing.assert_allclose(trained["w2"], want_tree["w2"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scheme", [pytest.param("fp16", marks=pytest.mark.slow), "int8",
                                    pytest.param("int4", marks=pytest.mark.slow), "palettize4",
                                    pytest.param("palettize8", marks=pytest.mark.slow)])
def test_a_compressed_frozen_base_decompresses_exactly_on_core_ai(scheme):
    """The frozen w1 stored with ``scheme``: the step computes with exactly the values the
    quantiser's own dequantisation gives (JAX + optax on that dequantised base)."""
    from rlxjax.compression.schemes import compress_leaf

    big = {"w1": _f32(64, 32), "b1": np.zeros(32, np.float32), "w2": _f32(32, 2)}
    x = _f32(16, 64, scale=1.0)
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, trainable={"w1": False, "b1": True, "w2": True},
                                    compress=scheme, format="aimodel")
    st, got = step.init(big, x, Y), []
    for _ in range(5):
        st, value = step(st, x, Y)
        got.append(float(value))
    base = dict(big, w1=compress_leaf(big["w1"], scheme).value)
    want, _ = jax_masked_loop(base, [True, False, True], loss, opt, 5, [(x, Y)])
    np.testing.assert_allclose(got, want, rtol=1e-4)
    ops = {o.type for o in step.last_compiled.executable.operations()}
    assert {"fp16": "cast", "int8": "blockwise_shift_scale", "int4": "blockwise_shift_scale",
            "palettize4": "lut_to_dense", "palettize8": "lut_to_dense"}[scheme] in ops


# ~9 s; random inputs on Core AI stay in the default run (tests/models/test_keras_hub.py's top-p on Core AI)
@pytest.mark.slow
def test_dropout_with_random_inputs_trains_as_jax_on_the_same_keys():
    """random="inputs": JAX draws the dropout masks on the host from the key in the batch;
    the Core AI program computes with them (Core AI has no random ops)."""
    def dloss(p, x, y, key):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        keep = jax.random.bernoulli(key, 0.8, h.shape)
        h = jnp.where(keep, h / 0.8, 0.0)
        return jnp.mean((h @ p["w2"] - y) ** 2)

    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(dloss, opt, random="inputs", format="aimodel")
    keys = [jax.random.key_data(k) for k in jax.random.split(jax.random.PRNGKey(3), 8)]
    st, got = step.init(P), []
    for k in keys:
        st, value = step(st, X, Y, k)
        got.append(float(value))
    p, s, want = P, opt.init(P), []
    for k in keys:
        v, g = jax.value_and_grad(dloss)(p, X, Y, jax.random.wrap_key_data(k))
        u, s = opt.update(g, s, p)
        p = optax.apply_updates(p, u)
        want.append(float(v))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert len(set(got)) == len(got)  # a fresh mask every step


def test_random_device_points_to_random_inputs():
    with pytest.raises(rlxjax.ArgumentError, match="has no random ops.*random='inputs'"):
        rlxjax.coreml_jit(lambda k: jax.random.normal(k, (3,)), random="device",
                          format="aimodel")


# ~8.4 s: an edge case of the fused masked attention (a row masked whole)
@pytest.mark.slow
def test_bool_masked_attention_with_a_fully_masked_row_runs_fused_as_jax():
    """GQA attention with a bool input mask (one row all False: the mean of v, as JAX's
    dot_product_attention gives), forward and gradient on Core AI's runtime."""
    r = np.random.default_rng(5)
    q = r.standard_normal((1, 3, 4, 4)).astype(np.float32)
    k, v = (r.standard_normal((1, 5, 2, 4)).astype(np.float32) for _ in range(2))
    keep = r.random((1, 1, 3, 5)) < 0.6
    keep[..., 0] = True
    keep[0, 0, -1, :] = False

    def f(q, k, v, mask):
        return jax.nn.dot_product_attention(q, k, v, mask=mask)

    def loss(q, k, v, mask):
        return jnp.sum(jnp.tanh(f(q, k, v, mask)))

    fwd = rlxjax.coreml_jit(f, format="aimodel").lower(q, k, v, keep).compile()
    assert "attention" in fwd._traced.graph.op_histogram()
    np.testing.assert_allclose(fwd(q, k, v, keep), f(q, k, v, keep), rtol=1e-5, atol=1e-6)
    grads = rlxjax.coreml_grad(loss, argnums=(0, 1, 2), format="aimodel")(q, k, v, keep)
    for got, want in zip(grads, jax.grad(loss, argnums=(0, 1, 2))(q, k, v, keep)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("scheme", ["int4", pytest.param("int8", marks=pytest.mark.slow),
                                    pytest.param(None, marks=pytest.mark.slow)])
def test_a_frozen_base_from_the_weight_store_is_exact_and_int4_is_packed(scheme, tmp_path):
    """A frozen w1 large enough to go through the weight store (its payload a constant over
    the store's memory, int4 packed two values a byte): the step equals JAX + optax on the
    dequantised base, and an int4 asset stores about half the bytes of an int8 one. w1 has
    an odd number of values (a last half-filled byte; 95 rows: one int4 scale a column,
    the blockwise scales are tested above)."""
    from rlxjax.compression.schemes import compress_leaf

    big = {"w1": _f32(95, 1365), "b1": np.zeros(1365, np.float32), "w2": _f32(1365, 2)}
    x = _f32(16, 95, scale=1.0)
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, trainable={"w1": False, "b1": True, "w2": True},
                                    compress=scheme, format="aimodel")
    st, got = step.init(big, x, Y), []
    for _ in range(3):
        st, value = step(st, x, Y)
        got.append(float(value))
    base = dict(big, w1=compress_leaf(big["w1"], scheme).value) if scheme else big
    want, _ = jax_masked_loop(base, [True, False, True], loss, opt, 3, [(x, Y)])
    np.testing.assert_allclose(got, want, rtol=1e-4)
    path = step.save(str(tmp_path / "s.aimodel"))
    size = os.path.getsize(os.path.join(path, "main.mlirb"))
    n = big["w1"].size
    payload = {"int4": (n + 1) // 2 + 4 * 1365, "int8": n, None: 4 * n}[scheme]
    assert payload <= size < payload + 64 * 1024, (size, payload)
