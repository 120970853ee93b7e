"""What a call through rlxjax costs on Apple's Core AI runtime, against the same asset run
directly on the runtime in this process (issue 37, deliverable 1).

rlxjax runs Core AI programs in a worker process (the runtime kills its process on some bad
programs), moving arrays through shared memory (rlxjax/coreai/shm.py). Per path and size:

* ``compiled``: ``rlxjax.coreml_jit(f, format="aimodel").lower(x).compile()(x)``, f(x) = 2x + 1
  on a float32 vector of that size;
* ``loaded``: the same program saved and ``rlxjax.load``-ed: ``m(x)``;
* ``step``: an io training step (``coreml_train_step``, sgd) of ``mean((w - x)^2)`` whose
  parameter ``w`` and batch ``x`` have that size: ``step(state, x)`` (parameters in and out);

and ``direct``: the asset rlxjax ran (the very file, the same function and the same input
arrays, captured from rlxjax's call), loaded once in this process with coreai-core's
runtime and called as a synchronous Python program calls it:
``loop.run_until_complete(fn({name: NDArray(a)}))`` on one event loop, each output read back
with ``.numpy()`` (both copy in coreai-core 1.0.0b3, ``NDArray(a)`` at a few hundred MB/s);
and ``in-place``: the same in this process with the worker's own array handling
(rlxjax/coreai/rt_arrays.py: inputs refilled in place, outputs read in place and not copied),
the best one process does: ``/in-pl`` is what the worker process itself costs. All three
are timed round robin in one run, medians of ``repeats`` (fewer at the largest sizes,
where one call takes seconds).

Run: ``python bench/coreai_calls.py [--sizes 4,1K,64K,1M,16M,64M,256M] [--repeats 40]
[--paths compiled,loaded,step]`` (sizes in bytes of one float32 array; K/M = KiB/MiB).
At 256 MiB the run holds some 3 GiB: run it under ``flock /work/wt/.bigjob.lock``.
``main(argv)`` returns the rows (bench/coreai_speed.py calls it).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time

import numpy as np

SIZES = "4,1K,64K,1M,16M,64M,256M"


def _bytes(text: str) -> int:
    unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    return int(text[:-1] if unit > 1 else text) * unit


def _label(n: int) -> str:
    for unit, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= unit:
            return f"{n // unit} {name}"
    return f"{n} B"


class Captured:
    """The asset, function and feeds of rlxjax's latest call to a Core AI worker."""

    def __init__(self):
        from rlxjax.coreai import worker

        self.last = None
        original = worker.Session.__call__

        def call(session, function, feeds, state=None):
            self.last = (session.path, function, dict(feeds))
            return original(session, function, feeds, state)

        worker.Session.__call__ = call


class Direct:
    """One asset's function loaded in this process on coreai-core's runtime."""

    def __init__(self, path: str, function: str):
        import coreai.authoring as ca

        self.loop = asyncio.new_event_loop()
        self._cm = ca.AIModelAsset.load(path).executable()
        model = self.loop.run_until_complete(self._cm.__aenter__())
        self.fn = model.load_function(function)

    def __call__(self, feeds):
        from coreai.runtime import NDArray

        async def go():
            out = await self.fn({k: NDArray(v) for k, v in feeds.items()})
            return {k: v.numpy() for k, v in out.items()}

        return self.loop.run_until_complete(go())

    def close(self):
        self.loop.run_until_complete(self._cm.__aexit__(None, None, None))
        self.loop.close()


class DirectInPlace(Direct):
    """The same asset in this process, its arrays handled as rlxjax's worker handles them
    (rlxjax/coreai/rt_arrays.py: inputs refilled in place, outputs read in place, no copy
    kept): the best one process does, so rlxjax / this is the worker's own cost."""

    def __init__(self, path: str, function: str):
        super().__init__(path, function)
        from rlxjax.coreai import rt_arrays

        self.rt, self.inputs = rt_arrays, rt_arrays.Inputs(self.fn)

    def __call__(self, feeds):
        async def go():
            out = await self.fn({k: self.inputs(k, v) for k, v in feeds.items()})
            return {k: self.rt.to_host(v) for k, v in out.items()}

        return self.loop.run_until_complete(go())


def _paths(n: int, which, tmp: str):
    """{path name: (rlxjax call)} for float32 arrays of ``n`` elements."""
    import jax.numpy as jnp
    import optax

    import rlxjax

    x = np.linspace(-1, 1, n, dtype=np.float32)
    out = {}
    if "compiled" in which or "loaded" in which:
        c = rlxjax.coreml_jit(lambda v: v * 2.0 + 1.0, format="aimodel").lower(x).compile()
        if "compiled" in which:
            out["compiled"] = lambda: c(x)
        if "loaded" in which:
            m = rlxjax.load(c.save(os.path.join(tmp, f"f{n}.aimodel")))
            out["loaded"] = lambda: m(x)
    if "step" in which:
        step = rlxjax.coreml_train_step(lambda w, b: jnp.mean((w - b) ** 2), optax.sgd(0.1),
                                        format="aimodel")
        state = step.init(np.zeros(n, np.float32), x)
        out["step"] = lambda: step(state, x)
    return out


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=SIZES)
    ap.add_argument("--repeats", type=int, default=40)
    ap.add_argument("--paths", default="compiled,loaded,step")
    args = ap.parse_args(argv)
    which = args.paths.split(",")
    if "RLXJAX_COREAI_TIMEOUT" not in os.environ:
        # Core AI's compile of a function is part of its first call: under a heavy load it
        # took over the default 120 s deadline here (2026-12-07), which stopped the run
        from rlxjax.coreai import worker

        worker.set_timeout(900)
    capture = Captured()
    rows = []
    print(f"{'path':<9} {'size':>8} {'direct ms':>10} {'in-place':>9} {'rlxjax ms':>10} "
          f"{'ratio':>6} {'/in-pl':>6}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for size in [_bytes(s) for s in args.sizes.split(",")]:
            n = max(1, size // 4)
            # at least 3 calls each, about 20 s of calls per path at the largest sizes
            reps = max(3, min(args.repeats, int(2 ** 26 // max(n, 1))))
            for name, call in _paths(n, which, tmp).items():
                call()  # compiles and loads in the worker, captures the feeds
                path, function, feeds = capture.last
                direct, inplace = Direct(path, function), DirectInPlace(path, function)
                direct(feeds)
                inplace(feeds)
                t_direct, t_in, t_rlx = [], [], []
                for _ in range(reps):
                    t_direct.append(_time(lambda: direct(feeds)))
                    t_in.append(_time(lambda: inplace(feeds)))
                    t_rlx.append(_time(call))
                direct.close()
                inplace.close()
                d, i, r = (statistics.median(t) * 1e3 for t in (t_direct, t_in, t_rlx))
                rows.append({"path": name, "bytes": 4 * n, "direct_ms": d, "inplace_ms": i,
                             "rlxjax_ms": r, "ratio": r / d, "ratio_inplace": r / i,
                             "repeats": reps})
                print(f"{name:<9} {_label(4 * n):>8} {d:>10.3f} {i:>9.3f} {r:>10.3f} "
                      f"{r / d:>6.2f} {r / i:>6.2f}", flush=True)
    return rows


if __name__ == "__main__":
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    main()
