"""Range or enumerated sizes on Core AI (issue 36, docs/flexible.md): one Core AI function
with a dynamic dim against the static function of an enumerated program at the same size.

Two workloads (flax, forward, parameters as inputs): an MLP 784-256-256-10 with a batch
range [1, 64] (enumerated: 1, 16, 64) and a decoder block (d 128, 4 heads, causal mask,
RMSNorm, GELU MLP) with a prompt-length range [1, 128] at batch 1 (enumerated: 1, 32, 128).
Each is compiled twice by rlxjax - ``flexible=`` a range (one function, ``?`` dims, shapes
computed in the program) and a list (one static function per size) - both assets are
loaded into this one process on Core AI's runtime (``coreai.runtime``, no worker: what an
app pays) and, at each listed size, the range's function and the enumerated program's
static function of that size are called round robin on the same inputs (medians, ms; the
ratio range / enumerated). Also printed: compile seconds (after a warm-up compile of the
static program), asset bytes (the parameters are inputs: the program alone), max |diff|
between the two and against ``jax.jit``.

Run: ``python bench/coreai_range.py [repeats]`` (default 30).
"""
from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import rlxjax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from coreai_speed import MLP  # noqa: E402  (the same MLP as the speed tables)


class Block(nn.Module):
    @nn.compact
    def __call__(self, x):
        h = nn.RMSNorm()(x)
        mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))
        x = x + nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=128)(h, h, mask=mask)
        return x + nn.Dense(128)(nn.gelu(nn.Dense(512)(nn.RMSNorm()(x))))


def _workloads():
    r = np.random.default_rng(0)
    mlp = MLP()
    p_mlp = mlp.init(jax.random.PRNGKey(0), jnp.ones((1, 784)))
    blk = Block()
    p_blk = blk.init(jax.random.PRNGKey(1), jnp.ones((1, 4, 128)))
    return [
        ("mlp 784-256-256-10, batch", mlp.apply, p_mlp, 0, (1, 64), [1, 16, 64],
         lambda n: r.standard_normal((n, 784)).astype(np.float32)),
        ("decoder block d128, prompt", blk.apply, p_blk, 1, (1, 128), [1, 32, 128],
         lambda n: r.standard_normal((1, n, 128)).astype(np.float32)),
    ]


def _size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def _compile(fn, params, axis, bounds, x, tmp, tag):
    t0 = time.perf_counter()
    compiled = rlxjax.coreml_jit(fn, format="aimodel", flexible={1: {axis: bounds}}).lower(
        params, x).compile()
    secs = time.perf_counter() - t0
    path = compiled.save(os.path.join(tmp, tag + ".aimodel"))
    return compiled, os.fspath(path), secs


def _feeds(compiled, params, x):
    leaves = jax.tree_util.tree_leaves((params, x))
    return {s.mil_name: np.ascontiguousarray(np.asarray(v, np.float32))
            for s, v in zip(compiled.input_specs, leaves)}


async def _run(rng_path, enum_path, cases, repeats):
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray

    async with AIModelAsset.load(rng_path).executable() as rm, \
            AIModelAsset.load(enum_path).executable() as em:
        dyn = rm.load_function("main")
        out = []
        for n, feeds in cases:
            static = em.load_function(f"main__flex0_{n}")
            nd = {k: NDArray(v) for k, v in feeds.items()}
            got = {}
            for name, fn in (("range", dyn), ("enumerated", static)):
                res = await fn(nd)  # the first call warms up (Core AI compiles the function)
                got[name] = [np.array(v.numpy()) for _, v in sorted(res.items())]
            times = {"range": [], "enumerated": []}
            for _ in range(repeats):
                for name, fn in (("range", dyn), ("enumerated", static)):
                    t0 = time.perf_counter()
                    await fn(nd)
                    times[name].append(time.perf_counter() - t0)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            diff = max(float(np.abs(a - b).max()) for a, b in zip(got["range"], got["enumerated"]))
            out.append((n, med, diff, got["range"][0]))
        return out


def main(repeats: int = 30) -> None:
    print(f"Core AI runtime, one process, round robin, median of {repeats} calls (ms); "
          "range: one function with a dynamic dim; enumerated: the static function of that size")
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn, params, axis, bounds, sizes, make in _workloads():
            xs = {n: make(n) for n in sizes}
            # warm-up: JAX's and rlxjax's first trace of this function, outside the timings
            rlxjax.coreml_jit(fn, format="aimodel").lower(params, xs[sizes[0]]).compile()
            rc, rpath, rsec = _compile(fn, params, axis, bounds, xs[sizes[0]], tmp, "range")
            ec, epath, esec = _compile(fn, params, axis, sizes, xs[sizes[0]], tmp, "enum")
            print(f"\n{name} range {list(bounds)} / enumerated {sizes}: compile "
                  f"{rsec:.1f} s / {esec:.1f} s, asset {_size(rpath) / 2**20:.2f} MiB / "
                  f"{_size(epath) / 2**20:.2f} MiB")
            cases = [(n, _feeds(rc, params, xs[n])) for n in sizes]
            rows = asyncio.run(_run(rpath, epath, cases, repeats))
            print(f"{'size':>6} {'range ms':>9} {'enum ms':>9} {'range/enum':>11} "
                  f"{'|range-enum|':>13} {'|range-jax|':>12}")
            for n, med, diff, first in rows:
                want = np.asarray(jax.jit(fn)(params, xs[n]))
                vs_jax = float(np.abs(first.reshape(want.shape) - want).max())
                print(f"{n:>6} {med['range']:>9.3f} {med['enumerated']:>9.3f} "
                      f"{med['range'] / med['enumerated']:>10.2f}x {diff:>13.1e} {vs_jax:>12.1e}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 30)
