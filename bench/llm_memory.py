"""Peak memory of compiling a LoRA step on a frozen compressed base: rlxjax against XLA.

For each model shape of bench/llm_models.py (Llama-style decoders at SmolLM2-135M,
Qwen2.5-0.5B, Llama-3.2-1B and Gemma-3-1B shapes), one row per way of compiling the same
LoRA step (rank 8 on q and v, adam, sequence 128, batch 1), each in a fresh process:

* ``xla``: ``jax.jit`` of ``value_and_grad`` + the optax update with the fp32 base as an
  argument, ``.lower(...).compile()`` - JAX's own compile of the step;
* ``mlpackage <scheme>`` / ``aimodel <scheme>``: ``rlxjax.coreml_train_step(...,
  trainable=rlxjax.lora.TRAINABLE, compress=<scheme>)``, ``step.init(tree, tokens)`` (which
  compiles) and ``step.save(path)``.

Every process first builds the model's fp32 parameters (numpy, what a user holds) and then
compiles. Printed per row: the parameters' bytes, the process's peak RSS after building
them (``build``), its peak RSS at the end (``peak``: ``resource.getrusage`` ``ru_maxrss``),
the seconds the compile (and save) took, the package's size, the memory rlxjax's check
estimated the compile would need beyond the parameters (rlxjax/training/budget.py: compare
it with peak - build), then each rlxjax row's peak and time as a ratio to the XLA row of
the same shape, measured in the same run.

A row ``<format>:<scheme>+<phase>`` does one more thing after ``step.save`` (its own
process, so that its peak is its own): ``+multi`` saves the step again as a multifunction
asset (``step.save(..., predict=(logits, tree, tokens))``), ``+load`` loads the saved
asset (``rlxjax.load``) and runs ``predict``... no: loads it and reads its functions,
``+export`` compiles ``rlxjax.export_inference`` of the logits with the merged fp32
parameters compressed by the scheme and saves it. A second fp32 copy of the weights in any
of them shows as the parameters' size on that row's peak.

Run: ``python bench/llm_memory.py [--models qwen2.5-0.5b,llama-3.2-1b]
[--rows xla,mlpackage:int8,aimodel:int8] [--layers N]`` - at 0.5B and up under
``flock /work/wt/.bigjob.lock`` on a shared machine.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = ("xla", "mlpackage:int8", "aimodel:int8")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _size(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def run_row(model_name: str, row: str, layers) -> dict:
    """One row, in this process: build the parameters, then compile (and save)."""
    sys.path.insert(0, HERE)
    import jax
    import numpy as np
    import optax

    from llm_models import build, lora_loss, lora_tree

    model, base, tokens = build(model_name, layers=layers)
    tree = lora_tree(base)
    del base
    nbytes = sum(np.asarray(x).nbytes for x in jax.tree.leaves(tree))
    built = _peak_mib()
    loss = lora_loss(model)
    size = est = 0
    t0 = time.perf_counter()
    if row == "xla":
        opt = optax.adam(1e-3)

        def step(base, lora, opt_state, tok):
            value, grads = jax.value_and_grad(
                lambda lo: loss({"base": base, "lora": lo}, tok))(lora)
            updates, opt_state = opt.update(grads, opt_state, lora)
            return value, optax.apply_updates(lora, updates), opt_state

        jax.jit(step).lower(tree["base"], tree["lora"], opt.init(tree["lora"]),
                            tokens).compile()
    else:
        import rlxjax

        from rlxjax.training.budget import estimate

        fmt, scheme = row.split("+")[0].split(":")
        phase = row.partition("+")[2]
        est = estimate(jax.tree.leaves(tree["base"]), None if scheme == "none" else scheme,
                       fmt) / 2 ** 20
        target = "iOS18" if fmt == "mlpackage" else None
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), trainable=rlxjax.lora.TRAINABLE,
                                        compress=None if scheme == "none" else scheme,
                                        target=target, backend="reference" if fmt ==
                                        "mlpackage" else None, format=fmt)
        step.init(tree, tokens)
        folder = tempfile.mkdtemp(prefix="llm_memory.")
        try:
            path = step.save(os.path.join(folder, "step." + fmt))
            size = _size(path)
            logits = lambda tr, tok: model.apply(rlxjax.lora.merge(tr), tok)  # noqa: E731
            if phase == "multi":
                size = _size(step.save(os.path.join(folder, "multi." + fmt),
                                       predict=(logits, tokens[:, :-1])))
            elif phase == "load":
                rlxjax.load(path)
            elif phase == "export":
                merged = jax.tree.map(np.asarray, rlxjax.lora.merge(tree))
                del tree["base"]
                rlxjax.export_inference(lambda p, tok: model.apply(p, tok), merged,
                                        tokens[:, :-1], path=os.path.join(folder, "inf." + fmt),
                                        compress=None if scheme == "none" else scheme)
            elif phase:
                raise SystemExit(f"unknown phase {phase!r}: multi, load or export")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    secs = time.perf_counter() - t0
    out = dict(model=model_name, row=row, params_mib=nbytes / 2 ** 20, build_mib=built,
               peak_mib=_peak_mib(), secs=secs, package_mib=size / 2 ** 20, estimate_mib=est)
    if row != "xla":  # after the peak is read: memory_analysis's stored / materialised weights
        m = step.memory_analysis()
        out.update(stored_mib=m.weight_stored_in_bytes / 2 ** 20,
                   materialised_mib=m.weight_size_in_bytes / 2 ** 20)
    return out


def _child(model_name: str, row: str, layers) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model_name, row]
    if layers:
        cmd += ["--layers", str(layers)]
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, TQDM_DISABLE="1"))
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        tail = "\n".join(p.stderr.strip().splitlines()[-3:])
        return dict(model=model_name, row=row, error=f"exit {p.returncode}: {tail}")
    return json.loads(lines[-1])


def table(results) -> str:
    out = [f"{'model':<14} {'row':<16} {'params MiB':>10} {'build MiB':>9} {'peak MiB':>9} "
           f"{'compile s':>9} {'package MiB':>11} {'est. MiB':>8} {'peak/XLA':>8} {'s/XLA':>6}"]
    xla = {r["model"]: r for r in results if r["row"] == "xla" and "error" not in r}
    for r in results:
        if "error" in r:
            out.append(f"{r['model']:<14} {r['row']:<16} FAILED {r['error']}")
            continue
        x = xla.get(r["model"])
        ratio = (f"{r['peak_mib'] / x['peak_mib']:>8.2f} {r['secs'] / x['secs']:>6.2f}"
                 if x and r["row"] != "xla" else f"{'':>8} {'':>6}")
        out.append(f"{r['model']:<14} {r['row']:<16} {r['params_mib']:>10,.0f} "
                   f"{r['build_mib']:>9,.0f} {r['peak_mib']:>9,.0f} {r['secs']:>9.2f} "
                   f"{r['package_mib']:>11,.1f} {r.get('estimate_mib', 0):>8,.0f} {ratio}")
    rows = [r for r in results if "stored_mib" in r]
    if rows:
        out += ["", "memory_analysis() of each step: weights stored (package) / materialised "
                "(run time), MiB"]
        out += [f"{r['model']:<14} {r['row']:<16} {r['stored_mib']:>10,.1f} "
                f"{r['materialised_mib']:>10,.1f}   package {r['package_mib']:,.1f}"
                for r in rows]
    return "\n".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m,qwen2.5-0.5b")
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--layers", type=int, default=None, help="a shallower model of each shape")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "ROW"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(run_row(args.child[0], args.child[1], args.layers)), flush=True)
        return
    results = []
    for m in args.models.split(","):
        for row in args.rows.split(","):
            results.append(_child(m, row, args.layers))
            print(table(results[-1:]).splitlines()[1], flush=True)
    print()
    print(table(results))


if __name__ == "__main__":
    main()
