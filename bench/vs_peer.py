"""rlxjax against the closest peer, ``stablehlo-coreml`` (JAX -> StableHLO -> coremltools).

For each workload both tools compile the same JAX function into a saved ``.mlpackage``
(JAX function -> saved package, everything included): the forward pass (the model's
``apply``) and the training gradient (rlxjax: ``coreml_grad(loss)``; the peer: its
conversion of ``jax.jit(jax.grad(loss))``). The table gives median compile seconds, the
non-const MIL op count of each program (nested blocks included), and the ratios
(speedup = peer s / rlxjax s; ops = rlxjax ops / peer ops). Where the peer fails, the row
says so with the first line of its error.

Both sides target iOS18 in fp32 (the peer's ``compute_precision=FLOAT32``, its default
pass pipeline from ``build_pass_pipeline()``). The peer runs in a subprocess per workload
(``--peer-python``, default this interpreter: install it with ``pip install -e .[peer]``),
timed inside that subprocess; a fresh closure per repetition keeps JAX's tracing caches
from serving later repetitions. A measurement whose first repetition takes over 60 s is
not repeated. Run: ``python bench/vs_peer.py`` (``--json PATH`` also writes the rows).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

LONG = 60.0  # a first repetition longer than this is not repeated


# -- workloads ------------------------------------------------------------------------------

def _mlp(depth):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from compile_time import Stack

    model = Stack(depth, 64)
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    params = model.init(jax.random.PRNGKey(0), x)
    return (model.apply, (params, x),
            lambda p, x: jnp.mean(model.apply(p, x) ** 2), (params, x))


def _transformer():
    import jax
    import jax.numpy as jnp
    from models import TransformerBlock, rng_data

    model = TransformerBlock(d=128, heads=4)
    x, = rng_data(0, (2, 64, 128))
    params = model.init(jax.random.PRNGKey(1), x)
    return (model.apply, (params, x),
            lambda p, x: jnp.mean(model.apply(p, x) ** 2), (params, x))


def _cnn():
    import jax
    from models import CNN, cross_entropy, onehot, rng_data

    model = CNN(channels=16, classes=10)
    x, = rng_data(1, (4, 16, 16, 3))
    y = onehot(2, 4, 10)
    params = model.init(jax.random.PRNGKey(2), x)
    return (model.apply, (params, x),
            lambda p, x, y: cross_entropy(model.apply(p, x), y), (params, x, y))


def _dit():
    import jax
    import jax.numpy as jnp
    from models import DiTBlock, rng_data

    model = DiTBlock(d=128)
    x, c = rng_data(3, (2, 64, 128), (2, 32))
    params = model.init(jax.random.PRNGKey(3), x, c)
    return (model.apply, (params, x, c),
            lambda p, x, c: jnp.mean(model.apply(p, x, c) ** 2), (params, x, c))


WORKLOADS = {
    "mlp_block x1": lambda: _mlp(1),
    "mlp_block x8": lambda: _mlp(8),
    "mlp_block x32": lambda: _mlp(32),
    "transformer d128 s64": _transformer,
    "cnn groupnorm": _cnn,
    "dit block d128": _dit,
}


def _fresh(fn):
    return lambda *a: fn(*a)


# -- counting ops in a saved package --------------------------------------------------------

def package_ops(path) -> int:
    """Non-const MIL ops of a saved package's main function, nested blocks included."""
    from coremltools.proto import Model_pb2

    from rlxjax.coreml.mil import function_block, operations

    m = Model_pb2.Model()
    with open(os.path.join(path, "Data", "com.apple.CoreML", "model.mlmodel"), "rb") as f:
        m.ParseFromString(f.read())
    return sum(op.type != "const" for op in operations(function_block(m, "main")))


# -- the two compilers ----------------------------------------------------------------------

def rlxjax_compile(fn, args, grad, path):
    import rlxjax

    f = (rlxjax.coreml_grad if grad else rlxjax.coreml_jit)(_fresh(fn), target="iOS18")
    f.lower(*args).compile().save(path)


def peer_compile(fn, args, grad, path):
    import jax

    peer_save(jax.grad(_fresh(fn)) if grad else _fresh(fn), args, path)


def peer_save(f, args, path):
    """The peer's conversion of ``jax.jit(f)`` at ``args`` (export, convert for iOS18 in
    fp32 with its own pass pipeline), saved at ``path``."""
    import coremltools as ct
    import jax
    from jax._src.interpreters import mlir as jax_mlir
    from jax._src.lib.mlir import ir
    from jax.export import export
    from stablehlo_coreml import build_pass_pipeline, convert

    exported = export(jax.jit(f))(*args)
    module = ir.Module.parse(exported.mlir_module(), context=jax_mlir.make_ir_context())
    prog = convert(module, minimum_deployment_target=ct.target.iOS18)
    model = ct.convert(prog, source="milinternal", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32,
                       pass_pipeline=build_pass_pipeline(), skip_model_load=True)
    model.save(path)


def measure(compile_fn, workload, grad, repeats):
    """Median seconds over ``repeats`` (one if the first is slow) and the op count, or
    {"error": first line}."""
    fwd, fwd_args, loss, loss_args = WORKLOADS[workload]()
    fn, args = (loss, loss_args) if grad else (fwd, fwd_args)
    times, ops = [], None
    with tempfile.TemporaryDirectory(prefix="vs-peer-") as tmp:
        for i in range(repeats):
            path = os.path.join(tmp, f"m{i}.mlpackage")
            t0 = time.perf_counter()
            try:
                compile_fn(fn, args, grad, path)
            except Exception as e:  # noqa: BLE001 - the table reports it
                msg = (str(e).strip().splitlines() or [""])[0]
                return {"error": f"{type(e).__name__}: {msg}"[:160]}
            times.append(time.perf_counter() - t0)
            ops = package_ops(path)
            if times[0] > LONG:
                break
    return {"s": statistics.median(times), "n": len(times), "repeats": repeats, "ops": ops}


def rlxjax_stages(workload, repeats):
    """Where rlxjax's gradient compile time goes (medians, seconds): JAX's own tracing of
    the loss (``jax.make_jaxpr``, a floor no converter of JAX code avoids), then rlxjax's
    ``lower`` (tracing again + the RLX transforms), ``compile`` (MIL protobuf) and ``save``."""
    import jax

    import rlxjax

    _, _, loss, args = WORKLOADS[workload]()
    t = {"jax_trace": [], "lower": [], "compile": [], "save": []}
    with tempfile.TemporaryDirectory(prefix="vs-peer-stages-") as tmp:
        for i in range(repeats):
            t0 = time.perf_counter()
            jax.make_jaxpr(_fresh(loss))(*args)
            t1 = time.perf_counter()
            lowered = rlxjax.coreml_grad(_fresh(loss), target="iOS18").lower(*args)
            t2 = time.perf_counter()
            compiled = lowered.compile()
            t3 = time.perf_counter()
            compiled.save(os.path.join(tmp, f"s{i}.mlpackage"))
            t4 = time.perf_counter()
            for k, v in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                t[k].append(v)
    return {k: statistics.median(v) for k, v in t.items()}


def _warm_up(compile_fn):
    import jax.numpy as jnp
    import numpy as np

    with tempfile.TemporaryDirectory() as tmp:
        a = np.ones((2, 3), np.float32)
        compile_fn(lambda x: jnp.sum(jnp.tanh(x) ** 2), (a,), True, os.path.join(tmp, "w.mlpackage"))


def _quiet_logs():
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    os.environ.setdefault("TQDM_DISABLE", "1")


def peer_worker(workloads, kinds, repeats):
    """Runs inside the peer's interpreter: prints one JSON line per measurement."""
    _quiet_logs()
    _warm_up(peer_compile)
    for w in workloads:
        for kind in kinds:
            r = measure(peer_compile, w, kind == "grad", repeats)
            print(json.dumps({"workload": w, "kind": kind, **r}), flush=True)


def run_peer(python, workload, kinds, repeats, timeout):
    cmd = [python, os.path.abspath(__file__), "--peer-worker", workload, "--kinds", *kinds,
           "--repeats", str(repeats)]
    env = dict(os.environ, TQDM_DISABLE="1")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {k: {"error": f"timed out after {timeout:.0f} s"} for k in kinds}
    rows = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            rows[r.pop("kind")] = r
    for k in kinds:
        if k not in rows:
            err = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
            rows[k] = {"error": f"peer process exited {p.returncode}: "
                                f"{err[-1] if err else 'no output'}"[:160]}
    return rows


# -- table ----------------------------------------------------------------------------------

def _fmt_row(w, kind, ours, peer):
    o = f"{ours['s']:>9.3f} {ours['ops']:>7}" if "s" in ours else f"{'FAIL':>9} {'':>7}"
    if "s" in peer:
        speed = f"{peer['s'] / ours['s']:>7.1f}x" if "s" in ours else f"{'':>8}"
        ratio = f"{ours['ops'] / peer['ops']:>6.2f}" if "s" in ours else f"{'':>6}"
        p = f"{peer['s']:>9.3f}{'*' if peer['n'] < peer['repeats'] else ' '} {peer['ops']:>7}"
        line = f"{w:<22} {kind:<5} {o} {p} {speed} {ratio}"
    else:
        line = f"{w:<22} {kind:<5} {o} {'peer failed':>18} {'':>8} {'':>6}"
    notes = [f"rlxjax: {ours['error']}"] if "error" in ours else []
    if "error" in peer:
        notes.append(f"peer: {peer['error']}")
    return line + "".join(f"\n{'':<6}{n}" for n in notes)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS),
                    metavar="NAME")
    ap.add_argument("--kinds", nargs="+", default=["fwd", "grad"], choices=["fwd", "grad"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peer-python", default=sys.executable,
                    help="interpreter with stablehlo-coreml installed (default: this one)")
    ap.add_argument("--peer-timeout", type=float, default=1800.0)
    ap.add_argument("--no-peer", action="store_true", help="measure rlxjax only")
    ap.add_argument("--json", help="also write the measurements to this file")
    ap.add_argument("--peer-worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.peer_worker:
        return peer_worker(args.peer_worker, args.kinds, args.repeats)

    _quiet_logs()
    _warm_up(rlxjax_compile)
    print(f"{'workload':<22} {'kind':<5} {'rlxjax s':>9} {'ops':>7} {'peer s':>10} {'ops':>7} "
          f"{'speedup':>8} {'ops x':>6}", flush=True)
    rows = []
    for w in args.workloads:
        peer = ({k: {"error": "not run (--no-peer)"} for k in args.kinds} if args.no_peer
                else run_peer(args.peer_python, w, args.kinds, args.repeats, args.peer_timeout))
        for kind in args.kinds:
            ours = measure(rlxjax_compile, w, kind == "grad", args.repeats)
            if kind == "grad" and "s" in ours:
                ours["stages"] = rlxjax_stages(w, args.repeats)
            rows.append({"workload": w, "kind": kind, "rlxjax": ours, "peer": peer[kind]})
            print(_fmt_row(w, kind, ours, peer[kind]), flush=True)
    print(f"medians of {args.repeats} (* = one repetition: the first took over {LONG:.0f} s); "
          "speedup = peer s / rlxjax s; ops x = rlxjax ops / peer ops (non-const MIL ops)")
    by = {(r["workload"], r["kind"]): r for r in rows}
    for side in ("rlxjax", "peer"):
        a, b = by.get(("mlp_block x1", "grad")), by.get(("mlp_block x32", "grad"))
        if a and b and "s" in a[side] and "s" in b[side]:
            print(f"{side}: gradient compile, 32 blocks / 1 block = "
                  f"{b[side]['s'] / a[side]['s']:.1f}x")
    if args.json:
        from rlxjax.atomic import write_bytes

        write_bytes(args.json, json.dumps(rows, indent=1).encode())
    return rows


if __name__ == "__main__":
    main()
