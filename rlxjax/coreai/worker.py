"""Run a Core AI program in a worker process. Apple's runtime ends the process on some bad
programs (SIGILL, SIGABRT, SIGSEGV), so rlxjax never runs it in the user's process; a death
or a hang is an error naming the program, never a dead Python.

``Session`` starts a persistent worker (``python -m rlxjax.coreai.worker --serve ASSET
FUNCTION``) that compiles and loads the asset once and answers calls over its stdin /
stdout (pickled dicts of arrays, length-prefixed), each call bounded in time: a training
loop pays the compile once, not per step.
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

from ..errors import RlxError

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
    """A persistent worker process running ``function`` of the asset at ``path``."""

    def __init__(self, path: str, function: str = "main"):
        self.what = f"{function} of {path}"
        self.proc = subprocess.Popen([sys.executable, "-m", __name__, "--serve", path, function],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=_child_env())

    def _read(self, n: int, deadline: float) -> bytes:
        out = b""
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            while len(out) < n:
                left = deadline - time.monotonic()
                if left <= 0 or not sel.select(left):
                    self.close()
                    raise CoreAIRuntimeError(f"the Core AI runtime did not finish {self.what} "
                                             f"within {TIMEOUT:g} s")
                chunk = os.read(self.proc.stdout.fileno(), n - len(out))
                if not chunk:
                    raise _death(self.proc, self.what)
                out += chunk
        return out

    def __call__(self, feeds: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
        if self.proc.poll() is not None:
            raise _death(self.proc, self.what)
        data = pickle.dumps(feeds, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            self.proc.stdin.write(struct.pack("<Q", len(data)) + data)
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise _death(self.proc, self.what) from None
        deadline = time.monotonic() + TIMEOUT
        (n,) = struct.unpack("<Q", self._read(8, deadline))
        kind, value = pickle.loads(self._read(n, deadline))  # noqa: S301 - our own worker
        if kind != "ok":
            raise CoreAIRuntimeError(f"the Core AI runtime failed running {self.what}: {value}")
        return value

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


def _child_env() -> Dict[str, str]:
    """The environment of a worker: this process's, with the folder holding this rlxjax
    first on PYTHONPATH, so that ``python -m`` runs this rlxjax's worker whatever the
    working directory (another rlxjax may be installed: its worker may speak another
    protocol)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _serve(path: str, function: str) -> int:
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

    serve(path, function, read, write)
    return 0


def _main(argv) -> int:
    if len(argv) != 3 or argv[0] != "--serve":
        print("usage: python -m rlxjax.coreai.worker --serve ASSET FUNCTION", file=sys.stderr)
        return 2
    return _serve(argv[1], argv[2])


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
