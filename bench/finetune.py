"""Fine-tuning a GPT-2-sized model: LoRA-only against full training steps.

The model is GPT-2 small's shape in flax (12 pre-LN blocks, d 768, 12 heads, vocabulary
50257, 1024 learnt positions, tied input/output embedding: 124.4M parameters), a next-token
cross-entropy on one sequence of 128 tokens (batch 1). LoRA: rank 8 adapters (plain JAX, their
own subtree ``{"base": params, "lora": {...}}``, the loss computes ``W + A·B``) on the
attention (``qkv``, ``out``) and MLP (``fc1``, ``fc2``) kernels of every block (1.2M
trainable parameters); optimizer adam.

Each configuration is compiled in a fresh subprocess (``coreml_train_step(...).init(params,
batch)`` then ``step.save``; io mode, target iOS18) which reports the training program's MIL
op count, the compile time, the save time, the size of the package's ``weight.bin`` and the
process's peak resident memory (``resource.getrusage``: ``ru_maxrss``, which includes
building the 124M-parameter model in JAX). Configurations: LoRA-only with the frozen base
stored as fp32, fp16, int8, int4 (and, with ``--palettize``, palettize8/palettize4), and
full fine-tuning (every parameter trained, fp32). Times are medians over ``--repeats``
subprocesses.

Palettization runs coremltools' k-means per weight and is slow at this size, so it is
opt-in (``--palettize``); without it the script times coremltools' k-means (and its peak
memory) on one 768x768 kernel and scales the time to all the compressed weights (an
estimate, printed as such).

In io mode a full fine-tuning package stores no weights (every parameter is an input), so
its weight.bin is empty. The LoRA loss merges ``W + A·B`` before the matmul (as written in
JAX), so the backward still forms each adapted kernel's full-size gradient (then ``dA``,
``dB`` from it): LoRA saves the optimizer's and the frozen leaves' ops, not those matmuls.

Run: ``python bench/finetune.py`` (``--repeats 3``, ``--palettize``; ``--layers N`` for a
shallower model). ``python bench/results.py --finetune`` adds its table to RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

VOCAB, D, HEADS, CTX, SEQ, RANK = 50257, 768, 12, 1024, 128, 8
ADAPTED = ("qkv", "out", "fc1", "fc2")


def build(layers):
    """(loss, params, batch) of the LoRA model; ``params = {"base", "lora"}``."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax.traverse_util import flatten_dict, unflatten_dict

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            t, hd = x.shape[1], D // HEADS
            h = nn.LayerNorm()(x)
            q, k, v = jnp.split(nn.Dense(3 * D, name="qkv")(h).reshape(-1, t, 3 * HEADS, hd),
                                3, axis=2)
            att = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(hd)
            att = jnp.where(np.tril(np.ones((t, t), bool)), att, -1e9)
            y = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(att, -1), v).reshape(-1, t, D)
            x = x + nn.Dense(D, name="out")(y)
            h = nn.LayerNorm()(x)
            return x + nn.Dense(D, name="fc2")(nn.gelu(nn.Dense(4 * D, name="fc1")(h)))

    class GPT(nn.Module):
        @nn.compact
        def __call__(self, tokens):
            emb = nn.Embed(VOCAB, D, name="wte")
            pos = self.param("wpe", nn.initializers.normal(0.01), (CTX, D))
            x = emb(tokens) + pos[:tokens.shape[1]]
            for i in range(layers):
                x = Block(name=f"h{i}")(x)
            return emb.attend(nn.LayerNorm()(x))   # tied output embedding, as GPT-2

    model = GPT()
    tokens = np.random.default_rng(0).integers(0, VOCAB, (1, SEQ + 1)).astype(np.int32)
    base = jax.tree.map(np.asarray, jax.jit(model.init)(jax.random.PRNGKey(0), tokens[:, :-1]))
    rng = np.random.default_rng(1)
    lora = {}
    for path, w in flatten_dict(base["params"]).items():
        if path[-1] == "kernel" and path[-2] in ADAPTED:
            lora["_".join(path[:-1])] = {
                "a": (rng.standard_normal((w.shape[0], RANK)) / np.sqrt(w.shape[0]))
                .astype(np.float32),
                "b": np.zeros((RANK, w.shape[1]), np.float32)}

    def merged(p):
        flat = flatten_dict(p["base"]["params"])
        for path in flat:
            name = "_".join(path[:-1])
            if path[-1] == "kernel" and name in p["lora"]:
                flat[path] = flat[path] + p["lora"][name]["a"] @ p["lora"][name]["b"]
        return {"params": unflatten_dict(flat)}

    def loss(p, seq):
        logits = model.apply(merged(p), seq[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, seq[:, 1:]).mean()

    return loss, {"base": base, "lora": lora}, tokens


def child(cfg):
    """One configuration, in this (fresh) process; prints a JSON row."""
    import jax
    import numpy as np
    import optax

    import rlxjax

    loss, params, tokens = build(cfg["layers"])
    if cfg["mode"] == "lora":
        kw = dict(trainable={"base": False, "lora": True}, compress=cfg["compress"])
    else:
        kw = {}
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-4), target="iOS18",
                                    backend="reference", **kw)
    t0 = time.perf_counter()
    step.init(params, tokens)
    compile_s = time.perf_counter() - t0
    hist = step.last_compiled.op_histogram()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        path = step.save(os.path.join(tmp, "t.mlpackage"))
        save_s = time.perf_counter() - t0
        size = os.path.getsize(os.path.join(path, "Data", "com.apple.CoreML", "weights",
                                            "weight.bin"))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)
    n = lambda tree: int(sum(np.size(x) for x in jax.tree.leaves(tree)))  # noqa: E731
    trained = n(params["lora"]) if cfg["mode"] == "lora" else n(params)
    print(json.dumps(dict(cfg, ops=sum(hist.values()), matmul=hist.get("matmul", 0),
                          compile_s=compile_s, save_s=save_s, weight_bytes=size,
                          maxrss_mb=rss, params=n(params["base"]), trained=trained)))


def palettize_child(nbits):
    """coremltools' k-means (per tensor, kmeans1d) on one 768x768 kernel in this process:
    prints seconds and peak RSS."""
    import numpy as np

    from rlxjax.coreml import ct_private

    w = (np.random.default_rng(0).standard_normal((D, D)) * 0.02).astype(np.float32)
    t0 = time.perf_counter()
    ct_private.kmeans_palettize(w, nbits)
    s = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"s": s, "maxrss_mb": rss}))


def palettize_estimate(layers, timeout):
    """k-means time and memory on one 768x768 kernel (fresh subprocess each), and the time
    scaled linearly to every weight the schemes compress (rank >= 2 weights of the base)."""
    n_compressed = layers * 12 * D * D + VOCAB * D + CTX * D
    out = {}
    for nbits in (8, 4):
        p = subprocess.run([sys.executable, __file__, "--palettize-child", str(nbits)],
                           capture_output=True, text=True, timeout=timeout)
        rows = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if rows:
            r = json.loads(rows[-1])
            out[f"palettize{nbits}"] = (r["s"], r["s"] * n_compressed / (D * D),
                                        r["maxrss_mb"])
    return out


def run(cfg, timeout):
    p = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)],
                       capture_output=True, text=True, timeout=timeout,
                       env=dict(os.environ, TQDM_DISABLE="1"))
    rows = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not rows:
        return dict(cfg, error=(p.stderr.strip().splitlines() or ["?"])[-1])
    return json.loads(rows[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=1, help="subprocesses per configuration")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--palettize", action="store_true",
                    help="also compile the palettize8/4 packages (slow: k-means per weight)")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per subprocess")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--palettize-child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(json.loads(args.child))
    if args.palettize_child:
        return palettize_child(args.palettize_child)
    schemes = [None, "fp16", "int8", "int4"] + (["palettize8", "palettize4"]
                                                if args.palettize else [])
    configs = [dict(mode="lora", compress=s, layers=args.layers) for s in schemes]
    configs.append(dict(mode="full", compress=None, layers=args.layers))
    try:
        load = "%.1f %.1f %.1f" % os.getloadavg()
    except OSError:
        load = "?"
    print(f"GPT-2-shaped model: {args.layers} layers, d {D}, {HEADS} heads, vocab {VOCAB}, "
          f"seq {SEQ}, batch 1; LoRA rank {RANK} on {', '.join(ADAPTED)}; adam; "
          f"medians of {args.repeats} fresh subprocess(es); load average {load}")
    print()
    print("| configuration | base params | trained params | MIL ops | matmul | compile s "
          "| save s | weight.bin MB | x fp32 LoRA | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    ref = None
    for cfg in configs:
        reps = [run(cfg, args.timeout) for _ in range(args.repeats)]
        label = (f"LoRA, base {cfg['compress'] or 'fp32'}" if cfg["mode"] == "lora"
                 else "full fine-tuning, fp32")
        ok = [r for r in reps if "error" not in r]
        if not ok:
            print(f"| {label} | failed: {reps[0]['error']} |||||||||")
            continue
        r = ok[0]
        med = lambda k: statistics.median(x[k] for x in ok)  # noqa: E731
        if ref is None and cfg["mode"] == "lora":
            ref = r["weight_bytes"]
        size = (f"{r['weight_bytes'] / 1e6:.1f} | {r['weight_bytes'] / ref:.3f}"
                if cfg["mode"] == "lora" else "0 (params are inputs) | -")
        print(f"| {label} | {r['params']} | {r['trained']} | {r['ops']} | {r['matmul']} | "
              f"{med('compile_s'):.1f} | {med('save_s'):.1f} | {size} | "
              f"{med('maxrss_mb'):.0f} |", flush=True)
    if not args.palettize:
        print()
        print("palettize (not compiled; --palettize compiles it): coremltools' k-means "
              "(per tensor, kmeans1d) on one 768x768 kernel in a fresh process, and its time "
              "scaled linearly to every compressed weight of the model (an estimate; the "
              "largest, the 50257x768 embedding, is 65x that kernel)")
        for name, (one, total, rss) in palettize_estimate(args.layers, args.timeout).items():
            print(f"  {name}: {one:.1f} s and peak RSS {rss:.0f} MB for one 768x768 kernel "
                  f"-> ~{total / 60:.0f} min for the model")
    return 0


if __name__ == "__main__":
    sys.exit(main())
