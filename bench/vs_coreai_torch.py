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
  of one call on the bundled Core AI runtime, both assets run the same way, their calls
  round robin in one fresh process (the runtime can end its process), directly through
  ``coreai.runtime``;
- ``max|d|``: each side's largest difference from ``jax.jit`` of the flax function.

Needs the benchmarks-only peer: ``pip install torch==2.13.0 -e ".[coreai,peer-coreai]"``
(coreai-torch 0.4.3 pins coreai-core 1.0.0b3 and wants torch >= 2.8; name torch 2.13.0,
which this machine has on disk, or pip takes a several-GB CUDA build). The CNN's torch
twin (bench/cnn_torch.py) is converted in a separate torch environment instead
(``RLXJAX_TORCH_PYTHON``, default ``/work/.venv-torch/bin/python``), so it runs without
torch beside rlxjax; the other workloads' twins are built in this process and are
skipped without torch. The two assets of a workload are called round robin in one fresh
process. Run: ``python bench/vs_coreai_torch.py [repeats] [calls] [--only NAME]``.
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

# Runs saved assets on Core AI's runtime in one fresh process, their calls round robin:
# prints JSON with each one's compile + load seconds and median call seconds, and writes
# each first output to a .npy.
_RUN = r"""
import asyncio, json, statistics, sys, time
import numpy as np
from coreai.authoring import AIModelAsset
from coreai.runtime import NDArray

paths, x_path, out_paths, calls = (json.loads(sys.argv[1]), sys.argv[2],
                                   json.loads(sys.argv[3]), int(sys.argv[4]))
x = np.load(x_path)

async def go():
    ctxs, fns, loads = [], [], []
    try:
        for path in paths:
            t0 = time.perf_counter()
            ctx = AIModelAsset.load(path).executable()  # compiles off macOS
            model = await ctx.__aenter__()
            ctxs.append(ctx)
            fns.append(model.load_function(model.function_names[0]))
            loads.append(time.perf_counter() - t0)
        times = [[] for _ in fns]
        outs = []
        for fn in fns:  # the first call warms up
            (name,) = fn.desc.input_names
            outs.append(await fn({name: NDArray(np.ascontiguousarray(x))}))
        for _ in range(calls):
            for i, fn in enumerate(fns):
                (name,) = fn.desc.input_names
                t = time.perf_counter()
                await fn({name: NDArray(np.ascontiguousarray(x))})
                times[i].append(time.perf_counter() - t)
        for fn, out, out_path in zip(fns, outs, out_paths):
            np.save(out_path, np.array(out[fn.desc.output_names[0]].numpy()))
        print(json.dumps([{"load_s": l, "call_s": statistics.median(t)}
                          for l, t in zip(loads, times)]))
    finally:
        for ctx in reversed(ctxs):
            await ctx.__aexit__(None, None, None)

asyncio.run(go())
"""

#: the separate torch environment (CPU torch + coreai-torch) of the peers run out of process
TORCH_PY = os.environ.get("RLXJAX_TORCH_PYTHON", "/work/.venv-torch/bin/python")


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


class OutOfProcess:
    """A peer converted in the torch environment (``TORCH_PY``) by ``script`` from the flax
    weights (a ``.npz`` of the tree's leaves by path): coreai-torch's program of the same
    function, no torch needed beside rlxjax."""

    def __init__(self, script, params, *args):
        self.script, self.params, self.args = script, params, [str(a) for a in args]

    def compile(self, path):
        import jax

        weights = path + ".npz"
        leaves = jax.tree_util.tree_flatten_with_path(self.params)[0]
        np.savez(weights, **{"/".join(str(getattr(k, "key", k)) for k in kp): np.asarray(v)
                             for kp, v in leaves})
        r = subprocess.run([TORCH_PY, os.path.join(HERE, self.script), weights, *self.args,
                            path], capture_output=True, text=True, timeout=1800)
        if r.returncode:
            raise RuntimeError(f"{self.script} failed: {r.stderr.strip()[-300:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])


def _cnn():
    """bench/coreai_speed.py's CNN (2 conv + dense on 28x28x1, batch 32); its torch twin is
    bench/cnn_torch.py, converted in the torch environment."""
    from coreai_speed import cnn

    apply, params, (x,), _, _ = cnn()
    return apply, params, x, OutOfProcess("cnn_torch.py", params, x.shape[0])


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
    "cnn 28x28 b32": _cnn,
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
    if isinstance(module, OutOfProcess):
        got = module.compile(path)
        return got["text"]
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


def _run_assets(paths, x, folder, calls):
    """Each asset's compile + load seconds and median call seconds (their calls round robin
    in one fresh process) and first output."""
    x_path = os.path.join(folder, "x.npy")
    outs = [os.path.join(folder, f"out{i}.npy") for i in range(len(paths))]
    np.save(x_path, x)
    r = subprocess.run([sys.executable, "-c", _RUN, json.dumps(paths), x_path, json.dumps(outs),
                        str(calls)], capture_output=True, text=True, timeout=3600)
    if r.returncode != 0:
        raise RuntimeError(f"Core AI run ended with {r.returncode}: "
                           f"{r.stderr.strip().splitlines()[-1][:200]}")
    runs = json.loads(r.stdout.strip().splitlines()[-1])
    return [(run, np.load(o)) for run, o in zip(runs, outs)]


def _versions():
    try:
        import coreai_torch
        import torch

        return coreai_torch.__version__, torch.__version__
    except ImportError:  # the torch environment's, asked there
        r = subprocess.run([TORCH_PY, "-c", "import coreai_torch, torch; "
                            "print(coreai_torch.__version__, torch.__version__)"],
                           capture_output=True, text=True, timeout=600)
        return tuple(r.stdout.split()[-2:]) if r.returncode == 0 else ("?", "?")


def main(repeats: int = 3, calls: int = 50, only=None):
    import jax
    import shutil

    peer, torch_v = _versions()
    print(f"rlxjax vs coreai-torch {peer} (torch {torch_v}), jax {jax.__version__}; median "
          f"of {repeats} compiles, {calls} calls of each asset round robin in one process")
    print(f"{'workload':<22} {'side':<12} {'compile s':>9} {'ops':>6} {'load s':>7} "
          f"{'call ms':>8} {'max|d|':>9}")
    rows = []
    for name, make in WORKLOADS.items():
        if only and only not in name:
            continue
        try:
            apply, params, x, module = make()
        except ImportError as e:  # an in-process torch twin, torch not beside rlxjax
            print(f"{name:<22} skipped: {e} (its torch twin is built in this process)")
            continue
        want = np.asarray(jax.jit(apply)(params, x))
        with tempfile.TemporaryDirectory() as tmp:
            made = {}
            for side, build in (("rlxjax", lambda p: rlxjax_compile(apply, params, x, p)),
                                ("coreai-torch", lambda p: peer_compile(module, x, p))):
                path = os.path.join(tmp, side + ".aimodel")

                def once():
                    if os.path.exists(path):
                        shutil.rmtree(path)
                    return build(path)

                try:
                    secs, program = _timed(once, repeats)
                except Exception as e:  # noqa: BLE001 - a side that fails is reported
                    print(f"{name:<22} {side:<12} failed: {str(e).splitlines()[0][:80]}")
                    continue
                if isinstance(program, dict):  # converted out of process: its own seconds
                    secs, text = program["convert_s"], program["text"]
                else:
                    text = program.as_text() if side == "rlxjax" else str(program)
                made[side] = (path, secs, text)
            try:
                runs = _run_assets([m[0] for m in made.values()], x, tmp, calls)
            except Exception as e:  # noqa: BLE001
                print(f"{name:<22} run failed: {str(e).splitlines()[0][:80]}")
                continue
            sides = {}
            for (side, (_, secs, text)), (run, got) in zip(made.items(), runs):
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
    args = sys.argv[1:]
    only = args[args.index("--only") + 1] if "--only" in args else None
    nums = [int(a) for a in args if a.isdigit()]
    main(*nums[:2], only=only)
