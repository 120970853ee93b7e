"""Decode MIL protobuf types and values (``coremltools.proto.MIL_pb2``) into numpy.

Mirrors what coremltools writes in ``converters/mil/backend/mil/helper.py`` and reads back in
``converters/mil/frontend/milproto/load.py``:

* tensors: ``immediateValue.tensor`` with one of floats / ints / bools / strings / longInts /
  doubles / bytes filled.  fp16, int8, uint8 and uint32 are packed into ``bytes`` (raw
  little-endian buffer); int16 / uint16 / int32 go to ``ints``; scalars are rank-0 tensors.
* blob file values: ``blobFileValue(fileName='@model_path/weights/<file>', offset)`` with the
  tensor type giving dtype and shape, read with coremltools' blob reader (``coreml/ct_private.blob_reader``).
* tuples / lists of values (``immediateValue.tuple`` / ``.list``) -> Python lists.

Strings are returned as Python ``str`` (rank 0) so ops can compare ``mode == "EXACT"`` directly;
every other value is an ``np.ndarray`` (rank 0 included, never a numpy scalar).
"""
from __future__ import annotations

import os

import numpy as np
from coremltools.proto import MIL_pb2

from ...coreml import ct_private

_DT = MIL_pb2.DataType

#: MIL DataType enum -> numpy dtype. Sub-byte types: SUB_BYTE (int4 / uint4 constexpr payloads);
#: fp8 is not supported.
MIL_TO_NUMPY = {
    _DT.BOOL: np.dtype(np.bool_),
    _DT.FLOAT16: np.dtype(np.float16),
    _DT.FLOAT32: np.dtype(np.float32),
    _DT.FLOAT64: np.dtype(np.float64),
    _DT.INT8: np.dtype(np.int8),
    _DT.INT16: np.dtype(np.int16),
    _DT.INT32: np.dtype(np.int32),
    _DT.INT64: np.dtype(np.int64),
    _DT.UINT8: np.dtype(np.uint8),
    _DT.UINT16: np.dtype(np.uint16),
    _DT.UINT32: np.dtype(np.uint32),
    _DT.UINT64: np.dtype(np.uint64),
}

# Blob storage reader method per dtype (see coremltools' milproto loader `_load_file_value`).
_BLOB_READERS = {
    np.dtype(np.float32): "read_float_data",
    np.dtype(np.float16): "read_fp16_data",  # returns the bits as uint16
    np.dtype(np.int8): "read_int8_data",
    np.dtype(np.uint8): "read_uint8_data",
    np.dtype(np.int16): "read_int16_data",
    np.dtype(np.uint16): "read_uint16_data",
    np.dtype(np.int32): "read_int32_data",
    np.dtype(np.uint32): "read_uint32_data",
}

#: sub-byte MIL types of constexpr payloads (iOS18 int4 data, uint4 LUT indices): stored only
#: in the weight file, packed; decoded one element per byte (dtype, reader, bits).
SUB_BYTE = {
    _DT.INT4: (np.dtype(np.int8), "read_int4_data", 4),
    _DT.UINT4: (np.dtype(np.uint8), "read_uint4_data", 4),
}

_WEIGHTS_PREFIX = "@model_path/weights/"


class ValueDecodeError(ValueError):
    """A protobuf value this interpreter cannot decode (the caller adds op context)."""


def dtype_name(dt: int) -> str:
    return MIL_pb2.DataType.Name(dt)


def numpy_dtype(dt: int) -> np.dtype:
    if dt == _DT.STRING:
        return np.dtype(np.str_)
    try:
        return MIL_TO_NUMPY[dt]
    except KeyError:
        raise ValueDecodeError(f"unsupported MIL data type {dtype_name(dt)}") from None


def tensor_signature(value_type) -> tuple[np.dtype, tuple | None]:
    """(numpy dtype, shape) of a tensor ValueType; unknown dims are None, shape None if variadic."""
    which = value_type.WhichOneof("type")
    if which != "tensorType":
        raise ValueDecodeError(f"expected a tensor type, got {which}")
    tt = value_type.tensorType
    dims = []
    for d in tt.dimensions:
        if d.WhichOneof("dimension") == "constant":
            dims.append(int(d.constant.size))
        elif d.unknown.variadic:
            return numpy_dtype(tt.dataType), None
        else:
            dims.append(None)
    return numpy_dtype(tt.dataType), tuple(dims)


def weight_file_path(weights_dir: str, file_name) -> str:
    """The real path of the weight file a blob value names, ``@model_path/weights/<file>``,
    confined to ``weights_dir``: a package is untrusted input, so a name without that prefix,
    with ``..`` leaving the folder, absolute, or a symlink resolving outside it is refused
    (``ValueDecodeError``) before anything is opened."""
    if not isinstance(file_name, str) or not file_name.startswith(_WEIGHTS_PREFIX):
        raise ValueDecodeError(f"blob file name {file_name!r} does not start with "
                               f"{_WEIGHTS_PREFIX!r}: refusing a weight file outside the "
                               "package's weights folder")
    rel = file_name[len(_WEIGHTS_PREFIX):]
    if not rel or "\x00" in rel:
        raise ValueDecodeError(f"blob file name {file_name!r} names no weight file")
    root = os.path.realpath(weights_dir)
    path = os.path.realpath(os.path.join(root, rel))
    if os.path.isabs(rel) or os.path.commonpath([path, root]) != root or path == root:
        raise ValueDecodeError(f"blob file name {file_name!r} resolves to {path!r}, outside "
                               f"the package's weights folder {root!r}: refused")
    return path


class BlobFiles:
    """Opens each weight file once and reads blob values from it."""

    def __init__(self, weights_dir):
        self.weights_dir = None if weights_dir is None else os.fspath(weights_dir)
        self._readers = {}

    def read(self, file_name: str, offset: int, dtype: np.dtype, shape: tuple,
             method: str = None, bits: int = None) -> np.ndarray:
        if self.weights_dir is None:
            raise ValueDecodeError(
                f"value is stored in blob file {file_name!r} but no weights_dir was given"
            )
        path = weight_file_path(self.weights_dir, file_name)
        reader = self._readers.get(path)
        if reader is None:
            if not os.path.isfile(path):
                raise ValueDecodeError(f"weight file {path!r} (from {file_name!r}) does not exist")
            reader = self._readers[path] = ct_private.blob_reader(path)
        method = method or _BLOB_READERS.get(dtype)
        if method is None:
            raise ValueDecodeError(f"blob values of dtype {dtype} are not supported")
        # The reader trusts the file's blob header (it mmaps the file): check the header
        # against the file size and the declared tensor type before it reads anything.
        n = int(np.prod(shape, dtype=np.int64))
        _check_blob(path, int(offset),
                    dtype.itemsize * n if bits is None else (n * bits + 7) // 8)
        try:
            data = np.asarray(getattr(reader, method)(int(offset)))
        except (ValueError, RuntimeError, IndexError, OverflowError, MemoryError) as e:
            raise ValueDecodeError(f"blob at offset {offset} of {path!r} is unreadable "
                                   f"({type(e).__name__}: {e})") from None
        if dtype == np.float16:
            data = data.view(np.float16)
        if data.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueDecodeError(f"blob at offset {offset} of {path!r} holds {data.size} "
                                   f"values, its type says {shape}")
        # Copy: the reader may hand out memory it owns; ours must outlive it.
        return np.array(data, dtype=dtype).reshape(shape)


# MIL blob storage layout (coremltools' mlmodel/src/MILBlob/Blob/StorageFormat.hpp): a 64-byte
# file header, then per blob a 64-byte metadata record at ``offset`` -- uint32 sentinel
# 0xDEADBEEF, uint32 data type, uint64 size in bytes, uint64 data offset, reserved -- with the
# data at ``data offset``.
_BLOB_SENTINEL = 0xDEADBEEF
_BLOB_META = np.dtype([("sentinel", "<u4"), ("mil_dtype", "<u4"), ("size", "<u8"),
                       ("data_offset", "<u8")])
_BLOB_META_BYTES = 64


def _check_blob(path: str, offset: int, want_bytes: int) -> None:
    size = os.path.getsize(path)
    where = f"blob at offset {offset} of {path!r} ({size} bytes)"
    if offset < _BLOB_META_BYTES or offset + _BLOB_META_BYTES > size:
        raise ValueDecodeError(f"{where}: offset is out of range")
    with open(path, "rb") as f:
        f.seek(offset)
        meta = np.frombuffer(f.read(_BLOB_META.itemsize), dtype=_BLOB_META)[0]
    if int(meta["sentinel"]) != _BLOB_SENTINEL:
        raise ValueDecodeError(f"{where}: no blob header there (bad sentinel)")
    n, start = int(meta["size"]), int(meta["data_offset"])
    if n != want_bytes:
        raise ValueDecodeError(f"{where}: header says {n} bytes, the tensor type needs "
                               f"{want_bytes}")
    if start < _BLOB_META_BYTES or start + n > size:
        raise ValueDecodeError(f"{where}: data range [{start}, {start + n}) lies outside the "
                               "file (truncated or corrupted weights)")


def _tensor_from_immediate(tv, dtype: np.dtype, shape: tuple):
    field = tv.WhichOneof("value")
    if dtype.kind == "U":
        items = [s.decode("utf-8") if isinstance(s, bytes) else s for s in tv.strings.values]
        if shape == ():
            return items[0]
        return np.array(items, dtype=np.str_).reshape(shape)
    if field == "bytes":
        arr = np.frombuffer(tv.bytes.values, dtype=dtype)
    elif field is None:  # empty tensor: the oneof may be left unset
        arr = np.zeros((0,), dtype=dtype)
    else:
        arr = np.asarray(list(getattr(tv, field).values)).astype(dtype)
    if arr.size != int(np.prod(shape, dtype=np.int64)):
        raise ValueDecodeError(f"immediate tensor holds {arr.size} values, type says {shape}")
    return np.array(arr.reshape(shape), dtype=dtype)  # own, writable copy


def decode_value(value, blobs: BlobFiles):
    """MIL_pb2.Value -> np.ndarray | str | list (tuple/list values)."""
    which_type = value.type.WhichOneof("type")
    which_val = value.WhichOneof("value")
    if which_type == "tensorType" and value.type.tensorType.dataType in SUB_BYTE:
        return _sub_byte(value, blobs)
    if which_type == "tensorType":
        dtype, shape = tensor_signature(value.type)
        if shape is None or any(d is None for d in shape):
            raise ValueDecodeError(f"constant value with non-static shape {shape}")
        if which_val == "blobFileValue":
            bf = value.blobFileValue
            return blobs.read(bf.fileName, bf.offset, dtype, shape)
        if which_val == "immediateValue" and value.immediateValue.WhichOneof("value") == "tensor":
            return _tensor_from_immediate(value.immediateValue.tensor, dtype, shape)
        raise ValueDecodeError(f"tensor-typed value stored as {which_val}")
    if which_type in ("tupleType", "listType") and which_val == "immediateValue":
        iv = value.immediateValue
        kind = iv.WhichOneof("value")
        if kind in ("tuple", "list"):
            return [decode_value(v, blobs) for v in getattr(iv, kind).values]
    raise ValueDecodeError(f"unsupported value (type {which_type}, stored as {which_val})")


def _sub_byte(value, blobs: BlobFiles) -> np.ndarray:
    """A sub-byte tensor (int4 / uint4): only as a weight-file value, one element per byte."""
    tt = value.type.tensorType
    dtype, method, bits = SUB_BYTE[tt.dataType]
    shape = []
    for d in tt.dimensions:
        if d.WhichOneof("dimension") != "constant":
            raise ValueDecodeError("sub-byte constant with a non-static shape")
        shape.append(int(d.constant.size))
    if value.WhichOneof("value") != "blobFileValue":
        raise ValueDecodeError(
            f"{dtype_name(tt.dataType)} value not stored in the weight file")
    bf = value.blobFileValue
    return blobs.read(bf.fileName, bf.offset, dtype, tuple(shape), method=method, bits=bits)
