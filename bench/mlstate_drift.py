"""Drift of ``state="mlstate"`` training against fp32 training over 500 steps.

Against JAX + optax (jax.jit on CPU), for a flax MLP + adam and a transformer block + adamw
with clipping and a schedule. Every 100 steps it prints the max relative parameter error
(per leaf max|got - want| / max|want|, the largest over leaves) and |loss - loss_jax|, for:

* ``mlstate``: rlxjax's mlstate program on the reference backend's accelerated path
  (``backend="reference-fast"``, bit-identical to the oracle; state stored exactly in
  three fp16 states per fp32 value, rlxjax/states/mlstate.py),
* ``io``: rlxjax's io-mode program (fp32 inputs/outputs) - the floor set by computing the
  same maths in a different fp32 order,
* ``hi/lo fp16``: the same JAX loop with params and optimizer state rounded through a
  hi/lo fp16 pair (hi = fp16(x), lo = fp16(x - hi)) after every step - what a two-state
  scheme would store; shown to justify the exact encoding.

Also prints the median step time of both rlxjax modes (the codec's cost).
Run: ``python bench/mlstate_drift.py [steps]``.
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import rlxjax  # noqa: E402
from models import workloads  # noqa: E402


def cases(steps):
    w = workloads()
    return {
        "mlp_layernorm + adam": (w["mlp_layernorm"], optax.adam(1e-2)),
        "transformer_block + adamw/clip/schedule": (w["transformer_block"], optax.chain(
            optax.clip_by_global_norm(1.0),
            optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 3e-3, 20, steps),
                        weight_decay=1e-2))),
    }


def hilo(tree):
    def rt(x):
        if x.dtype != jnp.float32:
            return x
        hi = x.astype(jnp.float16)
        lo = (x - hi.astype(jnp.float32)).astype(jnp.float16)
        return hi.astype(jnp.float32) + lo.astype(jnp.float32)
    return jax.tree_util.tree_map(rt, tree)


def jax_run(loss, opt, params, batch, steps, every, roundtrip=False):
    @jax.jit
    def step(p, s):
        l, g = jax.value_and_grad(loss)(p, *batch)
        u, s = opt.update(g, s, p)
        p = optax.apply_updates(p, u)
        if roundtrip:
            p, s = hilo(p), hilo(s)
        return p, s, l

    p, s, losses, snaps = params, opt.init(params), [], {}
    for i in range(1, steps + 1):
        p, s, l = step(p, s)
        losses.append(float(l))
        if i % every == 0:
            snaps[i] = jax.tree_util.tree_map(np.asarray, p)
    return losses, snaps


def rlx_run(mode, loss, opt, params, batch, steps, every):
    # one target for both modes (states need iOS18; io's default iOS17 lowers attention
    # as matmul + softmax, not the fused op, and so rounds differently)
    step = rlxjax.coreml_train_step(loss, opt, state=mode, target="iOS18",
                                    backend="reference-fast")
    st = step.init(params)
    losses, snaps, times = [], {}, []
    for i in range(1, steps + 1):
        t0 = time.perf_counter()
        st, l = step(st, *batch)
        times.append(time.perf_counter() - t0)
        losses.append(float(l))
        if i % every == 0:
            snaps[i] = jax.tree_util.tree_map(np.asarray, step.params(st))
    return losses, snaps, statistics.median(times[1:])


def rel_err(got, want):
    return max(float(np.max(np.abs(g - w)) / max(np.max(np.abs(w)), 1e-30))
               for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)))


def main(steps: int = 500, every: int = 100):
    for name, ((loss, params, batch), opt) in cases(steps).items():
        ref_losses, ref = jax_run(loss, opt, params, batch, steps, every)
        runs = {}
        for mode in ("mlstate", "io"):
            losses, snaps, t = rlx_run(mode, loss, opt, params, batch, steps, every)
            runs[mode] = (losses, snaps)
            print(f"{name}: {mode} median step {t * 1e3:.2f} ms")
        runs["hi/lo fp16"] = jax_run(loss, opt, params, batch, steps, every, roundtrip=True)
        same = runs["mlstate"][0] == runs["io"][0] and all(
            np.array_equal(a.view(np.uint32), b.view(np.uint32))
            for i in runs["io"][1] for a, b in zip(
                jax.tree_util.tree_leaves(runs["mlstate"][1][i]),
                jax.tree_util.tree_leaves(runs["io"][1][i])))
        print(f"{name}: mlstate losses and parameter bits identical to io mode: {same}")
        print(f"{'step':>6} {'loss (jax)':>11} " + " ".join(
            f"{m + ' relerr':>18} {m + ' dloss':>17}" for m in runs))
        for i in range(every, steps + 1, every):
            cols = []
            for m, (losses, snaps) in runs.items():
                cols.append(f"{rel_err(snaps[i], ref[i]):18.2e} "
                            f"{abs(losses[i - 1] - ref_losses[i - 1]):17.2e}")
            print(f"{i:>6} {ref_losses[i - 1]:11.5g} " + " ".join(cols))
        print()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
