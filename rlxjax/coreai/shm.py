"""Shared memory between rlxjax and its Core AI worker process (worker.py, serve.py).

Arrays cross the process boundary through memory-mapped files in ``/dev/shm`` (RAM; the
temporary folder where there is none), not through a pipe: the sender copies an array into
an ``Arena`` and sends its place (file, offset, shape, dtype) in a small control message.
An arena is kept from call to call, so its pages are mapped once and every later copy runs
at memory speed; one too small is replaced by a larger file. Plain files and ``mmap`` rather
than ``multiprocessing.shared_memory``: the same tmpfs pages (bench/coreai_calls.py measures
the call), without the resource tracker's extra process and warnings, and with the name
prefix that lets either process remove what the other left (``remove_all``).

A worker's states are mirrored in a ``Snapshot`` file, two slots per state, each slot a
version number then the values: every change of a state (a call, a ``write_state``) gets a
version never used before, and is written over the slot not holding the state's last
acknowledged version (its version set to -1 first, so a copy cut short by a death is never
read as whole). The rlxjax process reads a state at the version it last saw acknowledged
(``read``) without asking the worker, and still can after the worker died: the last
completed step is never lost with the worker, nor mixed with a change that did not
complete.
"""
from __future__ import annotations

import glob
import mmap
import os
import secrets
import tempfile
import weakref
from typing import Callable, Dict, Iterable, Tuple

import numpy as np

ALIGN = 64
#: (file name, offset, shape, numpy dtype string) of an array in an arena
Place = Tuple[str, int, Tuple[int, ...], str]


def folder() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) \
        else tempfile.gettempdir()


def new_prefix() -> str:
    """A name prefix unique to one worker session: ``rlxjax-<pid>-<random>-``."""
    return f"rlxjax-{os.getpid()}-{secrets.token_hex(4)}-"


def _up(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _map(path: str, size: int = 0, populate: bool = False) -> mmap.mmap:
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if size else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if size:
            os.ftruncate(fd, size)
        extra = getattr(mmap, "MAP_POPULATE", 0) if populate else 0
        return mmap.mmap(fd, 0, flags=mmap.MAP_SHARED | extra)
    finally:
        os.close(fd)


def remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_all(prefix: str, kind: str = "") -> None:
    """Remove every file of a session (``kind``: only those named ``<prefix><kind>...``)."""
    for path in glob.glob(os.path.join(folder(), glob.escape(prefix + kind) + "*")):
        remove(path)


class Mapped:
    """The arenas the other process named, mapped on first sight (the newest kept)."""

    def __init__(self):
        self.maps: Dict[str, mmap.mmap] = {}

    def view(self, place: Place) -> np.ndarray:
        name, offset, shape, dtype = place
        m = self.maps.get(name)
        if m is None:
            for old in [k for k in self.maps if k.rsplit("-", 1)[0] == name.rsplit("-", 1)[0]]:
                self.maps.pop(old)  # replaced by a larger arena of the same kind
            m = self.maps[name] = _map(os.path.join(folder(), name))
        return np.ndarray(shape, np.dtype(dtype), buffer=m, offset=offset)


class Arena:
    """A file this process writes arrays into, read by the other process (``Mapped``)."""

    def __init__(self, prefix: str, kind: str):
        self.prefix, self.kind = prefix, kind
        self.gen, self.name, self.map = 0, None, None

    def _ensure(self, size: int) -> None:
        if self.map is not None and len(self.map) >= size:
            return
        self.close()
        self.gen += 1
        self.name = f"{self.prefix}{self.kind}-{self.gen}"
        # at least double, so that a growing series of calls maps a few files, not one each
        self.map = _map(os.path.join(folder(), self.name), max(size, 1 << 16,
                                                               2 * (self.size or 0)))

    @property
    def size(self) -> int:
        return len(self.map) if self.map is not None else 0

    def put(self, arrays: Dict[str, np.ndarray]) -> Dict[str, Place]:
        """Copy ``arrays`` into the arena; their places, for the other process."""
        offsets, end = {}, 0
        for k, a in arrays.items():
            offsets[k] = end
            end += _up(a.nbytes)
        self._ensure(max(end, ALIGN))
        out = {}
        for k, a in arrays.items():
            view = np.ndarray(a.shape, a.dtype, buffer=self.map, offset=offsets[k])
            np.copyto(view, a, casting="no")
            out[k] = (self.name, offsets[k], a.shape, a.dtype.str)  # (.name costs ~10 us)
        return out

    def close(self) -> None:
        if self.name is not None:
            remove(os.path.join(folder(), self.name))
        self.map = self.name = None


#: an output of at least this many bytes is handed to the caller in its own file, without a
#: copy (``Leases``); a smaller one is copied out of the arena
BIG = 1 << 20


class Leases:
    """Files holding one big output each, written by the worker and handed to the rlxjax
    process, whose result array maps the file itself (``lease``): no copy into fresh memory
    on that side. When the result array is gone the rlxjax process says so with its next
    request (``free``) and the worker writes a later output into the same file, whose pages
    are then already there (a fresh page costs more than the copy into it)."""

    def __init__(self, prefix: str, kind: str):
        self.prefix, self.kind, self.n = prefix, kind, 0
        self.free: Dict[str, mmap.mmap] = {}
        self.lent: Dict[str, mmap.mmap] = {}

    #: files kept for reuse at most (the oldest beyond are removed: their memory is freed)
    KEEP = 4

    def returned(self, names) -> None:
        for name in names:
            m = self.lent.pop(name, None)
            if m is not None:
                self.free[name] = m
        while len(self.free) > self.KEEP:
            name = next(iter(self.free))
            self.free.pop(name).close()
            remove(os.path.join(folder(), name))

    def put(self, a: np.ndarray) -> Place:
        need = max(a.nbytes, 1)
        fits = [k for k, m in self.free.items() if need <= len(m) <= 2 * need]
        if fits:
            name = fits[0]
            m = self.free.pop(name)
        else:
            self.n += 1
            name = f"{self.prefix}{self.kind}-{self.n}"
            m = _map(os.path.join(folder(), name), need)
        np.copyto(np.ndarray(a.shape, a.dtype, buffer=m), a, casting="no")
        self.lent[name] = m
        return (name, -1, a.shape, a.dtype.str)


def lease(place: Place, returned: Callable[[str], None]) -> np.ndarray:
    """The array of a ``Leases`` output, mapping its file; ``returned(name)`` is called once
    the array (and every view of it) is gone."""
    name, _, shape, dtype = place
    m = _map(os.path.join(folder(), name), populate=True)
    weakref.finalize(m, returned, name)
    return np.ndarray(shape, np.dtype(dtype), buffer=m)


class Snapshot:
    """The mirrored values of one set of states (module doc): two slots per state."""

    def __init__(self, path: str, specs: Iterable[Tuple[str, Tuple[int, ...], str]],
                 create: bool):
        self.path = path
        self.specs = {name: (tuple(shape), np.dtype(dt)) for name, shape, dt in specs}
        self.slots: Dict[str, list] = {}
        offset = 0
        for name, (shape, dt) in self.specs.items():
            nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
            self.slots[name] = [(offset + i * _up(ALIGN + nbytes)) for i in range(2)]
            offset += 2 * _up(ALIGN + nbytes)
        self.map = _map(path, max(offset, ALIGN) if create else 0)
        if create:
            for name in self.specs:
                for at in self.slots[name]:
                    self._version(at)[0] = -1

    def _version(self, at: int) -> np.ndarray:
        return np.ndarray((1,), np.int64, buffer=self.map, offset=at)

    def _values(self, name: str, at: int) -> np.ndarray:
        shape, dt = self.specs[name]
        return np.ndarray(shape, dt, buffer=self.map, offset=at + ALIGN)

    def write(self, name: str, value, version: int, keep: int) -> None:
        """Store ``value`` as state ``name`` at ``version`` (a number never used before for
        this state set), over the slot that does not hold version ``keep`` (the state's
        value as last acknowledged)."""
        a, b = self.slots[name]
        at = b if self._version(a)[0] == keep else a
        self._version(at)[0] = -1
        np.copyto(self._values(name, at), value, casting="same_kind")
        self._version(at)[0] = version

    def read(self, name: str, version: int) -> np.ndarray:
        """A view of state ``name`` as written at ``version``."""
        for at in self.slots[name]:
            if self._version(at)[0] == version:
                return self._values(name, at)
        raise LookupError(f"state {name} has no value at version {version}")

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:  # a view of it is still alive: unmapped when that goes
            pass
