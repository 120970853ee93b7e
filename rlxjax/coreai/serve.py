"""The Core AI worker process: ``python -m rlxjax.coreai.serve ASSET PREFIX RFD WFD``.

Loads the asset once, then answers the requests of the rlxjax process that started it
(worker.py ``Session``) until that process closes the request pipe (or dies): each request
and its reply are small pickled tuples on the two pipes ``RFD`` / ``WFD``, carrying the
request's id; arrays travel through shared memory (shm.py): the inputs are read from the
rlxjax process's arena, the outputs written into this process's (``<PREFIX>out<pid>-<n>``),
each big one into a file of its own that the result array maps (shm.Leases).

Requests: ``("call", id, function, input places, state id or None, state version)``,
``("state", id, state id, snapshot path, specs, {name: version})`` (load states of a set from
its snapshot: a new state, a state written by the rlxjax process, or the states of a worker
that died), ``("ping", id)``; a 7th field lists state ids to forget and the big outputs'
files the rlxjax process no longer uses (shm.Leases). Replies:
``(id, "ok", value)`` or ``(id, "error", message)``. After a call that changes states, they
are copied into their snapshot before the reply, so the rlxjax process can always read the
last completed call's states; a call that fails is undone from the snapshot.

Ctrl-C is the rlxjax process's to handle: this process ignores SIGINT (a terminal sends it to
the whole process group), and the rlxjax process restarts it when a call is interrupted.
"""
from __future__ import annotations

import asyncio
import os
import pickle
import signal
import struct
import sys

from . import rt_arrays, shm


def read_message(fd: int):
    """The next pickled message on ``fd`` (None at end of file)."""
    head = _read_exact(fd, 8)
    if head is None:
        return None
    (n,) = struct.unpack("<Q", head)
    body = _read_exact(fd, n)
    return None if body is None else pickle.loads(body)  # noqa: S301 - our own process


def _read_exact(fd: int, n: int):
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def write_message(fd: int, message) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


class Worker:
    def __init__(self, model, prefix: str):
        from . import ca_private

        self.ca, self.model = ca_private, model
        self.feeds = {}      # function name -> rt_arrays.Inputs
        # named with this process's id: a later worker's files never take these names
        self.inputs, self.out = shm.Mapped(), shm.Arena(prefix, f"out{os.getpid()}")
        self.big = shm.Leases(prefix, f"outbig{os.getpid()}")
        self.functions = {}
        self.states = {}     # state id -> {name: runtime array}
        self.snapshots = {}  # state id -> [Snapshot, {name: version of the live state}]

    async def handle(self, req):
        kind = req[0]
        if kind == "call":
            _, _, name, places, sid, version = req[:6]
            return await self.call(name, places, sid, version)
        if kind == "state":
            _, _, sid, path, specs, versions = req[:6]
            if sid not in self.snapshots:
                self.snapshots[sid] = [shm.Snapshot(path, specs, create=False), {}]
            self.load_states(sid, versions)
            return None
        if kind == "ping":
            return None
        raise ValueError(f"unknown request {kind!r}")

    async def call(self, name, places, sid, version):
        fn = self.functions.get(name)
        if fn is None:
            fn = self.functions[name] = self.model.load_function(name)
            self.feeds[name] = rt_arrays.Inputs(fn)
        feed = self.feeds[name]
        args = {k: feed(k, self.inputs.view(p)) for k, p in places.items()}
        if sid is None:
            out = await fn(args)
        else:
            snap, acked = self.snapshots[sid]
            try:
                out = await fn(args, state=self.states[sid])
            except BaseException:
                self.load_states(sid, dict(acked))  # undo a partial update
                raise
            for k, v in self.states[sid].items():
                snap.write(k, rt_arrays.to_host(v), version, acked[k])
            acked.update(dict.fromkeys(acked, version))
        values = {k: rt_arrays.to_host(v) for k, v in out.items()}
        places = self.out.put({k: v for k, v in values.items() if v.nbytes < shm.BIG})
        places.update({k: self.big.put(v) for k, v in values.items() if v.nbytes >= shm.BIG})
        return places

    def load_states(self, sid, versions) -> None:
        """Load states ``{name: version}`` of set ``sid`` from its snapshot."""
        snap, acked = self.snapshots[sid]
        live = self.states.setdefault(sid, {})
        for k, v in versions.items():
            live[k] = self.ca.to_runtime(snap.read(k, v))
            acked[k] = v

    def forget(self, sids) -> None:
        for sid in sids:
            self.states.pop(sid, None)
            entry = self.snapshots.pop(sid, None)
            if entry is not None:
                entry[0].close()


async def _serve(path: str, prefix: str, rfd: int, wfd: int) -> None:
    from . import ca_private

    async with ca_private.executable(path) as model:
        worker = Worker(model, prefix)
        while True:
            req = read_message(rfd)
            if req is None:
                return
            rid = req[1]
            if len(req) > 6 and req[6]:
                forget, returned = req[6]
                worker.forget(forget)
                worker.big.returned(returned)
            try:
                reply = (rid, "ok", await worker.handle(req))
            except Exception as e:  # noqa: BLE001 - reported to the caller, who raises
                reply = (rid, "error", f"{type(e).__name__}: {e}")
            write_message(wfd, reply)


def main(argv) -> int:
    if len(argv) != 4:
        print("usage: python -m rlxjax.coreai.serve ASSET PREFIX RFD WFD", file=sys.stderr)
        return 2
    path, prefix, rfd, wfd = argv[0], argv[1], int(argv[2]), int(argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        asyncio.run(_serve(path, prefix, rfd, wfd))
    except BaseException:
        shm.remove_all(prefix, "out")
        raise
    # the request pipe closed: the rlxjax process closed the session, or died; either way
    # nothing of the session is wanted any more (a restart kills this process instead)
    shm.remove_all(prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
