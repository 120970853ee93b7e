"""rlxjax's Core AI forward programs against Apple's own converter, ``coreai-torch``.

Apple converts PyTorch modules to Core AI (``coreai_torch.TorchConverter``: ``torch.export``,
its decompositions, then the coreai dialect); rlxjax compiles the JAX function. For each
workload both sides get the same model with the same weights - a flax module, and the
PyTorch module written to compute the same function (weights copied, flax's epsilons and
tanh-gelu) - and each makes a saved ``.aimodel`` of its forward pass with the weights as
constants (JAX function / torch module -> saved asset, everything included). The table
gives, side by side in one run:

- ``compile s``: median seconds from the function to the saved asset (rlxjax:
  ``coreml_jit(fn, format="aimodel").lower(x).compile().save(path)``; coreai-torch:
  ``torch.export`` + ``run_decompositions(get_decomp_table())`` + ``to_coreai()`` +
  ``save_asset``);
- ``ops``: the coreai ops one call of each program runs, constants left out, counted in
  the same way from the MLIR text (an ``invoke`` of one of coreai-torch's composite graphs,
  its ``layer_norm`` say, counts as the ops of that graph);
- ``load s`` / ``call ms``: Core AI's own compile + load of the asset and the median time
  of one call on the bundled Core AI runtime, both assets run the same way, each in its own
  process (the runtime can end its process), directly through ``coreai.runtime``;
- ``max|d|``: each side's largest difference from ``jax.jit`` of the flax function.

Needs the benchmarks-only peer: ``pip install torch==2.13.0 -e ".[coreai,peer-coreai]"``
(coreai-torch 0.4.3 pins coreai-core 1.0.0b3 and wants torch >= 2.8; name torch 2.13.0,
which this machine has on disk, or pip takes a several-GB CUDA build). Run:
``python bench/vs_coreai_torch.py [repeats]``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

# Runs one saved asset on Core AI's runtime in a fresh process: prints JSON with the
# compile + load seconds, the median call seconds and writes the first output to a .npy.
_RUN = r"""
import asyncio, json, statistics, sys, time
import numpy as np
from coreai.authoring import AIModelAsset
from coreai.runtime import NDArray

path, x_path, out_path, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
x = np.load(x_path)

async def go():
    t0 = time.perf_counter()
    async with AIModelAsset.load(path).executable() as model:  # compiles off macOS
        fn = model.load_function(model.function_names[0])
        load_s = time.perf_counter() - t0
        await run(fn, load_s)

async def run(fn, load_s):
    (name,) = fn.desc.input_names
    feeds = {name: NDArray(np.ascontiguousarray(x))}
    out = await fn(feeds)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        out = await fn({name: NDArray(np.ascontiguousarray(x))})
        times.append(time.perf_counter() - t)
    first = fn.desc.output_names[0]
    np.save(out_path, np.array(out[first].numpy()))
    print(json.dumps({"load_s": load_s, "call_s": statistics.median(times)}))

asyncio.run(go())
"""


# -- workloads: (flax module, its params, input, the equivalent torch module) -------------

def _mlp(depth: int, d: int = 64):
    import jax
    import torch
    from compile_time import Stack

    model = Stack(depth, d)
    x = np.random.default_rng(0).standard_normal((8, d)).astype(np.float32)
    params = model.init(jax.random.PRNGKey(0), x)

    class Block(torch.nn.Module):
        def __init__(self, p):
            super().__init__()
            self.norm = torch.nn.LayerNorm(d, eps=1e-6)  # flax LayerNorm's epsilon
            self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
            _copy_norm(self.norm, p["LayerNorm_0"])
            _copy_dense(self.up, p["Dense_0"])
            _copy_dense(self.down, p["Dense_1"])

        def forward(self, x):
            h = torch.nn.functional.gelu(self.up(self.norm(x)), approximate="tanh")
            return x + self.down(h)

    p = params["params"]
    module = torch.nn.Sequential(*[Block(p[f"Block_{i}"]) for i in range(depth)])
    return model.apply, params, x, module


def _transformer(d: int = 128, heads: int = 4, t: int = 64):
    import jax
    import torch
    from models import TransformerBlock, rng_data

    model = TransformerBlock(d=d, heads=heads)
    x, = rng_data(0, (2, t, d))
    x = np.asarray(x, np.float32)
    params = model.init(jax.random.PRNGKey(1), x)
    p = params["params"]

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rms = torch.nn.RMSNorm(d, eps=1e-6)  # flax RMSNorm's epsilon
            self.qkv = torch.nn.Linear(d, 3 * d, bias=False)
            self.proj = torch.nn.Linear(d, d)
            self.norm = torch.nn.LayerNorm(d, eps=1e-6)
            self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)
            with torch.no_grad():
                self.rms.weight.copy_(torch.from_numpy(np.asarray(p["RMSNorm_0"]["scale"])))
            _copy_dense(self.qkv, p["Dense_0"])
            _copy_dense(self.proj, p["Dense_1"])
            _copy_norm(self.norm, p["LayerNorm_0"])
            # flax names the outer Dense(d) of Dense(d)(gelu(Dense(2d)(h))) first
            _copy_dense(self.down, p["Dense_2"])
            _copy_dense(self.up, p["Dense_3"])

        def forward(self, x):
            b, n, _ = x.shape
            qkv = self.qkv(self.rms(x)).reshape(b, n, 3, heads, d // heads)
            q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
            s = torch.einsum("bthd,bshd->bhts", q, k) / float(np.sqrt(d // heads))
            o = torch.einsum("bhts,bshd->bthd", torch.softmax(s, dim=-1), v).reshape(b, n, d)
            x = x + self.proj(o)
            h = torch.nn.functional.gelu(self.up(self.norm(x)), approximate="tanh")
            return x + self.down(h)

    return model.apply, params, x, Block()


def _copy_dense(lin, p):
    import torch

    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(np.asarray(p["kernel"]).T.copy()))
        if lin.bias is not None:
            lin.bias.copy_(torch.from_numpy(np.asarray(p["bias"])))


def _copy_norm(norm, p):
    import torch

    with torch.no_grad():
        norm.weight.copy_(torch.from_numpy(np.asarray(p["scale"])))
        norm.bias.copy_(torch.from_numpy(np.asarray(p["bias"])))


WORKLOADS = {
    "mlp_block x1": lambda: _mlp(1),
    "mlp_block x8": lambda: _mlp(8),
    "transformer d128 s64": _transformer,
}


# -- the two compilers -------------------------------------------------------------------------

def _ops(text: str) -> int:
    """The ops one call runs, constants left out: the ``= coreai.<op>`` lines of the public
    graph, each ``invoke`` of a private graph (coreai-torch's composites, e.g. its
    ``layer_norm``) counted as that graph's ops."""
    import re

    graphs, name = {}, None
    for line in text.splitlines():
        head = re.search(r"coreai\.graph (?:private )?(?:noinline )?@([\w.]+)", line)
        if head:
            name = head.group(1)
            graphs[name] = []
        elif name and (m := re.search(r"= coreai\.([a-z_0-9.]+)(?: @([\w.]+))?", line)):
            graphs[name].append((m.group(1).rpartition(".")[2], m.group(2)))

    def count(g):
        return sum(count(callee) if op == "invoke" else op != "constant"
                   for op, callee in graphs[g])

    return count("main")


def rlxjax_compile(apply, params, x, path):
    import rlxjax

    compiled = rlxjax.coreml_jit(lambda x: apply(params, x), format="aimodel").lower(x).compile()
    compiled.save(path)
    return compiled


def peer_compile(module, x, path):
    import coreai_torch
    import torch
    from pathlib import Path

    sample = (torch.from_numpy(x),)
    conv = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
    conv.add_pytorch_module(
        module.eval(), input_names=["x"], output_names=["y"],
        export_fn=lambda m: torch.export.export(m, args=sample).run_decompositions(
            coreai_torch.get_decomp_table()))
    program = conv.to_coreai()
    program.save_asset(Path(path))
    return program


def _timed(fn, repeats):
    times, result = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result


def _run_asset(path, x, folder, calls):
    x_path, out_path = os.path.join(folder, "x.npy"), os.path.join(folder, "out.npy")
    np.save(x_path, x)
    r = subprocess.run([sys.executable, "-c", _RUN, path, x_path, out_path, str(calls)],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"Core AI run ended with {r.returncode}: "
                           f"{r.stderr.strip().splitlines()[-1][:200]}")
    return json.loads(r.stdout.strip().splitlines()[-1]), np.load(out_path)


def main(repeats: int = 3, calls: int = 50):
    import jax
    import shutil

    import coreai_torch
    import torch

    print(f"rlxjax vs coreai-torch {coreai_torch.__version__} (torch {torch.__version__}), "
          f"jax {jax.__version__}; median of {repeats} compiles, {calls} calls")
    print(f"{'workload':<22} {'side':<12} {'compile s':>9} {'ops':>6} {'load s':>7} "
          f"{'call ms':>8} {'max|d|':>9}")
    rows = []
    for name, make in WORKLOADS.items():
        apply, params, x, module = make()
        want = np.asarray(jax.jit(apply)(params, x))
        with tempfile.TemporaryDirectory() as tmp:
            sides = {}
            for side, build in (("rlxjax", lambda p: rlxjax_compile(apply, params, x, p)),
                                ("coreai-torch", lambda p: peer_compile(module, x, p))):
                path = os.path.join(tmp, side + ".aimodel")

                def once():
                    if os.path.exists(path):
                        shutil.rmtree(path)
                    return build(path)

                try:
                    secs, made = _timed(once, repeats)
                    text = made.as_text() if side == "rlxjax" else str(made)
                    run, got = _run_asset(path, x, tmp, calls)
                except Exception as e:  # noqa: BLE001 - a side that fails is reported
                    print(f"{name:<22} {side:<12} failed: {str(e).splitlines()[0][:80]}")
                    continue
                d = float(np.max(np.abs(got.reshape(want.shape) - want)))
                sides[side] = (secs, _ops(text), run["load_s"], run["call_s"], d)
                print(f"{name:<22} {side:<12} {secs:>9.3f} {sides[side][1]:>6} "
                      f"{run['load_s']:>7.3f} {run['call_s'] * 1e3:>8.3f} {d:>9.2e}")
            if len(sides) == 2:
                (a, b) = sides["rlxjax"], sides["coreai-torch"]
                print(f"{'':<22} {'ratio':<12} {b[0] / a[0]:>8.1f}x {a[1] / b[1]:>6.2f} "
                      f"{a[2] / b[2]:>7.2f} {a[3] / b[3]:>8.2f}   (compile: peer/rlxjax; "
                      "ops, load, call: rlxjax/peer)")
                rows.append({"workload": name, "rlxjax": a, "coreai_torch": b})
    return rows


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
