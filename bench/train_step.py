"""Training-step benchmark: per workload, compile time of ``coreml_train_step``, its
non-const MIL op count, and the reference backend's median step time next to ``jax.jit``
of the same JAX + optax step on this CPU (measured side by side in one run, in
alternation, medians of 200 steps each).
Run: ``python bench/train_step.py``.
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


def main(repeats: int = 200):
    print(f"{'workload':<22} {'compile s':>9} {'MIL ops':>8} {'ref step ms':>12} "
          f"{'jax.jit ms':>11} {'ratio':>7}")
    for name, (loss, params, batch) in sorted(workloads().items()):
        if name == "batchnorm_train":
            continue  # its loss returns (loss, batch_stats): has_aux, not a plain loss
        opt = optax.adam(1e-3)
        step = rlxjax.coreml_train_step(loss, opt, backend="reference")
        state = step.init(params)
        t0 = time.perf_counter()
        state, _ = step(state, *batch)  # compiles
        compile_s = time.perf_counter() - t0
        ops = step._last.cost_analysis()["mil_ops"]

        @jax.jit
        def jstep(p, s):
            g = jax.grad(loss)(p, *batch)
            u, s = opt.update(g, s, p)
            return optax.apply_updates(p, u), s

        jp, js = params, opt.init(params)
        jax.block_until_ready(jstep(jp, js))
        step(state, *batch)  # the reference backend's first run checks every op's outputs
        ref, jit = median_times([lambda: step(state, *batch),
                                 lambda: jax.block_until_ready(jstep(jp, js))], repeats)
        print(f"{name:<22} {compile_s:>9.3f} {ops:>8} {ref * 1e3:>12.2f} {jit * 1e3:>11.3f} "
              f"{ref / jit:>7.1f}")


if __name__ == "__main__":
    main()
