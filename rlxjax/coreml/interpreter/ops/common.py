"""Small helpers shared by the op families (and by the accelerated path,
../accelerated/prepared.py)."""
from __future__ import annotations

import numpy as np

#: MIL dtype strings (cast's ``dtype``, reduce_arg's ``output_dtype``) -> numpy dtype, as in
#: coremltools' ``types.type_mapping.string_to_nptype``.
STR_TO_DTYPE = {
    "bool": np.dtype(np.bool_),
    "fp16": np.dtype(np.float16),
    "fp32": np.dtype(np.float32),
    "fp64": np.dtype(np.float64),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "int16": np.dtype(np.int16),
    "uint16": np.dtype(np.uint16),
    "int32": np.dtype(np.int32),
    "uint32": np.dtype(np.uint32),
    "int64": np.dtype(np.int64),
    "uint64": np.dtype(np.uint64),
}

FLOAT16 = np.dtype(np.float16)
FLOAT32 = np.dtype(np.float32)


def out(value, dtype) -> np.ndarray:
    """Result as an ndarray of exactly ``dtype``.

    numpy ufuncs on rank-0 arrays return numpy scalars and mixed-precision expressions (like
    coremltools' own value_inference formulas) may widen, so every op funnels through here.
    """
    return np.asarray(value).astype(dtype, copy=False)


def acc_dtype(dtype) -> np.dtype:
    """Accumulator dtype: fp16 reductions / matmuls accumulate in fp32 and round once at the end
    (what Core ML's fp16 kernels do, and independent of numpy's memory-layout-dependent fp16
    summation order)."""
    return FLOAT32 if np.dtype(dtype) == FLOAT16 else np.dtype(dtype)


def get(inputs: dict, name: str, default=None):
    v = inputs.get(name)
    return default if v is None else v


def to_int(v) -> int:
    return int(np.asarray(v).reshape(()))


def to_bool(v) -> bool:
    return bool(np.asarray(v).reshape(()))


def to_int_list(v) -> list:
    return [int(i) for i in np.asarray(v).reshape(-1)]


def to_bool_list(v) -> list:
    return [bool(i) for i in np.asarray(v).reshape(-1)]


def norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ValueError(f"axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def promote(a: np.dtype, b: np.dtype) -> np.dtype:
    """MIL's promote_types for two tensor dtypes (equal in any valid program): float wins over
    int/bool, otherwise the wider one."""
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return a
    if (a.kind == "f") != (b.kind == "f"):
        return a if a.kind == "f" else b
    if a.kind == "b":
        return b
    if b.kind == "b":
        return a
    return np.promote_types(a, b)
