"""Value types of the RLX graph: a dtype and a static shape.

Dynamic dims exist as a type (``Dyn``) so that the frontend can carry them and every
later stage can name them in an error; lowering to Core ML rejects them explicitly.
"""
from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass, field
from typing import Optional, Tuple, Union

import numpy as np

from ..errors import UnsupportedDTypeError


class DType(enum.Enum):
    f32 = "f32"
    f16 = "f16"
    i32 = "i32"
    bool = "bool"
    i8 = "i8"
    u8 = "u8"

    @property
    def np(self) -> np.dtype:
        return _NP_DTYPES[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.f32, DType.f16)

    @property
    def is_int(self) -> bool:
        return self in (DType.i32, DType.i8, DType.u8)

    def __repr__(self) -> str:
        return self.value

    __str__ = __repr__


_TO_NUMPY = {
    DType.f32: "float32",
    DType.f16: "float16",
    DType.i32: "int32",
    DType.bool: "bool",
    DType.i8: "int8",
    DType.u8: "uint8",
}
_FROM_NUMPY = {np.dtype(v): k for k, v in _TO_NUMPY.items()}
_NP_DTYPES = {k: np.dtype(v) for k, v in _TO_NUMPY.items()}



def dtype_from_numpy(dt) -> DType:
    dt = np.dtype(dt)
    try:
        return _FROM_NUMPY[dt]
    except KeyError:
        hint = ""
        if dt in (np.dtype("int64"), np.dtype("uint64"), np.dtype("float64")):
            hint = (
                " Core ML has no 64-bit tensors: disable JAX's x64 mode "
                "(jax.config.update('jax_enable_x64', False)) or cast to a 32-bit type "
                "before calling."
            )
        raise UnsupportedDTypeError(
            f"dtype {dt} is not supported by rlxjax (supported: "
            f"{', '.join(sorted(v for v in _TO_NUMPY.values()))}).{hint}"
        ) from None


@dataclass(frozen=True)
class Dyn:
    """A dimension whose size is unknown at compile time: ``name`` is a symbol ('b') or an
    expression of symbols in JAX's syntax ('64*b'), and dims of one name have one size.
    ``bounds`` (lower, upper; upper -1 when unbounded) is what a program input's dim may
    take (docs/flexible.md); it takes no part in equality."""

    name: str = "?"
    bounds: Optional[Tuple[int, int]] = field(default=None, compare=False)

    def __repr__(self) -> str:
        return self.name


Dim = Union[int, Dyn]


@dataclass(frozen=True)
class TensorType:
    shape: Tuple[Dim, ...]
    dtype: DType

    def __post_init__(self):
        shape = self.shape
        if type(shape) is tuple:
            for d in shape:
                if type(d) is not int or d < 0:
                    break
            else:  # already canonical and static (the common case: skip the rebuild)
                self.__dict__["is_static"] = True  # what the cached property would say
                return
        shape = tuple(d if isinstance(d, Dyn) else int(d) for d in shape)
        for d in shape:
            if isinstance(d, int) and d < 0:
                raise ValueError(f"negative dimension in shape {shape}")
        object.__setattr__(self, "shape", shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @functools.cached_property  # the shape never changes (and is asked for per node)
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def size(self) -> int:
        if not self.is_static:
            raise ValueError(f"size of dynamic shape {self}")
        return math.prod(self.shape)

    def with_dtype(self, dtype: DType) -> "TensorType":
        return TensorType(self.shape, dtype)

    def with_shape(self, shape) -> "TensorType":
        return TensorType(tuple(shape), self.dtype)

    def __repr__(self) -> str:
        return f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"

    __str__ = __repr__


class Typed:
    """Mixin for things carrying a ``type: TensorType`` (RLX values, MIL vars)."""

    __slots__ = ()

    @property
    def shape(self):
        return self.type.shape

    @property
    def dtype(self):
        return self.type.dtype
