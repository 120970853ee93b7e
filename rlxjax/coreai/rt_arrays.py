"""Core AI runtime arrays filled and read in place, in the worker process (serve.py).

coreai-core 1.0.0b3 copies on both sides of a call: ``NDArray(numpy_array)`` converts at a
few hundred MB/s (16 MiB: 48-130 ms here, where a memory copy takes 2-12 ms), and
``NDArray.numpy()`` returns a fresh copy (DLPack), not a view. The runtime array's own memory
is reachable through its buffer protocol (``memoryview``: read-only, one element per item), so
the worker

* allocates an input array once per function and input (``NDArray.from_descriptor``: the
  function's own shape and dtype) and refills it in place for every call (``Inputs``): the
  runtime reads the refilled values (tests/coreai_format/test_coreai_worker_arrays.py
  checks a call never computes on an earlier call's input);
* reads an output (of 4096 elements or more: a smaller one costs less through ``.numpy()``)
  or a state in place (``host_view``) and copies it once, into shared memory.

Where an array is not the plain C-order layout of a numpy dtype (sub-byte types, a shape
the descriptor leaves open, a buffer whose item size or strides say otherwise), it falls back
to coreai-core's copying ``NDArray(...)`` / ``.numpy()``; the first in-place read and fill of
each runtime dtype are checked against ``.numpy()``, so a layout rlxjax misreads is an error, never
wrong numbers.
"""
from __future__ import annotations

import ctypes
import math
from typing import Dict, Optional

import numpy as np

from . import ca_private

_checked: set = set()   # runtime dtypes whose in-place read matched .numpy()
_checked_in: set = set()  # runtime dtypes whose in-place fill read back as written


def _numpy_dtype(name: str) -> Optional[np.dtype]:
    return ca_private.runtime_numpy_dtype(name)


def host_view(array, writable: bool = False) -> Optional[np.ndarray]:
    """A numpy view of runtime array ``array``'s own memory (valid while ``array`` lives:
    the view keeps it alive), or None where it is not a plain C-order array of a numpy
    dtype."""
    dt = _numpy_dtype(array.dtype)
    if dt is None:
        return None
    shape = tuple(array.shape)
    try:
        mv = ca_private.runtime_buffer(array)
    except (TypeError, AttributeError, BufferError):
        return None
    nbytes = dt.itemsize * math.prod(shape)
    if (nbytes == 0 or mv.nbytes != nbytes or mv.itemsize != dt.itemsize
            or tuple(mv.shape) != shape or not mv.c_contiguous):
        return None
    flat = np.frombuffer(mv, np.uint8)   # read-only, holding the buffer (and the array)
    if writable:  # the runtime exports its buffer read-only; an input is ours to fill
        raw = (ctypes.c_ubyte * nbytes).from_address(flat.__array_interface__["data"][0])
        raw._owner = flat
        flat = np.frombuffer(raw, np.uint8)
    return flat.view(dt).reshape(shape)


#: an output of fewer elements is copied by ``.numpy()`` (a few us), cheaper than the view
SMALL = 4096


def to_host(array) -> np.ndarray:
    """Runtime array ``array``'s values without a copy where it can (``host_view``), else
    coreai-core's copy; a view is valid while ``array`` lives."""
    if math.prod(array.shape) < SMALL:
        return array.numpy()
    view = host_view(array)
    if view is None:
        return array.numpy()
    if array.dtype not in _checked:
        if view.tobytes() != np.ascontiguousarray(array.numpy()).tobytes():
            raise RuntimeError(f"internal: a Core AI runtime array of {array.dtype} does not "
                               "read back in place as .numpy() reads it")
        _checked.add(array.dtype)
    return view


class Inputs:
    """One function's input arrays, allocated on the first call of each and refilled in
    place by every later one (module doc)."""

    def __init__(self, function):
        self.desc = function.desc
        self.slots: Dict[str, tuple] = {}
        self.copied: set = set()   # (name, shape, dtype) the copying constructor takes

    def __call__(self, name: str, value: np.ndarray):
        slot = self.slots.get(name)
        if slot is None or slot[1].shape != value.shape or slot[1].dtype != value.dtype:
            key = (name, value.shape, value.dtype.str)
            slot = None if key in self.copied else self._allocate(name, value)
            if slot is None:
                self.copied.add(key)
                return ca_private.runtime_ndarray()(np.ascontiguousarray(value))
            self.slots[name] = slot
            np.copyto(slot[1], value, casting="no")
            if slot[0].dtype not in _checked_in:  # once per dtype: the fill is what it reads
                if np.ascontiguousarray(slot[0].numpy()).tobytes() != value.tobytes():
                    raise RuntimeError(f"internal: a Core AI runtime array of {slot[0].dtype} "
                                       "filled in place does not read back as written")
                _checked_in.add(slot[0].dtype)
            return slot[0]
        np.copyto(slot[1], value, casting="no")
        return slot[0]

    def _allocate(self, name: str, value: np.ndarray):
        try:
            desc = self.desc.input_descriptor(name)
        except Exception:  # noqa: BLE001 - an input the descriptor does not know
            return None
        if list(desc.shape) != list(value.shape) or _numpy_dtype(desc.dtype) != value.dtype:
            return None   # a flexible dimension, or another dtype: the copying constructor
        array = ca_private.runtime_ndarray().from_descriptor(desc)
        view = host_view(array, writable=True)
        return None if view is None else (array, view)
