"""coreml_train_step: 200 optax steps on the reference backend against the same JAX + optax
loop (issue 6's parity tests), checkpoints, metadata, errors."""
from __future__ import annotations

import json
import os

import jax
import numpy as np
import optax
import pytest

import rlxjax
from helpers import jax_loop
from models import workloads

WORKLOADS = workloads()
STEPS = 200
# Over 200 steps the two loops compute the same maths in different fp32 orders (fused norm
# backward, centred variance); adam normalises tiny gradients, so rounding-level
# differences grow mildly: measured <= 2e-5 relative on final params here.
RTOL, ATOL = 1e-4, 1e-5

CASES = {
    "mlp_layernorm": lambda: optax.adam(1e-2),
    "cnn_groupnorm": lambda: optax.sgd(0.05, momentum=0.9),
    "transformer_block": lambda: optax.chain(optax.clip_by_global_norm(1.0),
                                             optax.adamw(3e-3, weight_decay=1e-2)),
    "dit_block": lambda: optax.adam(optax.warmup_cosine_decay_schedule(0.0, 3e-3, 20, STEPS)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_200_steps_match_jax_optax(name):
    loss, params, batch = WORKLOADS[name]
    opt = CASES[name]()
    step = rlxjax.coreml_train_step(loss, opt, backend="reference")
    state = step.init(params)
    state, history = step.fit(state, [batch], STEPS, progress=False)
    want_params, want_losses = jax_loop(loss, opt, params, batch, STEPS)
    np.testing.assert_allclose(history, want_losses, rtol=RTOL, atol=ATOL)
    for got, want in zip(jax.tree_util.tree_leaves(step.params(state)),
                         jax.tree_util.tree_leaves(want_params)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)
    assert state.step == STEPS and want_losses[-1] < want_losses[0]
    step.last_compiled.validate()


def test_save_metadata_checkpoint_and_resume(tmp_path):
    loss, params, batch = WORKLOADS["mlp_layernorm"]
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), backend="reference")
    with pytest.raises(rlxjax.RlxError, match="call the step once"):
        step.save(tmp_path / "t.mlpackage")
    state = step.init(params)
    state, _ = step.fit(state, [batch], 5, progress=False)
    path = step.save(tmp_path / "train.mlpackage")
    assert os.path.isdir(path)
    meta = json.loads(step.last_compiled.spec.description.metadata.userDefined["rlxjax.train"])
    roles = {r["role"] for r in meta["inputs"]} | {r["role"] for r in meta["outputs"]}
    assert roles == {"param", "opt_state", "batch", "loss", "new_param", "new_opt_state"}
    feeds = {r["feeds"] for r in meta["outputs"] if "feeds" in r}
    assert feeds == {r["feature"] for r in meta["inputs"] if r["role"] in ("param", "opt_state")}

    ckpt = state.save(tmp_path / "state.npz")
    resumed = rlxjax.TrainState.load(ckpt, like=state)
    a, la = step(state, *batch)
    b, lb = step(resumed, *batch)
    assert resumed.step == 5 and float(la) == float(lb)  # resuming continues exactly
    for x, y in zip(jax.tree_util.tree_leaves(a.params), jax.tree_util.tree_leaves(b.params)):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(rlxjax.ArgumentError, match="another model"):
        rlxjax.TrainState.load(ckpt, like=step.init({"w": np.zeros(3, np.float32)}))


def test_has_aux_and_errors():
    loss, params, batch = WORKLOADS["mlp_layernorm"]

    def with_aux(p, x, y):
        l = loss(p, x, y)
        return l, {"double": 2 * l}

    step = rlxjax.coreml_train_step(with_aux, optax.sgd(0.1), has_aux=True, backend="reference")
    state, l, aux = step(step.init(params), *batch)
    np.testing.assert_allclose(aux["double"], 2 * l, rtol=1e-6)
    with pytest.raises(rlxjax.ArgumentError, match="'io' .* or 'mlstate'"):
        rlxjax.coreml_train_step(loss, optax.sgd(0.1), state="device")
    with pytest.raises(rlxjax.ArgumentError, match="has_aux"):
        rlxjax.coreml_train_step(with_aux, optax.sgd(0.1))(step.init(params), *batch)


def test_export_inference_bakes_trained_params(tmp_path):
    from models import MLP

    loss, params, (x, y) = WORKLOADS["mlp_layernorm"]
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), backend="reference")
    state, _ = step.fit(step.init(params), [(x, y)], 10, progress=False)
    trained = step.params(state)
    model = MLP()
    compiled = rlxjax.export_inference(model.apply, trained, x, path=tmp_path / "mlp.mlpackage",
                                       backend="reference")
    compiled.validate()
    assert [s.name for s in compiled.input_specs] == ["inputs.0"]  # weights are constants
    np.testing.assert_allclose(compiled(x), np.asarray(model.apply(trained, x)),
                               rtol=1e-5, atol=1e-5)
    assert os.path.isdir(tmp_path / "mlp.mlpackage")


def test_features_are_named_after_the_loss_and_function_parameters(tmp_path):
    def loss(params, images, labels):
        return ((images @ params["w"] - labels) ** 2).mean()

    params = {"w": np.zeros((3, 2), np.float32)}
    images, labels = np.ones((4, 3), np.float32), np.ones((4, 2), np.float32)
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1))
    step.init(params, images, labels)
    names = [f.name for f in step.last_compiled.spec.description.input]
    assert names[-2:] == ["images", "labels"] and "params_w" in names

    def predict(params, images):
        return images @ params["w"]

    exported = rlxjax.export_inference(predict, params, images)
    assert [f.name for f in exported.spec.description.input] == ["images"]


@pytest.mark.parametrize("mode", ["io", "mlstate"])
def test_roles_come_from_the_program_layout_not_from_names(mode):
    """A batch argument named like an output ('out') or a parameter ('params') is a batch
    feature; each new value feeds the input it replaces (roles were once re-parsed from
    feature names, which called such an input a loss)."""
    def loss(p, out, params):
        return ((out @ p["w"] - params) ** 2).mean(), {"out": out.sum()}

    p = {"w": np.zeros((3, 2), np.float32)}
    batch = (np.ones((4, 3), np.float32), np.ones((4, 2), np.float32))
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), state=mode, has_aux=True,
                                    backend="reference")
    step.init(p, *batch)
    meta = json.loads(step.last_compiled.spec.description.metadata.userDefined["rlxjax.train"])
    batch_rows = [r for r in meta["inputs"] if r["role"] == "batch"]
    assert [r["feature"] for r in batch_rows][-2:] == ["out", "params"]
    assert [r["role"] for r in meta["outputs"]][:2] == ["loss", "aux"]
    if mode == "io":
        ins = {r["feature"]: r for r in meta["inputs"]}
        for r in meta["outputs"][2:]:
            fed = ins[r["feeds"]]
            assert r["role"] == "new_" + fed["role"] and r["shape"] == fed["shape"]


def test_params_with_none_nodes_as_eqx_partition_makes_them():
    """eqx.partition leaves None where a field is no array: None nodes are no leaves, in
    the gradient's and the training step's result trees as in the arguments."""
    params = {"w": np.full((3, 2), 0.5, np.float32), "act": None,
              "b": (np.zeros(2, np.float32), None)}
    x = np.arange(12, dtype=np.float32).reshape(4, 3) / 12

    def loss(p, x):
        return (x @ p["w"] + p["b"][0]).sum() ** 2 / 100

    got = rlxjax.coreml_value_and_grad(loss, backend="reference")(params, x)
    want = jax.value_and_grad(loss)(params, x)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want)
    np.testing.assert_allclose(got[1]["w"], want[1]["w"], rtol=1e-5)
    opt = optax.sgd(0.1)
    step = rlxjax.coreml_train_step(loss, opt, backend="reference")
    state, _ = step(step.init(params), x)
    want_p = optax.apply_updates(params, opt.update(want[1], opt.init(params), params)[0])
    assert jax.tree_util.tree_structure(step.params(state)) == \
        jax.tree_util.tree_structure(want_p)
    np.testing.assert_allclose(step.params(state)["w"], want_p["w"], rtol=1e-5)
