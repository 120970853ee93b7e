"""Run a Core AI program in a worker process. Apple's runtime ends the process on some bad
programs (SIGILL, SIGABRT, SIGSEGV), so rlxjax never runs it in the user's process; a death
or a hang is an error naming the program, never a dead Python.

``Session`` starts a persistent worker (``python -m rlxjax.coreai.serve``, serve.py) that
compiles and loads the asset once: a training loop pays the compile once, not per step.
Requests and replies are small messages on two pipes, each carrying the request's id; arrays
go through shared memory (shm.py). The session cannot get out of step with its worker:

* every request has a deadline (``set_timeout``; ``RLXJAX_COREAI_TIMEOUT``, seconds): past
  it the worker is stopped and the error names the function;
* a request cut short by anything - Ctrl-C while the worker computes, or while a big array
  is copied, the deadline, a death - stops the worker, and the next request starts a new
  one, so no reply is ever read by another call (a reply's id is checked too);
* the program's states live in the worker (``WorkerState``), updated in place by the calls,
  and are mirrored in shared memory after every call that changes them (shm.Snapshot): a new
  worker gets them back as they were after the last completed call, and ``read_state``
  reads them there, even after a death.
"""
from __future__ import annotations

import atexit
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from typing import Dict

import numpy as np

from ..errors import ArgumentError, RlxError
from . import shm
from .serve import write_message

#: seconds one call may take (Core AI's compile and load of a function included, on its first
#: call) before it counts as hung
TIMEOUT = float(os.environ.get("RLXJAX_COREAI_TIMEOUT", "120"))


def set_timeout(seconds: float) -> None:
    """The deadline of every later Core AI call, in seconds (default 120, or the environment
    variable ``RLXJAX_COREAI_TIMEOUT``): a call not finished by then is an error naming the
    function, and its worker is restarted."""
    global TIMEOUT
    if not seconds > 0:
        raise ArgumentError(f"set_timeout({seconds!r}): the deadline is a positive number "
                            "of seconds")
    TIMEOUT = float(seconds)


class CoreAIRuntimeError(RlxError, RuntimeError):
    """Apple's Core AI runtime failed, died or hung running a program (a bug in rlxjax's
    Core AI lowering, or in the runtime: the message names the program and the signal)."""


class _Stale(Exception):
    pass


#: the open sessions, closed when Python exits (their shared memory removed, even where a
#: session's worker died and cannot clean up after it)
_OPEN: "weakref.WeakSet[Session]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for session in list(_OPEN):
        session.close()


class Session:
    """A persistent worker process running the functions of the asset at ``path``
    (started again, with its states, after it died or was stopped)."""

    def __init__(self, path: str):
        self.path = path
        self.prefix = shm.new_prefix()
        self._in = shm.Arena(self.prefix, "in")
        self._rid, self._sids = 0, 0
        self._states: "weakref.WeakValueDictionary[int, WorkerState]" = \
            weakref.WeakValueDictionary()
        self._forget: list = []
        self._returned: list = []   # big outputs' files no result maps any more
        self._closed, self._dirty = False, False
        self.proc = None
        _OPEN.add(self)
        self._start()

    # -- the process ------------------------------------------------------------------------
    def _start(self) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        self._log = tempfile.TemporaryFile(prefix="rlxjax-coreai-")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rlxjax.coreai.serve", self.path, self.prefix,
                 str(req_r), str(rep_w)], pass_fds=(req_r, rep_w), stdin=subprocess.DEVNULL,
                stdout=self._log, stderr=self._log, env=_child_env())
        finally:
            os.close(req_r)
            os.close(rep_w)
        self._wfd, self._rfd = req_w, rep_r
        self._poll = select.poll()
        self._poll.register(rep_r, select.POLLIN)
        self._out = shm.Mapped()
        self._loaded: set = set()   # the state ids this worker holds
        self._dirty = False

    def _stop(self) -> None:
        """Stop the worker now (SIGKILL: its state is unknown) and drop what it made."""
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for fd in (self._wfd, self._rfd):
                if fd is not None:
                    os.close(fd)
            self._wfd = self._rfd = None
            self._log.close()
        shm.remove_all(self.prefix, "out")

    @property
    def alive(self) -> bool:
        """Whether this session can run calls (not closed); its worker may be restarted."""
        return not self._closed

    def _death(self, what: str) -> "CoreAIRuntimeError":
        rc = self.proc.wait()
        how = f"died with {signal.Signals(-rc).name}" if rc < 0 else f"failed (exit {rc})"
        self._log.seek(0)
        err = self._log.read()[-64 << 10:].decode("utf-8", "replace")
        tail = "\n".join(err.strip().splitlines()[-6:])
        return CoreAIRuntimeError(f"the Core AI runtime {how} running {what}:\n{tail}")

    # -- requests ----------------------------------------------------------------------------
    def _ready(self) -> None:
        if self._closed:
            raise CoreAIRuntimeError(f"this Core AI session of {self.path} was closed")
        if self._dirty or self.proc is None or self.proc.poll() is not None:
            self._stop()
            self._start()

    def _exchange(self, req: tuple, what: str, done: bool = True):
        """Send ``req`` (its kind, then its fields) with a fresh id; the reply's value. With
        ``done=False`` the worker still counts as cut short until the caller says otherwise
        (``self._dirty = False``) once it has taken the reply in."""
        self._rid += 1
        rid = self._rid
        forget, self._forget = self._forget, []
        returned = self._returned[:]   # the same list: the finalizers append to it
        del self._returned[:len(returned)]
        self._dirty = True
        try:
            write_message(self._wfd, (req[0], rid) + tuple(req[1:5]) +
                          (None,) * (5 - len(req)) + ((forget, returned),) + tuple(req[5:]))
            deadline = time.monotonic() + TIMEOUT
            while True:
                got, status, value = self._read_message(deadline, what)
                if got == rid:
                    break
                if got > rid:
                    raise _Stale(f"a reply to request {got} while waiting for {rid}")
        except BrokenPipeError:
            raise self._stopped(self._death(what)) from None
        except _Stale as e:
            raise self._stopped(CoreAIRuntimeError(f"internal: the Core AI worker is out of "
                                                   f"step ({e}); it was restarted")) from None
        except BaseException:
            self._stop()   # Ctrl-C, the deadline, a death: the next request starts afresh
            raise
        self._dirty = not done
        if status != "ok":
            self._dirty = False
            raise CoreAIRuntimeError(f"the Core AI runtime failed running {what}: {value}")
        return value

    def _stopped(self, error: Exception) -> Exception:
        self._stop()
        return error

    def _read_message(self, deadline: float, what: str):
        import pickle
        import struct

        head = self._read(8, deadline, what)
        (n,) = struct.unpack("<Q", head)
        return pickle.loads(self._read(n, deadline, what))  # noqa: S301 - our worker

    def _read(self, n: int, deadline: float, what: str) -> bytes:
        parts, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not self._poll.poll(left * 1e3):
                raise CoreAIRuntimeError(
                    f"the Core AI runtime did not finish {what} within {TIMEOUT:g} s (the "
                    "deadline of a call: rlxjax.coreai.worker.set_timeout(seconds) or "
                    "RLXJAX_COREAI_TIMEOUT); its worker was stopped and the next call "
                    "starts a new one")
            chunk = os.read(self._rfd, n - got)
            if not chunk:
                raise self._death(what)
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts) if len(parts) != 1 else parts[0]

    def request(self, req: tuple, what: str):
        self._ready()
        self._load_states()
        return self._exchange(req, what)

    def ping(self, what: str = "loading the asset") -> None:
        """Wait until the worker has loaded the asset (Core AI's compile)."""
        self.request(("ping",), what)

    def __call__(self, function: str, feeds: Dict[str, np.ndarray], state=None):
        """Run ``function`` on ``feeds`` (and a ``WorkerState`` of this session)."""
        what = f"{function} of {self.path}"
        if state is not None and state.session is not self:
            raise CoreAIRuntimeError("this state belongs to another Core AI worker: make it "
                                     "with make_state() of the program it runs with")
        self._ready()
        self._load_states()
        places = self._in.put({k: np.asarray(v) for k, v in feeds.items()})
        if state is None:
            value = self._exchange(("call", function, places, None, None), what)
            return {k: shm.lease(p, self._returned.append) if p[1] < 0 else
                    np.array(self._out.view(p)) for k, p in value.items()}
        # until the outputs are in hand and the state's version moved on, a Ctrl-C leaves the
        # worker marked cut short: the next request restarts it from the states as of the
        # last completed call, undoing this call's change (the caller saw it fail)
        version = state.next_version()
        value = self._exchange(("call", function, places, state.id, version), what, done=False)
        out = {k: shm.lease(p, self._returned.append) if p[1] < 0 else
               np.array(self._out.view(p)) for k, p in value.items()}
        state.acked = dict.fromkeys(state.acked, version)
        state.version += 1
        self._dirty = False
        return out

    # -- states ------------------------------------------------------------------------------
    def new_state(self, arrays: Dict[str, np.ndarray]) -> "WorkerState":
        self._sids += 1
        state = WorkerState(self, self._sids, arrays)
        self._states[state.id] = state
        self._ready()
        self._load_states()  # this one among them
        return state

    def _load_states(self) -> None:
        """Give a new worker the states of the one before, as of their last completed call."""
        for sid in sorted(set(self._states.keys()) - self._loaded):
            st = self._states.get(sid)
            if st is not None:
                self._exchange(("state", sid, st.snapshot.path, st.specs, dict(st.acked)),
                               f"the states of {self.path}")
                self._loaded.add(sid)

    def _drop_state(self, sid: int) -> None:
        self._forget.append(sid)
        self._loaded.discard(sid)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        proc = self.proc
        if proc is not None and proc.poll() is None and not self._dirty:
            try:
                os.close(self._wfd)  # the worker ends at the end of its requests
                self._wfd = None
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._stop()
        self._in.close()
        shm.remove_all(self.prefix)

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


def _release(session_ref, sid: int, snapshot) -> None:
    session = session_ref()
    if session is not None:
        session._drop_state(sid)  # noqa: SLF001
    snapshot.close()
    shm.remove(snapshot.path)


class WorkerState:
    """A program's states, kept in the worker: ``read_state(name)`` / ``write_state(name,
    array)`` as Core ML's ``MLState`` offers them. Their values as of the last completed
    call or write are mirrored in shared memory (shm.Snapshot: ``acked`` holds each
    state's version there), which ``read_state`` reads, even once the worker has died.
    ``version`` counts the completed calls and writes that changed them."""

    def __init__(self, session: Session, sid: int, arrays: Dict[str, np.ndarray]):
        self.session, self.id = session, sid
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        self.names = tuple(arrays)
        self.specs = tuple((k, tuple(a.shape), a.dtype.name) for k, a in arrays.items())
        path = os.path.join(shm.folder(), f"{session.prefix}state-{sid}")
        self.snapshot = shm.Snapshot(path, self.specs, create=True)
        for k, a in arrays.items():
            self.snapshot.write(k, a, 0, -1)
        self.acked = dict.fromkeys(self.names, 0)
        self.version, self._used = 0, 0
        weakref.finalize(self, _release, weakref.ref(session), sid, self.snapshot)

    def next_version(self) -> int:
        """A snapshot version not used before (a change that did not complete keeps its)."""
        self._used += 1
        return self._used

    def _check(self, name: str) -> None:
        if name not in self.names:
            raise RlxError(f"no state {name!r}; the program's states are {list(self.names)}")

    def read_state(self, name: str) -> np.ndarray:
        self._check(name)
        return np.array(self.snapshot.read(name, self.acked[name]))

    def write_state(self, name: str, value) -> None:
        self._check(name)
        shape, dtype = self.snapshot.specs[name]
        value = np.asarray(value)
        if value.shape != shape:
            raise ArgumentError(f"write_state({name!r}, ...): the state has shape "
                                f"{shape}, the value {value.shape}")
        version = self.next_version()
        self.snapshot.write(name, value, version, self.acked[name])
        self.session.request(("state", self.id, self.snapshot.path, self.specs,
                              {name: version}), f"state {name}")
        self.acked[name] = version
        self.version += 1


class CoreAIRunner:
    """Runs ``function`` of an asset in a persistent worker process (``Session``),
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
