"""step.save(path, predict=(fn, *inputs)): one multifunction package that trains and predicts.

Checked: the package passes coremltools' loaders (MLModel with skip_model_load, the milproto
frontend) and describes its functions as coremltools' own ``save_multifunction`` does;
training through the loaded package's ``train_step`` on the reference backend follows JAX +
optax, and ``predict`` with the same state equals JAX's ``fn`` on the trained parameters;
a weight both functions use is stored once; ``rlxjax inspect`` shows both functions."""
from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stdout

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from coremltools.proto import MIL_pb2, Model_pb2

import rlxjax
from rlxjax.coreml.ct_private import load_milproto
from rlxjax.coreml.multifunction import check_no_output_aliases_state_write
from rlxjax.errors import RlxError, TargetError
from rlxjax.states.mlstate import decode_f32_np
from helpers import jax_loop

STEPS = 4
RNG = np.random.default_rng(0)
TABLE = RNG.standard_normal((3, 7)).astype(np.float32)  # closed over by both functions
PARAMS = {"w": RNG.standard_normal((4, 3)).astype(np.float32) * 0.5,
          "b": np.zeros(3, np.float32)}
X = RNG.standard_normal((5, 4)).astype(np.float32)
Y = RNG.standard_normal((5, 7)).astype(np.float32)
XQ = RNG.standard_normal((2, 4)).astype(np.float32)


def predict(p, x):
    return jnp.tanh(x @ p["w"] + p["b"]) @ TABLE


def loss(p, x, y):
    return jnp.mean((predict(p, x) - y) ** 2)


def _spec(path):
    m = Model_pb2.Model()
    with open(os.path.join(path, "Data", "com.apple.CoreML", "model.mlmodel"), "rb") as f:
        m.ParseFromString(f.read())
    return m


def _weights(path):
    return os.path.join(path, "Data", "com.apple.CoreML", "weights")


@pytest.fixture(scope="module", params=["mlstate", "io"])
def package(request, tmp_path_factory):
    mode = request.param
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), state=mode, target="iOS18")
    st = step.init(PARAMS, X, Y)
    out = tmp_path_factory.mktemp(mode)
    path = step.save(out / "model.mlpackage", predict=(predict, XQ))
    return mode, step, st, path, out


def test_package_is_a_multifunction_program_coremltools_loads(package):
    import coremltools as ct

    mode, step, _, path, _ = package
    spec = _spec(path)
    assert spec.specificationVersion >= 9
    assert spec.description.defaultFunctionName == "train_step"
    assert [f.name for f in spec.description.functions] == ["train_step", "predict"]
    assert set(spec.mlProgram.functions) == {"train_step", "predict"}
    assert not spec.description.input and not spec.description.output
    fns = {f.name: f for f in spec.description.functions}
    if mode == "mlstate":  # the same states, and predict never writes them
        assert fns["predict"].state == fns["train_step"].state and fns["predict"].state
        ops = spec.mlProgram.functions["predict"]
        assert not [o for o in ops.block_specializations[ops.opset].operations
                    if o.type == "write_state"]
    else:  # predict takes the params under the train step's feature names
        train_in = [f.name for f in fns["train_step"].input]
        assert [f.name for f in fns["predict"].input][:2] == train_in[:2] == \
            ["params_b", "params_w"]
    ct.models.MLModel(path, skip_model_load=True)  # coremltools' own model loader
    prog = load_milproto(spec, _weights(path))      # its MIL frontend, every function
    assert set(prog.functions) == {"train_step", "predict"}
    meta = json.loads(spec.description.metadata.userDefined["rlxjax.functions"])
    rows = {r["name"]: r["metadata"] for r in meta["functions"]}
    assert meta["default"] == "train_step"
    assert rows["train_step"]["rlxjax.train"]["state"] == mode
    assert rows["predict"]["rlxjax.predict"]["state"] == mode
    for name in ("train_step", "predict"):
        io_ = rows[name]["rlxjax.io"]
        assert [r["mil_name"] for r in io_["inputs"]] == [f.name for f in fns[name].input]
        assert [r["mil_name"] for r in io_["outputs"]] == [f.name for f in fns[name].output]
        assert [r["mil_name"] for r in io_.get("states", [])] == \
            [f.name for f in fns[name].state]


def test_descriptions_match_coremltools_save_multifunction(package):
    """coremltools builds the same function descriptions from the two programs saved
    separately (its own multifunction writer)."""
    import coremltools as ct

    mode, step, st, path, out = package
    single = {"train_step": step.save(out / "train_only.mlpackage")}
    from rlxjax.training.multifunction import compile_predict

    single["predict"] = compile_predict(step, step._latest, predict, [XQ]).save(
        out / "predict_only.mlpackage")
    desc = ct.utils.MultiFunctionDescriptor()
    for name, p in single.items():
        desc.add_function(p, src_function_name="main", target_function_name=name)
    desc.default_function_name = "train_step"
    ct.utils.save_multifunction(desc, str(out / "ct.mlpackage"))
    theirs = _spec(out / "ct.mlpackage").description
    ours = _spec(path).description
    assert theirs.defaultFunctionName == ours.defaultFunctionName
    key = lambda fs: sorted((f.name, [i.SerializeToString() for i in f.input],  # noqa: E731
                             [o.name for o in f.output], [s.SerializeToString() for s in f.state])
                            for f in fs)
    assert key(theirs.functions) == key(ours.functions)


def test_shared_weight_is_stored_once(package):
    _, step, _, path, out = package
    blob = open(os.path.join(_weights(path), "weight.bin"), "rb").read()
    table = TABLE.tobytes()
    assert blob.count(table) == 1
    spec = _spec(path)  # ... and both functions read it (the same file offset)
    offsets = {}
    for name, fn in spec.mlProgram.functions.items():
        for op in fn.block_specializations[fn.opset].operations:
            v = op.attributes.get("val")
            if op.type == "const" and v is not None and v.WhichOneof("value") == \
                    "blobFileValue" and list(v.type.tensorType.dimensions) and \
                    [d.constant.size for d in v.type.tensorType.dimensions] == [3, 7]:
                offsets.setdefault(name, set()).add(v.blobFileValue.offset)
    assert offsets["train_step"] & offsets["predict"]


def test_train_then_predict_with_one_state(package):
    mode, step, st, path, out = package
    batches = [(X, Y)] * STEPS
    want_params, want_losses = jax_loop(loss, optax.adam(1e-2), PARAMS, (X, Y), STEPS)
    m = rlxjax.load(path, flat=True)
    assert m.functions == ("train_step", "predict") and m.function_name == "train_step"
    if mode == "mlstate":
        folder = step.export_state(st, out / "init_state")     # what an app ships
        state = m.make_state()
        for row in json.load(open(os.path.join(folder, "state.json")))["states"]:
            raw = np.fromfile(os.path.join(folder, row["name"] + ".f16"), "<f2")
            state.write_state(row["name"], raw)
        losses = [float(m(x, y, state=state)["out"]) for x, y in batches]
        pred = m.function("predict")(XQ, state=state)
        again = rlxjax.load(path, function="predict", flat=True)
        assert again.function_name == "predict" and again.state_names == m.state_names
        # the params as the states hold them (the codec is exact): what predict must use
        pieces = {n: state.read_state(n) for n in m.state_names}
        flat = decode_f32_np(pieces["state_f32_exp"], pieces["state_f32_hi"],
                             pieces["state_f32_lo"])
        rows = json.loads(_spec(path).description.metadata.userDefined[
            "rlxjax.functions"])["functions"][1]["metadata"]["rlxjax.predict"]["tensors"]
        trained = {r["name"].split(".")[1]: flat[r["offset"]:r["offset"] + r["size"]]
                   .reshape(r["shape"]) for r in rows}
    else:
        feeds = {f"params_{k}": v for k, v in PARAMS.items()}
        s = optax.adam(1e-2).init(PARAMS)
        train_in = [f.name for f in m.spec.description.input]
        for leaf_path, v in jax.tree_util.tree_flatten_with_path(s)[0]:
            name = "opt_state_" + "_".join(str(getattr(k, "key", getattr(k, "idx", getattr(
                k, "name", k)))) for k in leaf_path)
            assert name in train_in
            feeds[name] = np.asarray(v)
        losses = []
        for x, y in batches:
            res = m(x=x, y=y, **feeds)
            losses.append(float(res["out"]))
            feeds = {k: res["new_" + k] for k in feeds}
        trained = {k[len("params_"):]: v for k, v in feeds.items() if k.startswith("params_")}
        pred = m.run("predict", x=XQ, **{k: v for k, v in feeds.items()
                                       if k.startswith("params_")})
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4, atol=1e-6)
    for k in PARAMS:
        np.testing.assert_allclose(trained[k], want_params[k], rtol=1e-4, atol=1e-6)
    # predict computes JAX's fn on exactly the trained params
    np.testing.assert_allclose(pred["out"], np.asarray(predict(trained, XQ)), rtol=1e-5,
                               atol=1e-6)


def test_inspect_shows_both_functions(package):
    from rlxjax.cli import main

    _, _, _, path, _ = package
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["inspect", str(path)]) == 0
    text = buf.getvalue()
    assert "functions (2): train_step (default), predict" in text
    assert "function 'train_step':" in text and "function 'predict':" in text


def test_errors():
    step = rlxjax.coreml_train_step(loss, optax.sgd(1e-2))   # io, default target iOS17
    step.init(PARAMS, X, Y)
    with pytest.raises(TargetError, match="iOS18"):
        step.save("/nonexistent/x.mlpackage", predict=(predict, XQ))
    step18 = rlxjax.coreml_train_step(loss, optax.sgd(1e-2), target="iOS18")
    step18.init(PARAMS, X, Y)
    with pytest.raises(rlxjax.errors.ArgumentError, match="predict=\\(fn"):
        step18.save("/nonexistent/x.mlpackage", predict=predict)


def test_function_argument_errors(package, tmp_path):
    _, step, _, path, _ = package
    with pytest.raises(rlxjax.errors.ArgumentError, match="none of them"):
        rlxjax.load(path, function="nope", flat=True)
    single = step.save(tmp_path / "single.mlpackage")
    with pytest.raises(rlxjax.errors.ArgumentError, match="single-function"):
        rlxjax.load(single, function="predict", flat=True)
    assert rlxjax.load(single, function="main", flat=True).functions == ("main",)


def test_state_sharing_is_per_load_and_fast_backend_agrees(package):
    import coremltools as ct

    mode, _, _, path, _ = package
    if mode != "mlstate":
        pytest.skip("an io package has no states")
    ct.models.MLModel(path, skip_model_load=True, function_name="predict")
    rng = np.random.default_rng(3)
    outs = []
    for backend in ("reference", "reference-fast"):
        m = rlxjax.load(path, backend=backend, flat=True)
        st = m.make_state()
        for n in m.state_names:  # any exact encoding of some weights
            st.write_state(n, np.round(rng.uniform(-50, 50, st.read_state(n).shape))
                           .astype(np.float16) if "f32_exp" not in n else
                           np.full(st.read_state(n).shape, 190, np.float16))
        rng = np.random.default_rng(3)
        outs.append((m(x=X, y=Y, state=st)["out"], m.run("predict", x=XQ, state=st)["out"]))
        other = rlxjax.load(path, backend=backend, flat=True)
        with pytest.raises(rlxjax.errors.ArgumentError, match="another loaded package"):
            other.function("predict")(x=XQ, state=st)
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)


def test_output_aliasing_a_state_write_is_refused():
    """apple/coremltools#2713: Core ML crashes loading a program whose output is the
    value a write_state stores."""
    block = MIL_pb2.Block(outputs=["v"])
    op = block.operations.add(type="write_state")
    op.inputs["input"].arguments.add(name="s")
    op.inputs["data"].arguments.add(name="v")
    with pytest.raises(RlxError, match="2713"):
        check_no_output_aliases_state_write("f", block)
    block.outputs[:] = ["w"]
    check_no_output_aliases_state_write("f", block)


@pytest.mark.parametrize("mode", ["mlstate", "io"])
def test_trainable_step_predicts_with_its_frozen_compressed_base(mode, tmp_path):
    """A trainable= step on an int8 base: predict bakes the same (compressed) frozen weights,
    stored once, and computes JAX's fn on the trained head over the dequantised base."""
    rng = np.random.default_rng(1)
    params = {"body": {"w": rng.standard_normal((4, 32)).astype(np.float32) * 0.5},
              "head": {"w": rng.standard_normal((32, 7)).astype(np.float32) * 0.2,
                       "b": np.zeros(7, np.float32)}}

    def fn(p, x):
        return jnp.tanh(x @ p["body"]["w"]) @ p["head"]["w"] + p["head"]["b"]

    def loss2(p, x, y):
        return jnp.mean((fn(p, x) - y) ** 2)

    step = rlxjax.coreml_train_step(loss2, optax.adam(1e-2), state=mode, target="iOS18",
                                    trainable={"body": False, "head": True}, compress="int8")
    st = step.init(params, X, Y)
    for _ in range(3):
        st, _ = step(st, X, Y)
    path = step.save(tmp_path / "m.mlpackage", predict=(fn, XQ))
    want = np.asarray(fn(step.params(st), XQ))
    m = rlxjax.load(path, function="predict", flat=True)
    if mode == "mlstate":
        folder = step.export_state(st, tmp_path / "state")
        state = m.make_state()
        for row in json.load(open(os.path.join(folder, "state.json")))["states"]:
            state.write_state(row["name"], np.fromfile(os.path.join(folder, row["name"] + ".f16"),
                                                       "<f2"))
        got = m(XQ, state=state)["out"]
    else:
        head = {f"params_head_{k}": np.asarray(v) for k, v in st.params["head"].items()}
        assert {f.name for f in m.spec.description.input} == set(head) | {"x"}
        got = m(x=XQ, **head)["out"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # the int8 body is one constexpr payload both functions read at the same offset
    spec = _spec(path)
    offsets = {}
    for name, f in spec.mlProgram.functions.items():
        for op in f.block_specializations[f.opset].operations:
            if op.type.startswith("constexpr_"):
                for arg in op.inputs.values():
                    for b in arg.arguments:
                        if b.WhichOneof("binding") == "value" and \
                                b.value.WhichOneof("value") == "blobFileValue":
                            offsets.setdefault(name, set()).add(b.value.blobFileValue.offset)
    assert offsets["train_step"] and offsets["train_step"] == offsets["predict"]
