"""Decode tokens/s on the Core AI runtime: rlxjax's one asset (``prefill`` + ``decode``, the
KV cache in state) against coreai-torch's program of the same decoder and ``jax.jit``.

Two decoders of ``llm_cache.py`` (Llama-style blocks: RMSNorm, RoPE, grouped-query
attention, SwiGLU, tied embedding; random weights, std 0.02): ``4L-d256`` at the size of
``coreai_speed.py``'s GPT-2-style model (4 layers, d 256, 4 heads, vocab 8192) and
``smollm2-135m`` (30 layers, d 576, vocab 49152), context 128, weights fp32 constants in
every program. Per model, side by side in one process:

- ``rlxjax``: ``rlxjax.save_functions`` of ``prefill`` and ``decode`` (``coreml_jit(...,
  state=...)``, the cache and its position in Core AI states), ``decode`` called directly
  on the Core AI runtime (``coreai_direct.py``: what an app pays);
- ``rlxjax (worker)``: the same asset through ``rlxjax.load`` (the worker process);
- ``coreai-torch``: the same decoder written in torch (``decode_torch.py``), its cache in
  buffers updated in place, which coreai-torch makes Core AI states, converted in the
  separate torch environment (``/work/.venv-torch``) and called directly on the runtime;
- ``jax.jit``: the same ``decode`` function on this CPU.

Each decodes greedily from an empty cache (position 0 on); the calls are timed round robin
(rlxjax, coreai-torch alternately, token by token), medians. Every side's tokens are
checked against ``jax.jit``'s. Prints tokens/s and the ratios.

    python bench/decode_speed.py [--tokens 32] [--only 4L-d256] [--profile]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))

TORCH_PY = os.environ.get("RLXJAX_TORCH_PYTHON", "/work/.venv-torch/bin/python")
CTX = 128


def _models():
    from llm_models import Shape, shape

    return {"4L-d256": Shape(vocab=8192, d=256, layers=4, heads=4, kv_heads=4, ffn=1024),
            "smollm2-135m": shape("smollm2-135m")}


def _params(s, seed=0):
    import jax

    from llm_models import Decoder

    shapes = jax.eval_shape(lambda: Decoder(s).init(jax.random.PRNGKey(seed),
                                                    np.zeros((1, 4), np.int32)))
    rng = np.random.default_rng(seed + 1)
    return jax.tree.map(lambda x: np.ones(x.shape, np.float32) if len(x.shape) == 1 else
                        (0.02 * rng.standard_normal(x.shape)).astype(np.float32), shapes)


def _rlxjax_asset(s, params, path):
    import rlxjax
    import llm_cache as lc

    cache = lc.empty_cache(s, CTX)
    pre, dec = lc.prefill(s, CTX), lc.decode(s, CTX)
    padded, n = lc.pad_prompt(np.zeros((1, 1), np.int32), CTX)
    kw = dict(state=0, format="aimodel")
    t0 = time.perf_counter()
    pc = rlxjax.coreml_jit(lambda c, prompt, length: pre(params, c, prompt, length),
                           **kw).lower(cache, padded, n).compile()
    dc = rlxjax.coreml_jit(lambda c, tok: dec(params, c, tok), **kw).lower(
        cache, np.zeros((1, 1), np.int32)).compile()
    path = rlxjax.save_functions(path, {"prefill": pc, "decode": dc}, default="decode")
    return path, time.perf_counter() - t0, dc.op_histogram()


def _torch_asset(s, params, tmp):
    import jax

    flat = {"/".join(str(getattr(k, "key", k)) for k in p): np.asarray(v)
            for p, v in jax.tree_util.tree_flatten_with_path(params)[0]}
    w, sj, out = (os.path.join(tmp, n) for n in ("w.npz", "shape.json", "torch.aimodel"))
    np.savez(w, **flat)
    with open(sj, "w") as f:
        json.dump(dict(vocab=s.vocab, d=s.d, layers=s.layers, heads=s.heads,
                       kv_heads=s.kv_heads, ffn=s.ffn, hd=s.hd, rope_theta=s.rope_theta,
                       eps=s.eps, ctx=CTX), f)
    r = subprocess.run([TORCH_PY, os.path.join(HERE, "decode_torch.py"), w, sj, out],
                       capture_output=True, text=True, timeout=3600)
    if r.returncode:
        raise RuntimeError(f"coreai-torch conversion failed:\n{r.stderr[-3000:]}")
    return out, json.loads(r.stdout.strip().splitlines()[-1])["convert_s"]


async def _round_robin(ours, theirs, s, n):
    """Decode ``n`` tokens greedily on both assets, call by call alternately."""
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray

    from coreai_direct import _states

    st_ours = {k: NDArray(v) for k, v in _states(ours, "decode").items()}
    async with AIModelAsset.load(ours).executable() as a, \
            AIModelAsset.load(theirs).executable() as b:
        da, db = a.load_function("decode"), b.load_function("main")
        st_theirs = {name: NDArray(np.zeros((s.kv_heads, CTX, s.hd), np.float32))
                     for name in db.desc.state_names}
        ta, tb, ka, kb = [], [], [], []
        tok_a = tok_b = np.zeros((1, 1), np.int32)
        for i in range(n):
            t0 = time.perf_counter()
            out = await da({da.desc.input_names[0]: NDArray(tok_a)}, state=st_ours)
            ta.append(time.perf_counter() - t0)
            la = np.array(next(iter(out.values())).numpy())
            t0 = time.perf_counter()
            out = await db({"tok": NDArray(tok_b), "pos": NDArray(np.array([i], np.int32))},
                           state=st_theirs)
            tb.append(time.perf_counter() - t0)
            lb = np.array(out["logits"].numpy())
            tok_a = np.argmax(la.reshape(-1)).astype(np.int32).reshape(1, 1)
            tok_b = np.argmax(lb.reshape(-1)).astype(np.int32).reshape(1, 1)
            ka.append(int(tok_a[0, 0]))
            kb.append(int(tok_b[0, 0]))
    return ta[1:], tb[1:], ka, kb   # the first call of each warms up


def _jax(s, params, n):
    import jax
    import jax.numpy as jnp

    import llm_cache as lc

    dec = jax.jit(lc.decode(s, CTX))
    cache = lc.empty_cache(s, CTX)
    tok, times, toks = jnp.zeros((1, 1), jnp.int32), [], []
    for _ in range(n):
        t0 = time.perf_counter()
        logits, cache = dec(params, cache, tok)
        logits.block_until_ready()
        times.append(time.perf_counter() - t0)
        tok = jnp.argmax(logits, -1).astype(jnp.int32)[:, None]
        toks.append(int(tok[0, 0]))
    return times[1:], toks


def _worker(path, n):
    import rlxjax

    m = rlxjax.load(path, flat=True)
    d = m.function("decode")
    state = d.make_state()
    tok, times = np.zeros((1, 1), np.int32), []
    for _ in range(n):
        t0 = time.perf_counter()
        logits = d(tok=tok, state=state)["out"]
        times.append(time.perf_counter() - t0)
        tok = np.argmax(logits, -1).astype(np.int32).reshape(1, 1)
    return times[1:]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--only", default=None)
    ap.add_argument("--profile", action="store_true",
                    help="Core AI's profile of one rlxjax decode call, by op type")
    a = ap.parse_args(argv)
    import warnings

    warnings.filterwarnings("ignore")
    rows = []
    for name, s in _models().items():
        if a.only and name != a.only:
            continue
        params = _params(s)
        with tempfile.TemporaryDirectory(prefix="decode-speed-") as tmp:
            ours, compile_s, hist = _rlxjax_asset(s, params, os.path.join(tmp, "lm.aimodel"))
            theirs, convert_s = _torch_asset(s, params, tmp)
            ta, tb, ka, kb = asyncio.run(_round_robin(ours, theirs, s, a.tokens))
            tw = _worker(ours, min(a.tokens, 12))
            prof = None
            if a.profile:
                from coreai_direct import profile_decode

                prof = profile_decode(ours, (np.zeros((1, CTX), np.int32), np.int32(1)), 3)
        tj, kj = _jax(s, params, a.tokens)
        med = {k: statistics.median(v) for k, v in
               (("rlxjax", ta), ("rlxjax (worker)", tw), ("coreai-torch", tb), ("jax.jit", tj))}
        rows.append((name, med, ka == kj, kb == kj, compile_s, convert_s, hist, prof))
    print(f"decode tokens/s, context {CTX}, {a.tokens} greedy tokens from an empty cache "
          "(medians; Core AI runtime of coreai-core, this machine's CPU)")
    print(f"{'model':<14}{'rlxjax':>9}{'worker':>9}{'coreai-torch':>14}{'jax.jit':>9}"
          f"{'rlxjax/torch':>14}{'rlxjax/jit':>12}  tokens = JAX (rlxjax, torch)")
    for name, med, oka, okb, compile_s, convert_s, hist, prof in rows:
        tps = {k: 1.0 / v for k, v in med.items()}
        print(f"{name:<14}{tps['rlxjax']:>9.1f}{tps['rlxjax (worker)']:>9.1f}"
              f"{tps['coreai-torch']:>14.1f}{tps['jax.jit']:>9.1f}"
              f"{tps['rlxjax'] / tps['coreai-torch']:>13.2f}x"
              f"{tps['rlxjax'] / tps['jax.jit']:>11.2f}x  {oka}, {okb}")
        print(f"{'':<14}compile: rlxjax {compile_s:.1f} s, coreai-torch {convert_s:.1f} s; "
              f"rlxjax decode ops {hist}")
        if prof:
            tot = sum(v for k, v in prof.items() if k != "Function Execute")
            top = ", ".join(f"{k} {v / tot:.0%}" for k, v in prof.most_common(8)
                            if k != "Function Execute")
            print(f"{'':<14}rlxjax decode profile: {top}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
