"""Decode with the KV cache in device state: step time and error against the cache as input
and output.

A flax causal LM (tests/models.py ``KVLM``: ``nn.MultiHeadDotProductAttention(decode=True)``)
generates greedily after a 4-token prompt. Each decode step is compiled three ways, side by
side in one run: ``io`` (``coreml_jit(decode)``: the cache is an input and an output of every
call, as an app without states would feed it back), ``state exact`` (``coreml_jit(decode,
state="cache")``: the cache in Core ML states, each fp32 value exactly in three fp16 pieces)
and ``state fp16`` (``state_precision="fp16"``: one rounded fp16 piece). Printed per mode:
MIL ops of the decode program, the median decode step on the reference backends, the
ratio to io, and the largest logit difference to JAX over the generated tokens.

    python bench/kv_cache.py [--tokens 16] [--width 32]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import rlxjax  # noqa: E402
from models import KVLM, kv_lm_decode, kv_lm_init, kv_lm_prefill  # noqa: E402

PROMPT = np.array([[3, 7, 1, 4]], np.int32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--width", type=int, default=32)
    a = ap.parse_args()
    model, decoder = KVLM(width=a.width), KVLM(width=a.width, decode=True)
    params, cache = kv_lm_init(model, decoder)

    def decode(params, cache, tok):
        return kv_lm_decode(decoder, params, cache, tok)

    logits, c = jax.jit(lambda p, c, q: kv_lm_prefill(decoder, p, c, q))(params, cache, PROMPT)
    want, toks = [], []
    for _ in range(a.tokens):
        t = jnp.argmax(logits, -1).astype(jnp.int32)[:, None]
        toks.append(np.asarray(t))
        logits, c = jax.jit(decode)(params, c, t)
        want.append(np.asarray(logits))
    _, c_prompt = jax.jit(lambda p, c, q: kv_lm_prefill(decoder, p, c, q))(params, cache,
                                                                           PROMPT)
    n_cache = sum(x.size for x in jax.tree_util.tree_leaves(cache))
    print(f"KVLM width {a.width}: {sum(x.size for x in jax.tree_util.tree_leaves(params))} "
          f"parameters, cache {n_cache} values; {a.tokens} decode steps after "
          f"{PROMPT.shape[1]} prompt tokens (teacher-forced with JAX's greedy tokens)")
    tok0 = np.zeros((1, 1), np.int32)
    rows, base = [], {}
    for mode in ("io", "state exact", "state fp16"):
        for backend in ("reference", "reference-fast"):
            if mode == "io":
                f = rlxjax.coreml_jit(decode, target="iOS18", backend=backend)
                prog = f.lower(params, cache, tok0).compile()
                cc = c_prompt

                def run(t):
                    nonlocal cc
                    out, cc = prog(params, cc, t)
                    return out
            else:
                f = rlxjax.coreml_jit(decode, state="cache", backend=backend,
                                      state_precision=mode.split()[1])
                prog = f.lower(params, cache, tok0).compile()
                st = prog.make_state(c_prompt)

                def run(t):
                    return prog(params, t, state=st)
            times, err = [], 0.0
            for t, w in zip(toks, want):
                t0 = time.perf_counter()
                out = run(t)
                times.append(time.perf_counter() - t0)
                err = max(err, float(np.abs(np.asarray(out) - w).max()))
            med = float(np.median(times))
            base.setdefault(backend, med)
            ops = sum(prog.op_histogram().values())
            rows.append((mode, backend, ops, med, med / base[backend], err))
    print(f"{'mode':12s} {'backend':15s} {'MIL ops':>8s} {'step ms':>8s} {'x io':>6s} "
          f"{'max |logit - JAX|':>18s}")
    for mode, backend, ops, med, ratio, err in rows:
        print(f"{mode:12s} {backend:15s} {ops:8d} {1e3 * med:8.2f} {ratio:6.2f} {err:18.2e}")


if __name__ == "__main__":
    main()
