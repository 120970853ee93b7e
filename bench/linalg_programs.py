"""The linear-algebra programs of both formats, this checkout against another one.

For each linalg primitive (and what JAX builds on lu), the Core ML program (MIL, run on
the reference interpreter) and the Core AI program (run on Apple's Linux runtime in this
process): the non-const op count, the ops per loop iteration (the non-const ops of the
innermost ``while`` bodies and conditions, every such loop of the program summed: what one
step of the factorization executes; svd: one round of a sweep), and the median call time. Run::

    PYTHONPATH=$PWD python bench/linalg_programs.py [--before OTHER_CHECKOUT] [repeats]

With ``--before``, the same programs are compiled by ``OTHER_CHECKOUT`` (e.g. a
``git worktree add /tmp/old <commit>``) in a second process, and the calls of the two are
timed in alternation (rounds of a few calls each, median of all), so both columns come
from the same minutes of the same machine. Columns: ``before>after`` of the op count, the
ops per loop iteration, the median ms, after/before, and the largest |result - JAX's|.
"""
from __future__ import annotations

import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

SERVE = "--serve" in sys.argv
if not SERVE and not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import rlxjax  # noqa: E402

N, BATCH = 12, (2,)
PER_ROUND = 3


def _spd(rng, n):
    g = rng.standard_normal(BATCH + (n, n))
    return (g @ np.swapaxes(g, -1, -2) + n * np.eye(n)).astype(np.float32)


def _tri(rng, n, lower):
    a = rng.standard_normal(BATCH + (n, n)) * 0.5 + 2 * np.eye(n)
    return (np.tril(a) if lower else np.triu(a)).astype(np.float32)


def cases():
    """{name: (function, arguments)}: every linalg primitive once, the triangular solve
    with its two loop directions, and the lu / triangular_solve compositions of JAX."""
    rng = np.random.default_rng(0)
    gen = rng.standard_normal(BATCH + (N, N)).astype(np.float32)
    rhs = rng.standard_normal(BATCH + (N, 3)).astype(np.float32)
    tri = lambda **k: (lambda a, b: lax.linalg.triangular_solve(a, b, **k))  # noqa: E731
    dl, d, du = (rng.standard_normal(BATCH + (N,)).astype(np.float32) for _ in range(3))
    dl[..., 0] = du[..., -1] = 0
    return {
        "cholesky": (lambda x: lax.linalg.cholesky_p.bind(x), (_spd(rng, N),)),
        "triangular_solve lower": (tri(left_side=True, lower=True), (_tri(rng, N, True), rhs)),
        "triangular_solve upper,T,right,unit": (
            tri(left_side=False, lower=False, transpose_a=True, unit_diagonal=True),
            (_tri(rng, N, False), np.swapaxes(rhs, -1, -2).copy())),
        "lu": (lax.linalg.lu, (gen,)),
        "lu 12x5": (lax.linalg.lu, (gen[..., :5],)),
        "qr": (lambda x: jnp.linalg.qr(x), (gen,)),
        "qr 12x5 complete": (lambda x: jnp.linalg.qr(x, mode="complete"), (gen[..., :5],)),
        "svd (values)": (lambda x: jnp.linalg.svd(x, compute_uv=False), (gen[..., :7],)),
        "tridiagonal_solve": (lax.linalg.tridiagonal_solve, (dl, d, du, rhs)),
        "solve": (jnp.linalg.solve, (gen, rhs)),
        "slogdet": (lambda x: jnp.linalg.slogdet(x), (gen,)),
    }


FORMATS = ("mlpackage", "aimodel")


# -- op counts ------------------------------------------------------------------------------
def _mil_counts(compiled):
    depths = [r["depth"] for r in compiled.cost_analysis()["ops"] if r["type"] != "const"]
    deepest = max(depths)
    return len(depths), sum(d == deepest for d in depths) if deepest else 0


_AI_OP = re.compile(r"= coreai\.([a-z_0-9.]+)")


def _coreai_counts(compiled):
    """(non-const ops, those in the innermost while regions) from the program's MLIR
    text: the nesting is read off the braces (a line's attribute braces are balanced)."""
    depth, while_depths, total, inside = 0, [], 0, []
    for line in compiled.as_text().splitlines():
        m = _AI_OP.search(line)
        if m and m.group(1) != "constant":
            total += 1
            inside.append(len(while_depths))
        if m and m.group(1) == "while":
            while_depths.append(depth)
        depth += line.count("{") - line.count("}")
        while while_depths and depth <= while_depths[-1]:
            while_depths.pop()
    deepest = max(inside, default=0)
    return total, sum(d == deepest for d in inside) if deepest else 0


# -- calls ----------------------------------------------------------------------------------
class Runner:
    """One compiled program, called from this process."""

    def __init__(self, name, fmt, loop):
        fn, args = cases()[name]
        self.loop = loop
        jit = rlxjax.coreml_jit(fn, format=fmt, **({"backend": "reference"}
                                                   if fmt == "mlpackage" else {}))
        self.compiled = jit.lower(*args).compile()
        self.counts = (_mil_counts if fmt == "mlpackage" else _coreai_counts)(self.compiled)
        self.check = _max_err(self.compiled, fn, args, fmt, self, loop)

    def time(self, k):
        out = []
        for _ in range(k):
            t0 = time.perf_counter()
            self.call()
            out.append(time.perf_counter() - t0)
        return out

    def close(self):
        if getattr(self, "ctx", None) is not None:
            self.loop.run_until_complete(self.ctx.__aexit__(None, None, None))


def _max_err(compiled, fn, args, fmt, runner, loop):
    """Set up ``runner.call`` and return the largest |result − JAX's| of one call."""
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    if fmt == "mlpackage":
        runner.call = lambda: compiled(*args)
        got = jax.tree_util.tree_leaves(runner.call())
    else:
        from coreai.authoring import AIModelAsset
        from coreai.runtime import NDArray

        folder = tempfile.mkdtemp(prefix="linalg_programs_")
        path = compiled.save(os.path.join(folder, "p.aimodel"))
        leaves, tree = jax.tree_util.tree_flatten(tuple(args))
        arrays = compiled._checked_args(leaves, tree)  # noqa: SLF001 - the call's own feeds
        feeds = {s.mil_name: NDArray(np.ascontiguousarray(s.to_feature(a)))
                 for s, a in zip(compiled.input_specs, arrays)}
        runner.ctx = AIModelAsset.load(path).executable()
        model = loop.run_until_complete(runner.ctx.__aenter__())
        f = model.load_function("main")
        runner.call = lambda: loop.run_until_complete(f(feeds))
        runner.call()
        got = jax.tree_util.tree_leaves(compiled(*args))
    return max(float(np.nanmax(np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64)),
                               initial=0.0)) for g, w in zip(got, want))


def serve():
    """The --before side: JSON commands on stdin, one JSON answer a line."""
    loop, runners = asyncio.new_event_loop(), {}
    for line in sys.stdin:
        cmd = json.loads(line)
        key = (cmd["case"], cmd["fmt"])
        if cmd["op"] == "open":
            runners[key] = r = Runner(cmd["case"], cmd["fmt"], loop)
            ans = {"counts": r.counts, "err": r.check}
        elif cmd["op"] == "time":
            ans = {"times": runners[key].time(cmd["k"])}
        else:
            runners.pop(key).close()
            ans = {}
        print(json.dumps(ans), flush=True)


class Remote:
    def __init__(self, checkout):
        env = dict(os.environ, PYTHONPATH=os.path.abspath(checkout))
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
                                  text=True, cwd=os.path.abspath(checkout))

    def ask(self, **cmd):
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"the --before process ended on {cmd}")
        return json.loads(line)


def main(argv):
    before = argv[argv.index("--before") + 1] if "--before" in argv else None
    nums = [a for a in argv if a.isdigit()]
    repeats = int(nums[0]) if nums else 10
    only = argv[argv.index("--only") + 1] if "--only" in argv else None
    remote = Remote(before) if before else None
    loop = asyncio.new_event_loop()
    print(f"n={N}, batch {BATCH}; median of {repeats} rounds x {PER_ROUND} calls (ms), "
          f"{'rounds alternating with ' + before if before else 'this checkout only'}")
    print(f"{'program':<38} {'fmt':<9} {'ops':>9} {'per iter':>9} {'ms':>17} {'ratio':>6} "
          f"{'max|err|':>17}")
    for name in cases():
        if only and only not in name:
            continue
        for fmt in FORMATS:
            r = Runner(name, fmt, loop)
            old = remote.ask(op="open", case=name, fmt=fmt) if remote else None
            mine, theirs = [], []
            for _ in range(repeats):  # rounds of PER_ROUND calls, each side in turn
                mine += r.time(PER_ROUND)
                if remote:
                    theirs += remote.ask(op="time", case=name, fmt=fmt, k=PER_ROUND)["times"]
            r.close()
            t = statistics.median(mine) * 1e3
            if remote:
                remote.ask(op="close", case=name, fmt=fmt)
                t0 = statistics.median(theirs) * 1e3
                print(f"{name:<38} {fmt:<9} {old['counts'][0]:>4}>{r.counts[0]:<4} "
                      f"{old['counts'][1]:>4}>{r.counts[1]:<4} {t0:>8.2f}>{t:<8.2f} "
                      f"{t / t0:>6.2f} {old['err']:>8.1e}>{r.check:<8.1e}", flush=True)
            else:
                print(f"{name:<38} {fmt:<9} {r.counts[0]:>9} {r.counts[1]:>9} {t:>17.2f} "
                      f"{'':>6} {r.check:>17.1e}", flush=True)


if __name__ == "__main__":
    if SERVE:
        serve()
    else:
        main(sys.argv[1:])
