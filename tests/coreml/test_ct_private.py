"""What rlxjax relies on from coremltools' private API (rlxjax/coreml/ct_private.py), one
test per use. A coremltools upgrade that changes one of these fails here first, naming it;
fix ct_private.py (and only it) to match."""
from __future__ import annotations

import os

import numpy as np
import pytest
from coremltools.models.utils import load_spec
from coremltools.proto import FeatureTypes_pb2, MIL_pb2, Model_pb2

from rlxjax.coreml import ct_private

# The 64-byte blob header the reference backend checks before reading (coreml/interpreter/
# values.py): sentinel, MIL dtype, payload size, payload offset.
HEADER = np.dtype([("sentinel", "<u4"), ("mil_dtype", "<u4"), ("size", "<u8"),
                   ("data_offset", "<u8")])
ARRAYS = {
    "float": np.linspace(-1, 1, 12, dtype=np.float32),
    "fp16": np.linspace(-1, 1, 12, dtype=np.float16).view(np.uint16),
    "int32": np.arange(-5, 7, dtype=np.int32),
    "int8": np.arange(-5, 7, dtype=np.int8),
    "uint8": np.arange(12, dtype=np.uint8),
}


def test_blob_writer_and_reader_round_trip_with_64_byte_headers(tmp_path):
    path = str(tmp_path / "weight.bin")
    w = ct_private.blob_writer(path)
    offsets = {k: getattr(w, f"write_{k}_data")(a) for k, a in ARRAYS.items()}
    del w  # the writer completes the file when dropped
    data = open(path, "rb").read()
    assert len(set(offsets.values())) == len(offsets)
    for kind, arr in ARRAYS.items():
        off = offsets[kind]
        assert off % 64 == 0 and off >= 64, off  # a file header comes first
        meta = np.frombuffer(data[off:off + HEADER.itemsize], HEADER)[0]
        assert int(meta["sentinel"]) == 0xDEADBEEF
        assert int(meta["size"]) == arr.nbytes and int(meta["data_offset"]) % 64 == 0
        start = int(meta["data_offset"])
        assert data[start:start + arr.nbytes] == arr.tobytes()
    r = ct_private.blob_reader(path)
    for kind, arr in ARRAYS.items():
        got = np.asarray(getattr(r, f"read_{kind}_data")(offsets[kind]))
        np.testing.assert_array_equal(got, arr)
        assert got.dtype == arr.dtype


def test_blob_reader_class_is_looked_up_per_call(monkeypatch, tmp_path):
    """tests/api/test_load_and_malformed.py stands in for the reader this way."""
    import coremltools.libmilstoragepython as storage

    monkeypatch.setattr(storage, "_BlobStorageReader", lambda path: ("spy", path))
    assert ct_private.blob_reader("x") == ("spy", "x")


def test_tensor_value_type():
    vt = ct_private.tensor_value_type((2, 3), MIL_pb2.FLOAT16)
    assert isinstance(vt, MIL_pb2.ValueType) and vt.WhichOneof("type") == "tensorType"
    t = vt.tensorType
    assert t.dataType == MIL_pb2.FLOAT16 and t.rank == 2
    assert [d.constant.size for d in t.dimensions] == [2, 3]
    assert ct_private.tensor_value_type((), MIL_pb2.INT32).tensorType.rank == 0


@pytest.mark.parametrize("value,dtype,field", [
    (np.float32(1.5), MIL_pb2.FLOAT32, "floats"), (np.float16(2), MIL_pb2.FLOAT16, "bytes"),
    (np.int32(-3), MIL_pb2.INT32, "ints"), (np.bool_(True), MIL_pb2.BOOL, "bools"),
    (np.int8(-1), MIL_pb2.INT8, "bytes"), (np.uint8(7), MIL_pb2.UINT8, "bytes"),
    ("a_name", MIL_pb2.STRING, "strings"), (np.str_("fp32"), MIL_pb2.STRING, "strings"),
])
def test_scalar_value_is_rank_0_with_its_dtype(value, dtype, field):
    v = ct_private.scalar_value(value)
    assert v.type.tensorType.dataType == dtype and v.type.tensorType.rank == 0
    assert not v.type.tensorType.dimensions
    tensor = v.immediateValue.tensor
    assert tensor.WhichOneof("value") == field
    if field == "bytes":
        assert tensor.bytes.values == np.asarray(value).tobytes()
    else:
        assert list(getattr(tensor, field).values) == [value]


@pytest.mark.parametrize("text", ["add_0", "", "x" * 300, "caf\u00e9_\u03c0"])
def test_set_string_value_gives_what_scalar_value_gives(text):
    """Every op's name attribute is written with it (coreml/builder.py)."""
    dst = MIL_pb2.Value()
    dst.immediateValue.tensor.floats.values.append(1.0)  # overwritten, not merged
    ct_private.set_string_value(dst, text)
    assert dst == ct_private.scalar_value(text)
    assert dst.SerializeToString() == ct_private.scalar_value(text).SerializeToString()


@pytest.mark.parametrize("arr,dtype,field", [
    (np.arange(6, dtype=np.float32).reshape(2, 3), MIL_pb2.FLOAT32, "floats"),
    (np.arange(6, dtype=np.float16), MIL_pb2.FLOAT16, "bytes"),
    (np.arange(6, dtype=np.int32), MIL_pb2.INT32, "ints"),
    (np.array([True, False]), MIL_pb2.BOOL, "bools"),
    (np.arange(6, dtype=np.int8), MIL_pb2.INT8, "bytes"),
    (np.arange(6, dtype=np.uint8), MIL_pb2.UINT8, "bytes"),
])
def test_tensor_value_holds_the_array(arr, dtype, field):
    v = ct_private.tensor_value(arr)
    t = v.type.tensorType
    assert t.dataType == dtype and [d.constant.size for d in t.dimensions] == list(arr.shape)
    tensor = v.immediateValue.tensor
    assert tensor.WhichOneof("value") == field
    if field == "bytes":
        assert tensor.bytes.values == arr.tobytes()
    else:
        assert list(getattr(tensor, field).values) == arr.reshape(-1).tolist()


@pytest.mark.parametrize("arr", [
    np.random.default_rng(0).standard_normal((3, 5, 7)).astype(np.float32),
    np.array([np.inf, -np.inf, np.nan, -0.0, 1e-45, 3.4e38], np.float32),
    np.arange(-40, 40, dtype=np.int32).reshape(8, 10),
    np.array([np.iinfo(np.int32).min, np.iinfo(np.int32).max, 0], np.int32),
    np.tril(np.ones((16, 16), bool)),
    np.array([True, False, True]),
    np.arange(6, dtype=np.float16), np.arange(6, dtype=np.int8), np.ones((1, 1), np.float32),
    np.zeros((0, 3), np.float32),
])
def test_tensor_value_gives_what_coremltools_gives(arr):
    """tensor_value fills the values without coremltools' per-element loop: the message
    must be the one coremltools' create_tensor_value makes, byte for byte."""
    from coremltools.converters.mil.backend.mil import helper

    want = helper.create_tensor_value(arr)
    got = ct_private.tensor_value(arr)
    assert got.SerializeToString(deterministic=True) == \
        want.SerializeToString(deterministic=True)


def test_tensor_value_converts_no_element_by_element(monkeypatch):
    """A large bool / int32 / fp32 constant is not converted one Python call per element
    (coremltools' np_val_to_py_type, which made a third of a compile)."""
    from coremltools.converters.mil.mil.types import type_mapping

    calls = []
    real = type_mapping.np_val_to_py_type
    monkeypatch.setattr(type_mapping, "np_val_to_py_type",
                        lambda v: calls.append(1) or real(v))
    for arr in (np.tril(np.ones((64, 64), bool)), np.arange(4096, dtype=np.int32),
                np.ones(4096, np.float32)):
        calls.clear()
        ct_private.tensor_value(arr)
        assert len(calls) <= 1


def test_blob_file_value():
    v = ct_private.blob_file_value("@model_path/weights/weight.bin", 128, (4, 5),
                                   MIL_pb2.FLOAT32)
    assert v.WhichOneof("value") == "blobFileValue"
    assert v.blobFileValue.fileName == "@model_path/weights/weight.bin"
    assert v.blobFileValue.offset == 128
    assert [d.constant.size for d in v.type.tensorType.dimensions] == [4, 5]
    assert v.type.tensorType.dataType == MIL_pb2.FLOAT32


def _program(op_type="exp", out_shape=(3,), spec_version=8, opset="CoreML7"):
    """y = op_type(x) for an fp32 [3] x, as a Model with its description."""
    m = Model_pb2.Model(specificationVersion=spec_version)
    for where, name in ((m.description.input, "x"), (m.description.output, "y")):
        f = where.add(name=name)
        f.type.multiArrayType.shape.extend([3])
        f.type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.FLOAT32
    fn = m.mlProgram.functions["main"]
    m.mlProgram.version = 1
    fn.opset = opset
    fn.inputs.add(name="x", type=ct_private.tensor_value_type((3,), MIL_pb2.FLOAT32))
    blk = fn.block_specializations[opset]
    op = blk.operations.add(type=op_type)
    op.inputs["x"].arguments.add(name="x")
    op.outputs.add(name="y", type=ct_private.tensor_value_type(out_shape, MIL_pb2.FLOAT32))
    op.attributes["name"].CopyFrom(ct_private.scalar_value("y"))
    blk.outputs.append("y")
    return m


def test_load_milproto_gives_a_program_with_typed_outputs(tmp_path):
    prog = ct_private.load_milproto(_program(), str(tmp_path))
    fn = prog.functions["main"]
    (y,) = fn.outputs
    assert y.name == "y" and tuple(int(d) for d in y.shape) == (3,)
    assert y.dtype == ct_private.PYMIL_DTYPES["fp32"] and y.dtype.__name__ == "fp32"
    assert set(fn.inputs) == {"x"}
    assert len(set(ct_private.PYMIL_DTYPES.values())) == len(ct_private.PYMIL_DTYPES)  # distinct


def test_load_milproto_rejects_and_the_traceback_names_the_op(tmp_path):
    with pytest.raises(Exception) as info:  # an op coremltools does not know
        ct_private.load_milproto(_program("no_such_op"), str(tmp_path))
    assert ct_private.failing_milproto_op(info.value) == " at op no_such_op -> y"
    assert ct_private.failing_milproto_op(ValueError("elsewhere")) == ""


def test_create_mlpackage_lays_out_model_and_weights(tmp_path):
    weights = tmp_path / "w"
    weights.mkdir()
    (weights / "weight.bin").write_bytes(b"\0" * 64)
    model = _program()
    path = ct_private.create_mlpackage(model, str(weights), str(tmp_path / "m.mlpackage"))
    assert os.path.isfile(os.path.join(path, "Manifest.json"))
    assert (open(os.path.join(path, "Data", "com.apple.CoreML", "weights", "weight.bin"),
                 "rb").read() == b"\0" * 64)
    assert load_spec(path) == model
    bare = ct_private.create_mlpackage(model, None, str(tmp_path / "n.mlpackage"))
    assert load_spec(bare) == model


# -- Core ML's bit packing of palettised weights (rules/constexpr.py) ---------------------


def test_pack_bits_is_lsb_first():
    packed = ct_private.pack_bits(np.array([1, 2, 3, 0, 3], np.uint8), 2)
    assert packed.dtype == np.uint8
    np.testing.assert_array_equal(packed, [0b00111001, 0b00000011])
