"""ReferenceProgram on whole programs converted by coremltools (no macOS needed:
skip_model_load=True), plus its error messages."""
from __future__ import annotations

import copy
import logging

import numpy as np
import pytest
import coremltools as ct
from coremltools.converters.mil import Builder as mb

from rlxjax.coreml.interpreter import ReferenceProgram, ReferenceRuntimeError

logging.getLogger("coremltools").setLevel(logging.ERROR)

W = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)  # >= 10 elements: goes to a blob
B = np.arange(4, dtype=np.float32) / 10
IDX = np.array([2, 0], dtype=np.int32)


def _body(x, i):
    h = mb.relu(x=mb.add(x=mb.matmul(x=x, y=W), y=B))  # (2, 4)
    s = mb.softmax(x=h, axis=-1)
    parts = mb.split(x=h, num_splits=2, axis=1)  # two (2, 2)
    cat = mb.concat(values=[parts[1], parts[0], x], axis=1)  # (2, 7)
    red = mb.reduce_sum(x=cat, axes=[1], keep_dims=False)
    g = mb.gather(x=x, indices=i, axis=1)  # (2, 2), indices from an input
    sl = mb.slice_by_index(x=x, begin=[0, 1], end=[2, 3], squeeze_mask=[False, False])
    return s, red, g, mb.gelu(x=sl, mode="TANH_APPROXIMATION")


def _build():
    # A fresh Program per conversion: ct.convert rewrites the Program it is given in place.
    specs = [mb.TensorSpec(shape=(2, 3)),
             mb.TensorSpec(shape=(2,), dtype=ct.converters.mil.mil.types.int32)]
    return mb.program(input_specs=specs, opset_version=ct.target.iOS17)(_body)


def _numpy_ref(x, i):
    h = np.maximum(x @ W + B, 0)
    e = np.exp(h - h.max(-1, keepdims=True))
    cat = np.concatenate([h[:, 2:], h[:, :2], x], axis=1)
    sl = x[:, 1:3]
    gelu = 0.5 * sl * (1 + np.tanh(np.sqrt(2 / np.pi) * (sl + 0.044715 * sl ** 3)))
    return [e / e.sum(-1, keepdims=True), cat.sum(1), x[:, i], gelu]


def _convert(precision):
    model = ct.convert(_build(), convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17,
                       compute_precision=precision, skip_model_load=True)
    assert hasattr(model, "get_spec") and hasattr(model, "weights_dir")
    return model.get_spec(), model.weights_dir


@pytest.fixture(scope="module")
def fp32_model():
    return _convert(ct.precision.FLOAT32)


@pytest.fixture(scope="module")
def fp16_model():
    return _convert(ct.precision.FLOAT16)


def _feeds(seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((2, 3)).astype(np.float32), "i": IDX.copy()}


def _uses_blob(spec):
    block = spec.mlProgram.functions["main"].block_specializations.values()
    return any(op.type == "const" and op.attributes["val"].WhichOneof("value") == "blobFileValue"
               for b in block for op in b.operations)


@pytest.mark.parametrize("which", ["fp32", "fp16"])
def test_program_matches_numpy(which, fp32_model, fp16_model):
    spec, weights_dir = fp32_model if which == "fp32" else fp16_model
    assert _uses_blob(spec)
    prog = ReferenceProgram(spec, weights_dir)
    feeds = _feeds()
    out = prog.run(feeds)
    assert list(out) == [o.name for o in spec.description.output]
    # fp16: the program casts to fp16 internally (compute_precision), so fp16 tolerances.
    tol = dict(rtol=1e-6, atol=1e-6) if which == "fp32" else dict(rtol=1e-2, atol=1e-2)
    for got, want in zip(out.values(), _numpy_ref(feeds["x"], feeds["i"])):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, **tol)


def test_fp16_program_really_runs_in_fp16(fp16_model):
    spec, weights_dir = fp16_model
    ops = spec.mlProgram.functions["main"].block_specializations["CoreML7"].operations
    assert any(op.type == "cast" for op in ops)
    prog = ReferenceProgram(spec, weights_dir)
    feeds = _feeds(1)
    got = prog.run(feeds)
    # Every output is an fp32 cast of an fp16 value: exactly representable in fp16.
    for v in got.values():
        np.testing.assert_array_equal(v, v.astype(np.float16).astype(np.float32))


def test_outputs_do_not_alias_state(fp32_model):
    prog = ReferenceProgram(*fp32_model)
    feeds = _feeds()
    first = prog.run(feeds)
    for v in first.values():
        v[...] = 123
    second = prog.run(feeds)
    for a in second.values():
        assert not np.any(a == 123)


def test_immediate_value_binding(fp32_model):
    """Inputs bound directly to values (Argument.Binding.value), not to a const op's name."""
    spec = copy.deepcopy(fp32_model[0])
    block = spec.mlProgram.functions["main"].block_specializations["CoreML7"]
    consts = {op.outputs[0].name: op for op in block.operations if op.type == "const"}
    replaced = 0
    for op in block.operations:
        for arg in op.inputs.values():
            for b in arg.arguments:
                c = consts.get(b.name) if b.WhichOneof("binding") == "name" else None
                if c is not None and c.attributes["val"].WhichOneof("value") == "immediateValue":
                    b.value.CopyFrom(c.attributes["val"])
                    replaced += 1
    assert replaced > 5
    feeds = _feeds()
    got = ReferenceProgram(spec, fp32_model[1]).run(feeds)
    want = ReferenceProgram(*fp32_model).run(feeds)
    for a, b in zip(got.values(), want.values()):
        np.testing.assert_array_equal(a, b)


# --- errors ------------------------------------------------------------------------------------

def test_unknown_op_type(fp32_model):
    spec = copy.deepcopy(fp32_model[0])
    block = spec.mlProgram.functions["main"].block_specializations["CoreML7"]
    op = next(op for op in block.operations if op.type == "softmax")
    op.type = "frobnicate"
    with pytest.raises(ReferenceRuntimeError, match="frobnicate") as e:
        ReferenceProgram(spec, fp32_model[1])
    assert op.outputs[0].name in str(e.value)


def test_missing_weights_dir(fp32_model):
    with pytest.raises(ReferenceRuntimeError, match="weights_dir"):
        ReferenceProgram(fp32_model[0], None)


def test_unknown_function(fp32_model):
    with pytest.raises(ReferenceRuntimeError, match="nope"):
        ReferenceProgram(*fp32_model, function="nope")


@pytest.mark.parametrize("feeds,match", [
    ({"i": IDX}, "missing input 'x'"),
    ({"x": np.zeros((2, 3), np.float32), "i": IDX, "extra": IDX}, "unknown input name"),
    ({"x": np.zeros((3, 2), np.float32), "i": IDX}, r"input 'x' has shape \(3, 2\)"),
    ({"x": np.zeros((2, 3), np.float64), "i": IDX}, "input 'x' has dtype float64"),
    ({"x": np.zeros((2, 3), np.float32), "i": IDX.astype(np.int64)}, "input 'i' has dtype"),
])
def test_bad_feeds(feeds, match, fp32_model):
    with pytest.raises(ReferenceRuntimeError, match=match):
        ReferenceProgram(*fp32_model).run(feeds)


def test_runtime_error_names_op(fp32_model):
    prog = ReferenceProgram(*fp32_model)
    feeds = {"x": np.zeros((2, 3), np.float32), "i": np.array([0, 7], np.int32)}
    with pytest.raises(ReferenceRuntimeError, match=r"op 'gather' \(output '.*'\)"):
        prog.run(feeds)
