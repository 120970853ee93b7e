"""A program's signature as the host sees it: one ``IOSpec`` per input and output feature.

Format-neutral: every format lowers the RLX graph's inputs and outputs to features it can
carry (Core ML: multi-arrays of rank >= 1, fp32 / int32, int8 from iOS26) and describes each
with an ``IOSpec`` - the JAX-side shape and dtype and the feature's own - so that the host
(``Compiled.__call__``, ``rlxjax.load``) converts values both ways the same for every format.
The specs are written to, and read back from, the package metadata (rlxjax/metadata.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Tuple

import numpy as np


@dataclass(frozen=True)
class IOSpec:
    """One function input or output: how the host feeds or reads it."""

    name: str          # pytree-path name in the RLX graph ('params.Dense_0.kernel')
    mil_name: str      # the feature's name in the package (an identifier; 'mil_name' in metadata)
    shape: Tuple[int, ...]   # the JAX-side shape
    dtype: str         # the JAX-side dtype (numpy name)
    io_shape: Tuple[int, ...]  # what the format's interface carries (Core ML: rank >= 1)
    io_dtype: str      # 'float32', 'int32' or (Core ML from iOS26) 'int8'
    # a flexible input (docs/flexible.md): per dim (lower, upper) bounds of a flexible dim
    # (its name a str in shape), None for a static one; () for static inputs and outputs
    bounds: tuple = ()

    @property
    def flexible(self) -> bool:
        return any(isinstance(d, str) for d in self.shape)

    def to_feature(self, arr: np.ndarray) -> np.ndarray:
        """A JAX-side value of this input (shape/dtype already checked) -> what the
        program is fed: the feature's shape, bool as int32."""
        arr = np.asarray(arr, dtype=self.io_dtype)
        return arr if self.flexible else arr.reshape(self.io_shape)

    def from_feature(self, y) -> np.ndarray:
        """An output feature -> the JAX-side value."""
        y = np.asarray(y)
        return (y if self.flexible else y.reshape(self.shape)).astype(self.dtype, copy=False)


IO_FIELDS = tuple(f.name for f in fields(IOSpec))


def unique_names(names):
    """``names`` with repeats made unique by a ``_1``, ``_2``... suffix, in order."""
    seen, out = set(), []
    for n in names:
        cand, k = n, 1
        while cand in seen:
            cand, k = f"{n}_{k}", k + 1
        seen.add(cand)
        out.append(cand)
    return out


def feature_name(name: str) -> str:
    """A pytree-path name as a feature identifier (``params.Dense_0.kernel`` ->
    ``params_Dense_0_kernel``)."""
    s = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return s if re.match(r"[A-Za-z_]", s) else "_" + s
