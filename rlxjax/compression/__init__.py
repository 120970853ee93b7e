"""Compressed frozen weights, format-neutral: the schemes, what a weight stores, the report.

This module is the data model; a ``compress=`` scheme (schemes.py, shared by the formats)
turns a weight into a ``Compressed`` - its payload and the values the program computes with -
which the RLX graph's ``weight`` node carries (rlxjax/ir/weight.py); ``leaf_report`` and
``CompressionReport`` say what that cost in bytes and error, per weight.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

import numpy as np


def compressible(arr) -> bool:
    """Whether a scheme compresses ``arr``: a floating-point array of rank >= 2."""
    arr = np.asarray(arr)
    return arr.dtype.kind == "f" and arr.ndim >= 2 and arr.size > 0


#: elements per piece when a weight is dequantised or compared piece by piece
CHUNK = 1 << 20


def row_runs(shape, block: int = 1):
    """``(start, stop)`` runs of rows (axis 0) of an array of ``shape``, about ``CHUNK``
    elements each, a multiple of ``block`` rows."""
    rows = shape[0]
    per_row = max(1, int(np.prod(shape[1:], dtype=np.int64)))
    step = max(1, CHUNK // per_row)
    step = max(block, step - step % block)
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


@dataclass(frozen=True)
class Compressed:
    """One weight as a scheme stores it. The values it decompresses to (``value``, in the
    original dtype) are computed from the payload when asked for - whole, or a run of rows
    along axis 0 at a time (``value_rows``, ``value_chunks``) - never held beside it."""

    scheme: str
    data: np.ndarray                  # fp16 values / int8 (int4 range) / uint8 LUT indices
    scale: Optional[np.ndarray] = None
    lut: Optional[np.ndarray] = None
    dequantise: Optional[Callable] = field(default=None, compare=False, repr=False)
    #: the rows of a piece must be a multiple of this (int4: the scale's block on axis 0)
    row_block: int = 1

    @property
    def value(self) -> np.ndarray:
        """The dequantised values, whole (what the program computes with)."""
        return self.value_rows(0, self.data.shape[0] if self.data.ndim else 1)

    def value_rows(self, start: int, stop: int) -> np.ndarray:
        """``value[start:stop]`` (axis 0), computed from those rows of the payload alone."""
        return self.dequantise(self, start, stop)

    def value_chunks(self):
        """``(start, stop, value[start:stop])`` over axis 0, about ``CHUNK`` elements each."""
        for start, stop in row_runs(self.data.shape, self.row_block):
            yield start, stop, self.value_rows(start, stop)

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


def leaf_report(name: str, original: np.ndarray, c: Optional[Compressed],
                error: Optional[Tuple[float, float]] = None) -> LeafReport:
    """What ``c`` did to ``original``; ``error``: its ``error_of`` if already known."""
    original = np.asarray(original)
    if c is None:
        return LeafReport(name, "none", original.shape, original.nbytes, original.nbytes,
                          0.0, 0.0)
    err, peak = error if error is not None else error_of(
        original, ((a, b, v) for a, b, v in c.value_chunks()))
    return LeafReport(name, c.scheme, original.shape, original.nbytes, c.stored_bytes, err,
                      err / peak if peak > 0 else 0.0)


class ErrorMeter:
    """max |dequantised - original| (in float64, exactly) and max |original|, fed a run of
    rows at a time, so that no float64 copy of a whole weight is made."""

    def __init__(self, original: np.ndarray):
        self.original = original
        self.err = 0.0
        self.peak = 0.0

    def add(self, start: int, stop: int, value: np.ndarray) -> None:
        o = self.original[start:stop]
        if o.size:
            # the float64 difference made in one pass (no float64 copy of ``value`` first),
            # and max |x| as max(max x, -min x): no pass taking absolute values - the same
            # numbers (NaN propagates as np.max's does; abs() makes -0.0 0.0), ~4x faster
            d = np.subtract(value, o, dtype=np.float64)
            self.err = max(self.err, _max_abs(d))
            self.peak = max(self.peak, _max_abs(o))


def _max_abs(x: np.ndarray) -> float:
    """``float(np.max(np.abs(x)))`` without the array of absolute values."""
    return abs(float(np.maximum(x.max(), -x.min())))


def error_of(original: np.ndarray, chunks) -> Tuple[float, float]:
    """(max abs error, max |original|) of the ``(start, stop, value rows)`` ``chunks``."""
    meter = ErrorMeter(original)
    for start, stop, value in chunks:
        meter.add(start, stop, value)
    return meter.err, meter.peak


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
