"""State buffers of a stateful ML Program on the reference backend.

Mirrors coremltools' ``MLState`` (``MLModel.make_state()``): one fp16 buffer per state the
program declares, zero-filled when made, read with ``read_state(name)`` (a copy) and set
with ``write_state(name, array)``. ``ReferenceProgram.run(feeds, state=...)`` binds the
buffers to the program's state inputs; its ``write_state`` ops update them in place, so the
values persist from one run to the next.
"""
from __future__ import annotations

import numpy as np

from rlxjax.errors import RlxError


class ReferenceStateError(RlxError, ValueError):
    """A state name, dtype or shape that does not match the program's declaration."""


class ReferenceState:
    def __init__(self, signatures: dict, owner=None):
        """signatures: state name -> (numpy dtype, shape) as the program declares it."""
        self._owner = owner
        self._shared = []  # other programs allowed to bind these buffers (share_with)
        self._buffers = {}
        for name, (dtype, shape) in signatures.items():
            if shape is None or None in shape:
                raise ReferenceStateError(f"state '{name}' has no fixed shape")
            self._buffers[name] = np.zeros(shape, dtype)

    @property
    def owner(self):
        """The program that made these buffers."""
        return self._owner

    @property
    def names(self):
        return tuple(self._buffers)

    def _buffer(self, name: str) -> np.ndarray:
        if name not in self._buffers:
            raise ReferenceStateError(f"no state named '{name}' (the program has "
                                      f"{list(self._buffers)})")
        return self._buffers[name]

    def read_state(self, name: str) -> np.ndarray:
        return self._buffer(name).copy()

    def write_state(self, name: str, value) -> None:
        buf = self._buffer(name)
        value = np.asarray(value)
        if value.dtype != buf.dtype or value.shape != buf.shape:
            raise ReferenceStateError(
                f"state '{name}' holds {buf.dtype}{list(buf.shape)}; got "
                f"{value.dtype}{list(value.shape)}")
        buf[...] = value

    def share_with(self, program) -> None:
        """Let ``program`` (another function of the same multifunction package) bind these
        buffers too; it must declare exactly the same states."""
        if program is self._owner or any(p is program for p in self._shared):
            return
        theirs = {n: (np.dtype(d), tuple(s)) for n, (d, s) in program.state_signatures.items()}
        ours = {n: (b.dtype, b.shape) for n, b in self._buffers.items()}
        if theirs != ours:
            raise ReferenceStateError(f"cannot share this state with a function declaring "
                                      f"states {theirs}: it holds {ours}")
        self._shared.append(program)

    def bind(self, program) -> dict:
        """The buffers as the program's environment entries (checked to belong to it)."""
        if self._owner is not program and not any(p is program for p in self._shared):
            raise ReferenceStateError("this state was made by another program: use "
                                      "program.make_state()")
        return dict(self._buffers)
