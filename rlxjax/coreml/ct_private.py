"""Every use of coremltools' private API, in one place.

rlxjax writes and reads ML Programs with coremltools' generated protobuf classes
(``coremltools.proto``, public) and a few pieces coremltools does not document as public:
the blob-storage writer and reader of the weight file, the value helpers its MIL backend
serialises with, its milproto loader (our structural validator) and pymil's dtypes, and
the function that lays out an ``.mlpackage``. Nothing else in rlxjax imports them: each
use is a small function here, and ``tests/coreml/test_ct_private.py`` pins the behaviour rlxjax
relies on, one test per function, so a coremltools upgrade that changes one fails there
first and says which.
"""
from __future__ import annotations

from . import coremltools_quiet  # noqa: F401  (first: coremltools without its notices)
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


# -- weight compression maths (coremltools.optimize) ----------------------------------------


def linear_quantize(arr: np.ndarray, nbits: int, block_sizes):
    """Symmetric signed linear quantisation of ``arr`` with coremltools.optimize's own
    maths (``linear_quantize_weights.blockwise_compress``, mode LINEAR_SYMMETRIC):
    ``block_sizes[i]`` > 0 splits axis i into blocks of that size with a scale each, 0
    shares one scale along the whole axis. Returns (data as int8 numpy, scale of the
    rank of ``arr``, fp32) or None when coremltools cannot (a block size that does not
    divide its axis)."""
    from coremltools.optimize.coreml._quantization_passes import linear_quantize_weights

    with np.errstate(divide="ignore", invalid="ignore"):
        params = linear_quantize_weights.blockwise_compress(
            arr, nbits=nbits, mode="LINEAR_SYMMETRIC", signed=True,
            block_sizes=list(block_sizes))
    if params is None:
        return None
    return np.asarray(params.data, np.int8), np.asarray(params.scale, arr.dtype)


def dequantize(data: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``scale * data`` with each scale repeated over its block, as coremltools computes
    ``constexpr_blockwise_shift_scale`` / ``constexpr_affine_dequantize`` (optimize._utils
    ``dequantize_by_scale_and_zp``)."""
    from coremltools.optimize import _utils

    return _utils.dequantize_by_scale_and_zp(data, scale, None)


def kmeans_palettize(arr: np.ndarray, nbits: int):
    """Per-tensor k-means palettisation with coremltools' own clustering
    (``_get_kmeans_lookup_table_and_weight``, through the kmeans1d copy coremltools ships in
    ``coremltools._deps``: optimal and deterministic in one dimension). Returns (lut of
    2**nbits entries in arr's dtype, uint8 indices of arr's shape)."""
    from coremltools.models.neural_network.quantization_utils import (
        _get_kmeans_lookup_table_and_weight)

    lut, indices = _get_kmeans_lookup_table_and_weight(nbits, arr, force_kmeans1d=True)
    return (np.asarray(lut, arr.dtype).reshape(-1),
            np.asarray(indices, np.uint8).reshape(arr.shape))


def lut_to_dense(indices: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """The dense tensor of a per-tensor palettised weight (optimize._utils ``lut_to_dense``,
    with the iOS18 LUT layout: one palette for the whole tensor)."""
    from coremltools.optimize import _utils

    return _utils.lut_to_dense(indices, lut.reshape((1,) * indices.ndim + (lut.size, 1)))


def pack_bits(indices: np.ndarray, nbits: int) -> np.ndarray:
    """``indices`` packed LSB first into uint8 bytes, as iOS16 ``constexpr_lut_to_dense``
    reads them (optimize._utils ``pack_elements_into_bits``)."""
    from coremltools.optimize import _utils

    return np.asarray(_utils.pack_elements_into_bits(
        np.asarray(indices, np.uint8).reshape(-1), nbits), np.uint8)
