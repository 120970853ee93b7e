"""Frozen weights kept on disk while a program is compiled, not in the process's memory.

A training step on a frozen base (``trainable=`` / ``compress=``) bakes every frozen leaf
into its program. Held as numpy arrays, the baked values (and their compressed payloads)
were a second and third copy of the user's parameters for the whole life of the step: a
0.5B model's 2.1 GiB of fp32 parameters made a 7-8 GiB compile. A ``WeightStore`` writes
each array to an anonymous temporary file as it is made (the leaf's own memory is then
dropped) and hands back read-only numpy views of a memory map of that file: ordinary arrays
to every pass, whose pages the kernel reads in when they are touched and
``release(arr)`` drops again from the process (``madvise(MADV_DONTNEED)``) once a weight
has been written to its package. The file has no name (``tempfile.TemporaryFile``): it
disappears with the last view, and nothing is left behind if the process dies.

Views of a store are immutable (the map is read-only and the file private), so the RLX
graph keeps them without copying (rlxjax/ir/graph.py ``_freeze``) and keys them by their
place in the store rather than by reading their bytes (``mapped_place``).
"""
from __future__ import annotations

import mmap
import tempfile
from typing import Iterable, List, Optional, Tuple

import numpy as np

PAGE = mmap.PAGESIZE
#: arrays smaller than this stay in memory (a page-aligned entry would cost more than it saves)
MIN_BYTES = 1 << 16


class WeightStore:
    """Append arrays to an anonymous file (``put`` / ``put_chunks``), then ``seal`` it and
    read them back as read-only views (``view``)."""

    def __init__(self, directory: Optional[str] = None):
        self._file = tempfile.TemporaryFile(prefix="rlxjax-weights-", dir=directory)
        self._entries: List[Tuple[int, tuple, np.dtype]] = []
        self._end = 0
        self._map: Optional[mmap.mmap] = None

    def _start(self, shape, dtype) -> int:
        if self._map is not None:
            raise RuntimeError("internal: the weight store is sealed")
        pad = -self._end % PAGE  # every entry starts on a page: release() drops its own pages
        if pad:
            self._file.write(b"\0" * pad)
            self._end += pad
        self._entries.append((self._end, tuple(shape), np.dtype(dtype)))
        return len(self._entries) - 1

    def put(self, arr: np.ndarray) -> int:
        """Write ``arr`` (C order); returns its handle."""
        arr = np.ascontiguousarray(arr)
        handle = self._start(arr.shape, arr.dtype)
        self._file.write(memoryview(arr.reshape(-1)).cast("B"))
        self._end += arr.nbytes
        return handle

    def put_chunks(self, shape, dtype, chunks: Iterable[np.ndarray]) -> int:
        """Write an array of ``shape`` and ``dtype`` given as consecutive C-order pieces
        (rows along axis 0): it is never whole in memory."""
        handle = self._start(shape, dtype)
        n = 0
        for c in chunks:
            c = np.ascontiguousarray(c, dtype)
            self._file.write(memoryview(c.reshape(-1)).cast("B"))
            n += c.nbytes
        want = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if n != want:
            raise RuntimeError(f"internal: {n} bytes written for an array of {want}")
        self._end += n
        return handle

    def seal(self) -> None:
        """No more writes: map the file (read-only) for ``view``."""
        if self._map is None:
            self._file.flush()
            if self._end:
                self._map = mmap.mmap(self._file.fileno(), self._end, access=mmap.ACCESS_READ)
            self._file.close()  # the map keeps the file's pages; no descriptor is held

    def view(self, handle: int) -> np.ndarray:
        """The array ``handle``, a read-only view of the map (no copy)."""
        offset, shape, dtype = self._entries[handle]
        count = int(np.prod(shape, dtype=np.int64))
        if count == 0:
            return np.zeros(shape, dtype)
        return np.frombuffer(self._map, dtype, count, offset).reshape(shape)


def _root(arr: np.ndarray) -> np.ndarray:
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    return arr


def _map_of(root: np.ndarray) -> Optional[mmap.mmap]:
    """The map a root array reads (numpy wraps the buffer in a memoryview), or None."""
    base = root.base
    if isinstance(base, memoryview):
        base = base.obj
    return base if isinstance(base, mmap.mmap) else None


def is_mapped(arr: np.ndarray) -> bool:
    """``arr`` is (a view of) a read-only ``WeightStore`` map: it cannot change."""
    root = _root(arr)
    return _map_of(root) is not None and not root.flags.writeable


def mapped_place(arr: np.ndarray) -> Optional[tuple]:
    """Where a mapped array's bytes are: ``(id of the map, byte offset, dtype, shape,
    strides, the map)`` - equal places hold equal arrays (the map is kept so that its id is
    not reused while the place is). None for any other array."""
    mm = _map_of(_root(arr))
    if mm is None:
        return None
    base = np.frombuffer(mm, np.uint8, 1).ctypes.data
    return (id(mm), arr.ctypes.data - base, arr.dtype.str, arr.shape, arr.strides, mm)


def release(arr) -> None:
    """Drop the pages of a mapped array from the process's memory (the kernel reads them
    in again if they are touched); nothing for any other array."""
    if not isinstance(arr, np.ndarray):
        return
    root = _root(arr)
    mm = _map_of(root)
    if mm is None or root.nbytes == 0:
        return
    start = root.ctypes.data - np.frombuffer(mm, np.uint8, 1).ctypes.data
    first = start - start % PAGE
    mm.madvise(mmap.MADV_DONTNEED, first, start + root.nbytes - first)
