"""Compile time of coreml_jit against graph size.

Stacks of 1, 8 and 32 flax residual blocks ``x + Dense(gelu(Dense(LayerNorm(x))))`` are
compiled (JAX function -> traced jaxpr -> RLX graph -> Core ML protobuf); the table gives
the median seconds over repeats and the per-block ratio of the 32-block stack against the
1-block one (1.0 means perfectly linear). Run: ``python bench/compile_time.py``.
"""
from __future__ import annotations

import argparse
import statistics
import time

import flax.linen as nn
import jax
import numpy as np

import rlxjax


class Block(nn.Module):
    d: int

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        h = nn.Dense(4 * self.d)(h)
        h = nn.gelu(h)
        return x + nn.Dense(self.d)(h)


class Stack(nn.Module):
    depth: int
    d: int

    @nn.compact
    def __call__(self, x):
        for _ in range(self.depth):
            x = Block(self.d)(x)
        return x


def measure(depth: int, d: int, repeats: int):
    model = Stack(depth, d)
    x = np.zeros((8, d), np.float32)
    params = model.init(jax.random.PRNGKey(0), x)
    times, trace_times = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        lowered = rlxjax.coreml_jit(model.apply).lower(params, x)
        t1 = time.perf_counter()
        compiled = lowered.compile()
        t2 = time.perf_counter()
        times.append(t2 - t0)
        trace_times.append(t1 - t0)
    ops = compiled.cost_analysis()["mil_ops"]
    return statistics.median(times), statistics.median(trace_times), ops


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args(argv)
    measure(1, args.d, 1)  # warm up imports and JAX's caches
    rows = {}
    print(f"{'blocks':>6} {'compile s':>10} {'trace s':>9} {'s/block':>9} {'MIL ops':>8}")
    for depth in args.depths:
        t, tt, ops = measure(depth, args.d, args.repeats)
        rows[depth] = t
        print(f"{depth:>6} {t:>10.4f} {tt:>9.4f} {t / depth:>9.4f} {ops:>8}")
    lo, hi = min(rows), max(rows)
    ratio = (rows[hi] / hi) / (rows[lo] / lo)
    print(f"per-block time, {hi} blocks vs {lo}: {ratio:.2f}x (1.0 = linear; medians of "
          f"{args.repeats})")
    return ratio


if __name__ == "__main__":
    main()
