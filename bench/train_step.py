"""Training steps: compile time, MIL ops and step time against ``jax.jit``.

Per workload, compile time of ``coreml_train_step``, its non-const MIL op count, and the
median step time of both reference-backend paths - the oracle (``backend="reference"``, the
interpreter's general path) and the accelerated path (``backend="reference-fast"``,
bit-identical results) - next to ``jax.jit`` of the same JAX + optax step on this CPU
(measured side by side in one run, in alternation, medians of 200 steps each). ``fast/jit``
is the accelerated path against jax.jit, ``ref/fast`` the oracle against the accelerated
path.
Run: ``python bench/train_step.py [repeats]``.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import jax
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import rlxjax  # noqa: E402
from models import workloads  # noqa: E402


def median_times(fns, repeats):
    """Median seconds of each function, timed in alternation (a load spike on this shared
    machine then hits every side alike)."""
    ts = [[] for _ in fns]
    for _ in range(repeats):
        for t, fn in zip(ts, fns):
            t0 = time.perf_counter()
            fn()
            t.append(time.perf_counter() - t0)
    return [statistics.median(t) for t in ts]


def jax_step(loss, opt, batch):
    """The same JAX + optax step under jax.jit: (params, opt_state) -> the next pair."""
    @jax.jit
    def jstep(p, s):
        g = jax.grad(loss)(p, *batch)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    return jstep


def main(repeats: int = 200):
    print(f"{'workload':<22} {'compile s':>9} {'MIL ops':>8} {'ref ms':>8} {'fast ms':>8} "
          f"{'jax.jit ms':>11} {'fast/jit':>8} {'ref/fast':>8}")
    for name, (loss, params, batch) in sorted(workloads().items()):
        if name == "batchnorm_train":
            continue  # its loss returns (loss, batch_stats): has_aux, not a plain loss
        opt = optax.adam(1e-3)
        step = rlxjax.coreml_train_step(loss, opt, backend="reference-fast")
        state = step.init(params)
        t0 = time.perf_counter()
        state, _ = step(state, *batch)  # compiles
        compile_s = time.perf_counter() - t0
        ops = step.last_compiled.cost_analysis()["mil_ops"]
        oracle = rlxjax.coreml_train_step(loss, opt, backend="reference")
        ostate = oracle.init(params)
        ostate, _ = oracle(ostate, *batch)

        jstep = jax_step(loss, opt, batch)
        jp, js = params, opt.init(params)
        jax.block_until_ready(jstep(jp, js))
        step(state, *batch)  # the reference backend's first run checks every op's outputs
        oracle(ostate, *batch)
        ref, fast, jit = median_times([lambda: oracle(ostate, *batch),
                                       lambda: step(state, *batch),
                                       lambda: jax.block_until_ready(jstep(jp, js))], repeats)
        print(f"{name:<22} {compile_s:>9.3f} {ops:>8} {ref * 1e3:>8.2f} {fast * 1e3:>8.2f} "
              f"{jit * 1e3:>11.3f} {fast / jit:>8.1f} {ref / fast:>8.1f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:2]))
