"""Run a Core AI program in a worker process. Apple's runtime ends the process on some bad
programs (SIGILL, SIGABRT, SIGSEGV), so rlxjax never runs it in the user's process; a death
or a hang is an error naming the program, never a dead Python.

``Session`` starts a persistent worker (``python -m rlxjax.coreai.worker --serve ASSET``)
that compiles and loads the asset once and answers requests over its stdin / stdout
(pickled tuples of arrays, length-prefixed; ca_private.serve), each bounded in time: a
training loop pays the compile once, not per step. The program's states live in the worker
(``WorkerState``), updated in place by the calls, as Core AI's own arrays are.
"""
from __future__ import annotations

import os
import pickle
import selectors
import signal
import struct
import subprocess
import sys
import time
from typing import Dict

import numpy as np

from ..errors import ArgumentError, RlxError

#: seconds one call may take (compile + load + run) before it counts as hung
TIMEOUT = float(os.environ.get("RLXJAX_COREAI_TIMEOUT", "120"))


class CoreAIRuntimeError(RlxError, RuntimeError):
    """Apple's Core AI runtime failed, died or hung running a program (a bug in rlxjax's
    Core AI lowering, or in the runtime: the message names the program and the signal)."""


def _death(proc, what: str) -> "CoreAIRuntimeError":
    rc = proc.wait()
    how = f"died with {signal.Signals(-rc).name}" if rc < 0 else f"failed (exit {rc})"
    err = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    tail = "\n".join(err.strip().splitlines()[-6:])
    return CoreAIRuntimeError(f"the Core AI runtime {how} running {what}:\n{tail}")


class Session:
    """A persistent worker process running the functions of the asset at ``path``."""

    def __init__(self, path: str):
        self.path = path
        self._states = 0
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, "--serve", path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self, n: int, deadline: float, what: str) -> bytes:
        out = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while len(out) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.close()
                    raise CoreAIRuntimeError(f"the Core AI runtime did not finish {what} "
                                             f"within {TIMEOUT:g} s")
                chunk = os.read(self.proc.stdout.fileno(), n - len(out))
                if not chunk:
                    raise _death(self.proc, what)
                out += chunk
        return out

    def request(self, req: tuple, what: str):
        if self.proc.poll() is not None:
            raise _death(self.proc, what)
        data = pickle.dumps(req, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise _death(self.proc, what) from None
        deadline = time.monotonic() + TIMEOUT
        (n,) = struct.unpack("<Q", self._read(8, deadline, what))
        kind, value = pickle.loads(self._read(n, deadline, what))  # noqa: S301 - our worker
        if kind != "ok":
            raise CoreAIRuntimeError(f"the Core AI runtime failed running {what}: {value}")
        return value

    def __call__(self, function: str, feeds: Dict[str, np.ndarray], state=None):
        """Run ``function`` on ``feeds`` (and a ``WorkerState`` of this session)."""
        sid = None
        if state is not None:
            if state.session is not self or not self.alive:
                raise CoreAIRuntimeError(
                    f"this state belongs to {'another' if state.session is not self else 'a dead'}"
                    f" Core AI worker: make it with make_state() of the program it runs with")
            sid = state.id
        return self.request(("call", function, feeds, sid), f"{function} of {self.path}")

    def new_state(self, arrays: Dict[str, np.ndarray]) -> "WorkerState":
        self._states += 1
        self.request(("new_state", self._states, arrays), f"a new state of {self.path}")
        return WorkerState(self, self._states, tuple(arrays))

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class WorkerState:
    """A program's states, kept in the worker: ``read_state(name)`` / ``write_state(name,
    array)`` as Core ML's ``MLState`` offers them."""

    def __init__(self, session: Session, sid: int, names):
        self.session, self.id, self.names = session, sid, tuple(names)

    def _check(self, name: str) -> None:
        if name not in self.names:
            raise RlxError(f"no state {name!r}; the program's states are {list(self.names)}")

    def read_state(self, name: str) -> np.ndarray:
        self._check(name)
        return self.session.request(("read_state", self.id, name), f"state {name}")

    def write_state(self, name: str, value) -> None:
        self._check(name)
        self.session.request(("write_state", self.id, name, np.asarray(value)),
                             f"state {name}")


class CoreAIRunner:
    """Runs ``function`` of an asset in a persistent worker process (worker.Session),
    started on the first call: the asset is compiled and loaded once for every call; its
    states live in the worker (``make_state``)."""

    def __init__(self, asset: str, function: str, state_specs=(), session=None):
        self.asset, self.function = asset, function
        self.state_specs = tuple(state_specs)
        self._session = session

    @property
    def session(self):
        if self._session is None or not self._session.alive:
            self._session = Session(self.asset)
        return self._session

    def run(self, feeds, state=None):
        if (state is None) != (not self.state_specs):
            raise ArgumentError("this Core AI program has states: pass state=make_state()"
                                if self.state_specs else "this Core AI program has no states")
        return self.session(self.function, feeds, state)

    def make_state(self):
        """Zero-filled states in the worker (``read_state`` / ``write_state`` by name)."""
        if not self.state_specs:
            raise ArgumentError("this Core AI program has no states")
        return self.session.new_state({s.mil_name: np.zeros(s.shape, s.dtype)
                                       for s in self.state_specs})


def _serve(path: str) -> int:
    from .ca_private import serve

    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer

    def read():
        head = stdin.read(8)
        if len(head) < 8:
            return None
        (n,) = struct.unpack("<Q", head)
        return pickle.loads(stdin.read(n))  # noqa: S301 - from the rlxjax process that started us

    def write(reply):
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        stdout.write(struct.pack("<Q", len(data)) + data)
        stdout.flush()

    serve(path, read, write)
    return 0


def _main(argv) -> int:
    if len(argv) != 2 or argv[0] != "--serve":
        print("usage: python -m rlxjax.coreai.worker --serve ASSET", file=sys.stderr)
        return 2
    return _serve(argv[1])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
