"""Compressed storage of frozen weights: what each ``compress=`` scheme stores, and the values
the program then computes with.

``compress=`` (``coreml_train_step`` for its frozen parameters, ``export_inference`` for all
of them) stores each *compressible* weight - a floating-point array of rank >= 2 (kernels,
embeddings, conv filters); vectors and scalars (biases, norm scales) stay fp32 - in one of:

=============  =================================================  ======  ==============
scheme         stored as                                          target  MIL op
=============  =================================================  ======  ==============
``fp16``       fp16 values                                        iOS16   constexpr_cast
``int8``       int8, one fp32 scale per output channel (the last  iOS16   constexpr_affine_
               axis), symmetric (no zero point)                           dequantize (iOS18+:
                                                                          constexpr_blockwise_
                                                                          shift_scale)
``int4``       int4, one fp32 scale per block of 32 input rows    iOS18   constexpr_blockwise_
               (axis -2; the whole axis if 32 does not divide it)         shift_scale
               per output channel
``palettize4`` 4-bit indices into a 16-entry fp32 look-up table   iOS16   constexpr_lut_to_
``palettize8`` 8-bit indices, 256-entry table (per tensor,                dense
               k-means)
=============  =================================================  ======  ==============

The maths is coremltools.optimize's own (``coreml/ct_private.py``: linear quantisation
``blockwise_compress``, k-means through the kmeans1d copy coremltools ships). The program
computes with the *dequantised* values, exactly as Core ML's constexpr ops decompress them;
``compress_leaf`` returns them, and the graph's ``weight`` node (rlxjax/ir/weight.py)
carries both. A JAX reference of a compressed program runs on those values
(``step.params(step.init(params))`` for a training step; ``compress_leaf(w).value``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

import numpy as np

from ..errors import ArgumentError
from . import ct_private
from .targets import Target, get_target, require

#: scheme -> the oldest target whose MIL has the op that stores it
SCHEMES: Dict[str, str] = {"fp16": "iOS16", "int8": "iOS16", "int4": "iOS18",
                           "palettize4": "iOS16", "palettize8": "iOS16"}
INT4_BLOCK = 32


def check_scheme(compress: Optional[str], target) -> None:
    """Refuse an unknown scheme (ArgumentError) or a target too old for it (TargetError)."""
    if compress is None:
        return
    if compress not in SCHEMES:
        raise ArgumentError(f"compress={compress!r}: choose one of {', '.join(SCHEMES)} "
                            "(or None to store weights in fp32)")
    t = target if isinstance(target, Target) else get_target(target)
    require(t, SCHEMES[compress], f"compress={compress!r}")


def compressible(arr) -> bool:
    """Whether a scheme compresses ``arr``: a floating-point array of rank >= 2."""
    arr = np.asarray(arr)
    return arr.dtype.kind == "f" and arr.ndim >= 2 and arr.size > 0


@dataclass(frozen=True)
class Compressed:
    """One weight as a scheme stores it, and the values it decompresses to."""

    scheme: str
    value: np.ndarray                 # the dequantised values (the original dtype)
    data: np.ndarray                  # fp16 values / int8 (int4 range) / uint8 LUT indices
    scale: Optional[np.ndarray] = None
    lut: Optional[np.ndarray] = None

    @property
    def stored_bytes(self) -> int:
        """Bytes of the payload in the weight file (sub-byte data packed)."""
        bits = {"fp16": 16, "int8": 8, "int4": 4, "palettize4": 4, "palettize8": 8}[self.scheme]
        n = (self.data.size * bits + 7) // 8
        for extra in (self.scale, self.lut):
            n += 0 if extra is None else extra.nbytes
        return n

    def params(self) -> dict:
        """The payload params of a ``weight`` node."""
        out = {"scheme": self.scheme, "data": self.data}
        if self.scale is not None:
            out["scale"] = self.scale
        if self.lut is not None:
            out["lut"] = self.lut
        return out


def compress_leaf(arr: np.ndarray, scheme: str) -> Optional[Compressed]:
    """``arr`` stored with ``scheme``, or None if the scheme leaves it alone (not
    compressible, or float64 - compress the fp32 values JAX computes with)."""
    arr = np.asarray(arr)
    if not compressible(arr) or arr.dtype != np.float32:
        return None
    if scheme == "fp16":
        data = arr.astype(np.float16)
        return Compressed(scheme, data.astype(np.float32), data)
    if scheme in ("int8", "int4"):
        nbits = 8 if scheme == "int8" else 4
        blocks = [0] * arr.ndim
        blocks[-1] = 1
        if scheme == "int4" and arr.shape[-2] % INT4_BLOCK == 0:
            blocks[-2] = INT4_BLOCK
        data, scale = ct_private.linear_quantize(arr, nbits, blocks)
        zero = ~(scale > 0)  # an all-zero block: scale 0 (data NaN-derived): store 0 * 1
        if zero.any():
            scale = np.where(zero, np.float32(1), scale).astype(np.float32)
            data = np.where(_repeat(zero, arr.shape), np.int8(0), data).astype(np.int8)
        return Compressed(scheme, ct_private.dequantize(data, scale).astype(np.float32),
                          data, scale=scale)
    nbits = {"palettize4": 4, "palettize8": 8}[scheme]
    lut, indices = ct_private.kmeans_palettize(arr, nbits)
    return Compressed(scheme, ct_private.lut_to_dense(indices, lut).astype(np.float32),
                      indices, lut=lut)


def _repeat(blockwise: np.ndarray, shape) -> np.ndarray:
    for axis, (n, b) in enumerate(zip(shape, blockwise.shape)):
        blockwise = np.repeat(blockwise, n // b, axis=axis)
    return blockwise


@dataclass(frozen=True)
class LeafReport:
    """What compression did to one weight."""

    name: str
    scheme: str                  # 'none' when left in fp32
    shape: tuple
    fp32_bytes: int
    stored_bytes: int
    max_abs_error: float         # max |dequantised - original|
    rel_error: float             # max_abs_error / max |original|

    def row(self) -> dict:
        return dict(name=self.name, scheme=self.scheme, shape=list(self.shape),
                    fp32_bytes=self.fp32_bytes, stored_bytes=self.stored_bytes,
                    max_abs_error=self.max_abs_error, rel_error=self.rel_error)


def leaf_report(name: str, original: np.ndarray, c: Optional[Compressed]) -> LeafReport:
    original = np.asarray(original)
    if c is None:
        return LeafReport(name, "none", original.shape, original.nbytes, original.nbytes,
                          0.0, 0.0)
    err = float(np.max(np.abs(c.value.astype(np.float64) - original))) if original.size else 0.0
    peak = float(np.max(np.abs(original))) if original.size else 0.0
    return LeafReport(name, c.scheme, original.shape, original.nbytes, c.stored_bytes, err,
                      err / peak if peak > 0 else 0.0)


@dataclass(frozen=True)
class CompressionReport:
    """Per-weight results of a ``compress=`` scheme (``compiled.compression``)."""

    scheme: Optional[str]
    leaves: tuple

    @property
    def fp32_bytes(self) -> int:
        return sum(r.fp32_bytes for r in self.leaves)

    @property
    def stored_bytes(self) -> int:
        return sum(r.stored_bytes for r in self.leaves)

    @property
    def max_abs_error(self) -> float:
        return max((r.max_abs_error for r in self.leaves), default=0.0)

    @property
    def rel_error(self) -> float:
        return max((r.rel_error for r in self.leaves), default=0.0)

    def rows(self) -> List[dict]:
        return [r.row() for r in self.leaves]

    def __repr__(self):
        return (f"CompressionReport({self.scheme}: {len(self.leaves)} weights, "
                f"{self.stored_bytes} of {self.fp32_bytes} fp32 bytes, max abs error "
                f"{self.max_abs_error:.3g}, max relative {self.rel_error:.3g})")
