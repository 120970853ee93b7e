"""Every use of coremltools' private API by the Core ML format, in one place.

rlxjax writes and reads ML Programs with coremltools' generated protobuf classes
(``coremltools.proto``, public) and a few pieces coremltools does not document as public:
the blob-storage writer and reader of the weight file, the value helpers its MIL backend
serialises with, its milproto loader (our structural validator) and pymil's dtypes, the
function that lays out an ``.mlpackage`` and the bit packing of palettised weights. Nothing
else in rlxjax imports them (but rlxjax/compression/ct_optimize.py, coremltools.optimize's
quantisers, which both formats use): each use is a small function here, and
``tests/coreml/test_ct_private.py`` pins the behaviour rlxjax relies on, one test per
function, so a coremltools upgrade that changes one fails there first and says which.
"""
from __future__ import annotations

from .. import coremltools_quiet  # noqa: F401  (first: coremltools without its notices)
import coremltools.libmilstoragepython as _storage
import numpy as np
from coremltools.converters.mil.backend.mil import helper as _helper
from coremltools.converters.mil.frontend.milproto.load import load as _load_milproto
from coremltools.converters.mil.mil import types as _types
from coremltools.models.utils import _create_mlpackage
from coremltools.proto import MIL_pb2

# -- the weight file (libmilstoragepython) ------------------------------------------------


def blob_writer(path: str):
    """A writer appending blobs to the weight file ``path``: ``write_float_data``,
    ``write_fp16_data`` (bits as uint16), ``write_int32_data``, ``write_int8_data``,
    ``write_uint8_data`` take a flat array and return the blob's offset (its 64-byte
    header). The file is complete once the writer is dropped."""
    return _storage._BlobStorageWriter(path)


def blob_reader(path: str):
    """A reader of the weight file ``path``: ``read_<kind>_data(offset)`` returns the blob
    at ``offset`` (``read_fp16_data`` gives the bits as uint16). It trusts the blob header
    (it maps the file): check the header before reading a file not written by us. The
    class is looked up on each call, so a test may stand in for it."""
    return _storage._BlobStorageReader(path)


# -- MIL values (converters/mil/backend/mil/helper.py) ------------------------------------


def tensor_value_type(shape, data_type: int) -> MIL_pb2.ValueType:
    """The ``ValueType`` of a tensor with constant ``shape`` and MIL ``data_type``."""
    return _helper.create_valuetype_tensor(list(shape), data_type)


def scalar_value(value) -> MIL_pb2.Value:
    """A rank-0 immediate ``Value`` of a Python or numpy scalar (str, bool, int32, fp32,
    fp16, ...), with its MIL dtype."""
    return _helper.create_scalar_value(value)


#: coremltools' encoding of one string, copied by ``set_string_value``
_STRING_VALUE = _helper.create_scalar_value("name")


def set_string_value(dst: MIL_pb2.Value, text: str) -> None:
    """Make ``dst`` equal to ``scalar_value(text)``, about four times faster (every op's
    ``name`` attribute is one): a copy of coremltools' encoding of a string, text replaced."""
    dst.CopyFrom(_STRING_VALUE)
    dst.immediateValue.tensor.strings.values[0] = text


#: dtypes whose tensor values are a repeated field of Python numbers
_LISTED = frozenset(np.dtype(t) for t in (np.bool_, np.int32, np.float32))


def tensor_value(arr: np.ndarray) -> MIL_pb2.Value:
    """An immediate ``Value`` holding ``arr`` (rank >= 1: a rank-0 array would be declared
    as shape [1]; use :func:`scalar_value`).

    The same message as coremltools' ``create_tensor_value``, which converts the values one
    element at a time in Python (``np_val_to_py_type``: a 128x128 causal mask of bools took
    16k calls): here coremltools encodes the first element only, which picks the dtype and
    the field, and the rest is filled from ``arr.tolist()`` (the same Python values)."""
    if arr.size <= 1 or arr.dtype not in _LISTED:  # (8-bit ints and fp16: one bytes field)
        return _helper.create_tensor_value(arr)
    head = _helper.create_tensor_value(arr.reshape(-1)[:1])
    field = head.immediateValue.tensor.WhichOneof("value")
    val = MIL_pb2.Value(type=tensor_value_type(arr.shape, head.type.tensorType.dataType))
    getattr(val.immediateValue.tensor, field).values.extend(arr.reshape(-1).tolist())
    return val


def blob_file_value(file_name: str, offset: int, shape, data_type: int) -> MIL_pb2.Value:
    """A ``Value`` stored in the weight file (``@model_path/weights/...``) at ``offset``."""
    return _helper.create_file_value_tensor(file_name, offset, list(shape), data_type)


# -- the milproto loader (converters/mil/frontend/milproto/load.py) -----------------------

#: pymil dtypes of the program outputs we declare, by MIL name.
PYMIL_DTYPES = {"fp32": _types.fp32, "fp16": _types.fp16, "int32": _types.int32,
                "int8": _types.int8}


def load_milproto(model, weights_dir: str):
    """Load ``model`` (a ``Model_pb2.Model`` with an mlProgram) through coremltools'
    milproto frontend, which rebuilds it with coremltools' op definitions (type inference,
    const checks, opset membership). Returns the pymil ``Program``: ``functions[name]``
    has ``inputs`` (a dict of vars) and ``outputs`` (vars with ``name``, ``shape`` and a
    ``dtype`` from :data:`PYMIL_DTYPES`). Raises on a program it rejects."""
    return _load_milproto(model, model.specificationVersion, weights_dir)


def failing_milproto_op(exc: BaseException) -> str:
    """' at op <type> -> <outputs>' when the traceback of a :func:`load_milproto`
    failure shows which op the loader was loading (its frames keep it in a local named
    ``op_spec``; its own messages do not say), else ''."""
    tb, found = exc.__traceback__, ""
    while tb is not None:
        spec = tb.tb_frame.f_locals.get("op_spec")
        if spec is not None and hasattr(spec, "outputs"):
            outs = ", ".join(o.name for o in spec.outputs)
            found = f" at op {spec.type} -> {outs}"
        tb = tb.tb_next
    return found


# -- packages (coremltools.models.utils) ----------------------------------------------------


def create_mlpackage(model, weights_dir, package_path: str) -> str:
    """Write ``model`` as an ``.mlpackage`` at ``package_path`` (which must not exist or
    be empty), copying the files of ``weights_dir`` (or none if None) into its
    ``Data/com.apple.CoreML/weights``; returns the package path."""
    return _create_mlpackage(model, weights_dir, package_path)


# -- weight compression (coremltools.optimize): Core ML's bit packing ----------------------


def pack_bits(indices: np.ndarray, nbits: int) -> np.ndarray:
    """``indices`` packed LSB first into uint8 bytes, as iOS16 ``constexpr_lut_to_dense``
    reads them (optimize._utils ``pack_elements_into_bits``)."""
    from coremltools.optimize import _utils

    return np.asarray(_utils.pack_elements_into_bits(
        np.asarray(indices, np.uint8).reshape(-1), nbits), np.uint8)
