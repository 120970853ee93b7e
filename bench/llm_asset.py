"""One asset for a language model on the device: ``train_step``, ``prefill`` and ``decode``
over one int8 base and one set of LoRA adapters (``step.save(path, functions=...)``).

For a Llama-style decoder of ``llm_models.py`` (random weights at a published shape, LoRA
rank 8 on q and v, the base frozen with ``compress="int8"``, adam, mlstate), in this one
process:

1. compile the LoRA step and take one step (``step.init`` + ``step(...)``), and save the
   package with ``prefill`` (a prompt padded to the context plus its length: any length
   up to the context, ``llm_cache.py``) and ``decode`` (one token, the KV cache in state);
2. load the package, take one more LoRA step through its ``train_step`` and compare both
   losses with JAX + optax on the same dequantised base (``step.frozen_params()``);
3. generate 16 greedy tokens from the package (``prefill`` then ``decode`` on the state the
   steps wrote) and compare them with ``jax.jit`` greedy generation over the dequantised
   base and JAX's adapters;
4. print the package's bytes against the int8 base's stored bytes (``step.compression``)
   and the decode tokens/s.

    python bench/llm_asset.py --model qwen2.5-0.5b --format aimodel [--layers N] [--ctx 64]

Run 0.5B and larger under ``flock /work/wt/.bigjob.lock``. The last line is a JSON row.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

N_NEW = 16


def _bytes(path) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(model_name: str, fmt: str, layers=None, ctx: int = 64, seq: int = 32,
        prompt_len: int = 5, out_dir=None) -> dict:
    import jax
    import optax

    import llm_cache as lc
    import rlxjax
    from llm_models import build, lora_loss, lora_tree, shape

    s = shape(model_name, layers)
    model, base, tokens = build(model_name, layers=layers, seq=seq)
    tree = lora_tree(base)
    del base
    loss = lora_loss(model)
    opt = optax.adam(1e-3)
    target = "iOS18" if fmt == "mlpackage" else None
    row = {"model": model_name, "layers": s.layers, "format": fmt, "ctx": ctx}
    t0 = time.perf_counter()
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", target=target, format=fmt,
                                    trainable=rlxjax.lora.TRAINABLE, compress="int8")
    st = step.init(tree, tokens)
    row["compile_s"] = time.perf_counter() - t0
    st, v0 = step(st, tokens)
    merge = rlxjax.lora.merge
    cache = lc.empty_cache(s, ctx)
    prompt = tokens[:, :prompt_len]
    padded, n = lc.pad_prompt(prompt, ctx)
    pre, dec = lc.prefill(s, ctx), lc.decode(s, ctx)
    functions = {
        "prefill": (lambda t, c, prompt, length: pre(merge(t), c, prompt, length),
                    cache, padded, n),
        "decode": (lambda t, c, tok: dec(merge(t), c, tok), cache, np.zeros((1, 1), np.int32))}
    with tempfile.TemporaryDirectory(prefix="llm-asset-", dir=out_dir) as tmp:
        t1 = time.perf_counter()
        path = step.save(os.path.join(tmp, f"lm.{fmt}"), functions=functions)
        row["save_s"] = time.perf_counter() - t1
        row["package_bytes"] = _bytes(path)
        report = step.compression
        row["int8_base_bytes"] = report.stored_bytes
        row["fp32_base_bytes"] = report.fp32_bytes
        row["adapter_bytes"] = int(sum(np.asarray(x).nbytes
                                       for x in jax.tree.leaves(tree["lora"])))
        t2 = time.perf_counter()
        m = rlxjax.load(path, flat=True)
        state = m.make_state(step.export_state(st, os.path.join(tmp, "init")))
        row["load_s"] = time.perf_counter() - t2
        v1 = m.function("train_step")(seq=tokens, state=state)["out"]
        got_losses = [float(np.asarray(v0)), float(np.asarray(v1))]
        p, d = m.function("prefill"), m.function("decode")
        t3 = time.perf_counter()
        logits = p(prompt=padded, length=n, state=state)["out"]
        row["prefill_s"] = time.perf_counter() - t3
        got, seen, times = [], [], []
        for _ in range(N_NEW):
            t = np.argmax(logits, -1).astype(np.int32)
            got.append(int(t[0]))
            seen.append(np.asarray(logits))
            t4 = time.perf_counter()
            logits = d(tok=t[:, None], state=state)["out"]
            times.append(time.perf_counter() - t4)
        del m, state
    row["decode_tok_s"] = 1.0 / statistics.median(times)
    # JAX: the same two steps and the same greedy generation on the dequantised base
    frozen = step.frozen_params()["base"]
    del step, st
    adapters, o = tree["lora"], opt.init(tree["lora"])

    @jax.jit
    def jstep(a, o, x):
        lv, g = jax.value_and_grad(lambda a: loss({"base": frozen, "lora": a}, x))(a)
        u, o = opt.update(g, o, a)
        return optax.apply_updates(a, u), o, lv

    want_losses = []
    for _ in range(2):
        adapters, o, lv = jstep(adapters, o, tokens)
        want_losses.append(float(lv))
    want, want_logits = lc.jax_generate(s, ctx, merge({"base": frozen, "lora": adapters}),
                                        prompt, N_NEW)
    row["losses"], row["jax_losses"] = got_losses, want_losses
    row["loss_rel_err"] = max(abs(a - b) / abs(b) for a, b in zip(got_losses, want_losses))
    row["tokens"], row["jax_tokens"] = got, want
    row["tokens_equal"] = got == want
    row["max_logit_diff"] = float(np.abs(np.stack(seen) - want_logits).max())
    row["peak_mib"] = _peak_mib()
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--format", default="aimodel", choices=("aimodel", "mlpackage"))
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--seq", type=int, default=32)
    a = ap.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore")
    r = run(a.model, a.format, a.layers, a.ctx, a.seq)
    mib = 2 ** 20
    print(f"{r['model']} ({r['layers']} layers), {r['format']}, context {r['ctx']}")
    print(f"  compile + first step's init {r['compile_s']:.1f} s, save {r['save_s']:.1f} s, "
          f"load {r['load_s']:.1f} s, peak RSS {r['peak_mib']:.0f} MiB")
    print(f"  package {r['package_bytes'] / mib:.1f} MiB; int8 base {r['int8_base_bytes'] / mib:.1f}"
          f" MiB (fp32 {r['fp32_base_bytes'] / mib:.1f}), adapters {r['adapter_bytes'] / mib:.2f} "
          f"MiB: package / (base + adapters) = "
          f"{r['package_bytes'] / (r['int8_base_bytes'] + r['adapter_bytes']):.3f}")
    print(f"  losses {r['losses']} vs JAX {r['jax_losses']} (rel err {r['loss_rel_err']:.1e})")
    print(f"  {N_NEW} greedy tokens equal JAX's: {r['tokens_equal']} (max logit diff "
          f"{r['max_logit_diff']:.2e}); prefill {r['prefill_s'] * 1e3:.0f} ms, decode "
          f"{r['decode_tok_s']:.2f} tokens/s")
    print(json.dumps(r))
    return 0 if r["tokens_equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
