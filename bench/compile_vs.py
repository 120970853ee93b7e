"""Compile time of this tree against another checkout of rlxjax, side by side in one run.

Each round starts one fresh process per tree (``PYTHONPATH`` pointing at it) that compiles
the flax residual stacks of ``bench/compile_time.py`` forward (``coreml_jit``) and gradient
(``coreml_grad``) and reports the median of its repeats; rounds alternate the trees so that
a noisy machine slows both alike. Prints the median per tree and the ratio this / base.

    git worktree add /tmp/base <commit> && python bench/compile_vs.py --base /tmp/base
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, statistics, sys, time
import jax, jax.numpy as jnp, numpy as np
import rlxjax
sys.path.insert(0, sys.argv[3])  # this tree's bench/: the same model for both trees
from compile_time import Stack

depths, repeats = json.loads(sys.argv[1]), int(sys.argv[2])
out = {}
for depth in depths:
    model = Stack(depth, 64)
    x = np.zeros((8, 64), np.float32)
    params = model.init(jax.random.PRNGKey(0), x)
    loss = lambda p, x: jnp.mean(model.apply(p, x) ** 2)
    for kind, make in (("fwd", lambda: rlxjax.coreml_jit(model.apply)),
                       ("grad", lambda: rlxjax.coreml_grad(loss))):
        make().lower(params, x).compile()  # warm-up: imports, JAX's caches
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            make().lower(params, x).compile()
            ts.append(time.perf_counter() - t0)
        out[f"{kind} x{depth}"] = statistics.median(ts)
print(json.dumps(out))
"""


def run(tree: Path, depths, repeats) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    res = subprocess.run([sys.executable, "-c", CHILD, json.dumps(depths), str(repeats),
                          str(HERE / "bench")],
                         env=env, capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", type=Path, required=True, help="another rlxjax checkout")
    ap.add_argument("--depths", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    trees = {"base": args.base.resolve(), "this": HERE}
    times = {name: [] for name in trees}
    for _ in range(args.rounds):
        for name, tree in trees.items():
            times[name].append(run(tree, args.depths, args.repeats))
    keys = list(times["this"][0])
    print(f"{'workload':<10} {'base s':>9} {'this s':>9} {'this/base':>10}")
    for k in keys:
        b = statistics.median(r[k] for r in times["base"])
        t = statistics.median(r[k] for r in times["this"])
        print(f"{k:<10} {b:>9.4f} {t:>9.4f} {t / b:>10.2f}")
    print(f"medians of {args.rounds} rounds x {args.repeats} repeats, trees alternating; "
          f"base = {trees['base']}")


if __name__ == "__main__":
    main()
