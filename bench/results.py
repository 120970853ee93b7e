"""Regenerate ``bench/RESULTS.md`` from every benchmark of this folder.

It runs every benchmark of this folder and writes their tables with the machine and
package versions. Run: ``python bench/results.py``
(``--quick`` runs fewer repetitions; the peer needs ``pip install -e .[peer]``;
``--scale`` adds the real-size models of ``bench/scale.py``, which take half an hour with
the peer; ``python bench/scale.py --results`` refreshes that section alone;
``--finetune`` adds bench/finetune.py's GPT-2-sized fine-tuning table, which takes minutes).
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata as md
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ENV_DOC = "/work/.library/env/machines/python.md"
PACKAGES = ("rlxjax", "jax", "jaxlib", "coremltools", "numpy", "flax", "optax",
            "stablehlo-coreml", "protobuf")


SCALE_TITLE = "Real model sizes, fresh process per program (`python bench/scale.py`)"
FINETUNE_TITLE = "Fine-tuning a GPT-2-sized model: LoRA vs full (`python bench/finetune.py`)"


def replace_section(path, title, text, secs) -> None:
    """Put the section ``title`` (its text and seconds) into the RESULTS.md at ``path``,
    in place of the one there or at the end; the rest of the file is left as it was."""
    with open(path) as f:
        body = f.read()
    block = f"## {title}\n\n({secs:.0f} s, {_now()})\n\n```\n{text}\n```\n"
    head = f"## {title}\n"
    start = body.find(head)
    if start < 0:
        body = body.rstrip("\n") + "\n\n" + block
    else:
        end = body.find("\n## ", start + len(head))
        body = body[:start] + block + (body[end + 1:] if end >= 0 else "")
    with open(path + ".tmp", "w") as f:
        f.write(body)
    os.replace(path + ".tmp", path)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _run(args, timeout=3600):
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                       cwd=os.path.dirname(HERE), env=dict(os.environ, TQDM_DISABLE="1"))
    out = "\n".join(ln for ln in p.stdout.splitlines() if "libcoremlpython" not in ln)
    if p.returncode:
        out += f"\n(exited {p.returncode}: {p.stderr.strip().splitlines()[-1:]})"
    return out.rstrip(), time.perf_counter() - t0


def _machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                       cpu)
    except OSError:
        pass
    try:
        load = "%.1f %.1f %.1f" % os.getloadavg()
    except OSError:
        load = "?"
    lines = [f"- CPU: {cpu}, {os.cpu_count()} cores visible; load average at start: {load}",
             f"- OS: {platform.platform()}; Python {platform.python_version()}"]
    if os.path.exists(ENV_DOC):
        with open(ENV_DOC) as f:
            size = next((ln.strip() for ln in f if ln.startswith("Size:")), "")
        if size:
            lines.append(f"- Workplace machine kind (from {ENV_DOC}): "
                         f"{size.split('.')[0].removeprefix('Size: ')}")
    vers = []
    for pkg in PACKAGES:
        try:
            vers.append(f"{pkg} {md.version(pkg)}")
        except md.PackageNotFoundError:
            vers.append(f"{pkg} (not installed)")
    lines.append("- Packages: " + ", ".join(vers))
    return "\n".join(lines)


# Where the op-count target is missed, what is left (from inspecting the programs'
# histograms; python bench/grad_ops.py prints them).
_OPS_GAP = {
    "mlp_block x1": "folding the norm's `add(var, eps)` into `rsqrt`'s epsilon input would "
                    "save one op per norm, but the design notes keep eps out of MIL's rsqrt "
                    "(a Core ML pitfall: fold it in before, pass 0); the loss seed "
                    "`(2*y)*(1/N)` could fold too, except where 2*y overflows.",
    "dit block d128": "what is left is mostly reshapes around batched matmuls on rank-3 inputs; "
                      "lowering those matmuls without flattening needs a lowering change "
                      "(rules/linear.py) checked against JAX with tolerances, not an exact "
                      "pass.",
}


def _targets(rows):
    """The issue's targets, checked against the vs_peer rows."""
    by = {(r["workload"], r["kind"]): r for r in rows}
    out = []
    speed = [(w, r["peer"]["s"] / r["rlxjax"]["s"]) for (w, k), r in by.items()
             if k == "grad" and "s" in r["peer"] and "s" in r["rlxjax"]]
    for w, x in speed:
        out.append(f"- gradient compile {x:.0f}x faster than the peer on {w}: "
                   f"{'met' if x >= 50 else 'NOT met'} (target >= 50x)")
        st = by[(w, "grad")]["rlxjax"].get("stages")
        if x < 50 and st:
            budget = by[(w, "grad")]["peer"]["s"] / 50
            own = st["lower"] - st["jax_trace"] + st["compile"] + st["save"]
            peer_s = by[(w, "grad")]["peer"]["s"]
            out.append(f"  - why: 50x needs the whole compile in {budget * 1e3:.0f} ms; JAX's "
                       f"own tracing of the loss (jax.make_jaxpr) takes "
                       f"{st['jax_trace'] * 1e3:.0f} ms of rlxjax's lower "
                       f"{st['lower'] * 1e3:.0f} ms, then compile {st['compile'] * 1e3:.0f} ms "
                       f"and save {st['save'] * 1e3:.0f} ms. rlxjax's own part is "
                       f"{own * 1e3:.0f} ms; were it zero, JAX's tracing alone would cap the "
                       f"speedup at {peer_s / st['jax_trace']:.0f}x.")
    failed = [w for (w, k), r in by.items() if k == "grad" and "error" in r["peer"]]
    for w in failed:
        out.append(f"- {w}: the peer cannot convert the gradient ({by[(w, 'grad')]['peer']['error']})")
    for side in ("rlxjax", "peer"):
        a, b = by.get(("mlp_block x1", "grad")), by.get(("mlp_block x32", "grad"))
        if a and b and "s" in a[side] and "s" in b[side]:
            x = b[side]["s"] / a[side]["s"]
            out.append(f"- {side}: gradient compile of 32 blocks = {x:.1f}x 1 block"
                       + (f" ({'met' if x <= 40 else 'NOT met'}: target <= 40x)"
                          if side == "rlxjax" else ""))
    for (w, k), r in by.items():
        if k == "grad" and "s" in r["peer"] and "s" in r["rlxjax"]:
            x = r["rlxjax"]["ops"] / r["peer"]["ops"]
            out.append(f"- coreml_grad ops / peer's gradient ops on {w}: {x:.2f} "
                       f"({'met' if x <= 0.7 else 'NOT met'}: target <= 0.7)")
            if x > 0.7:
                short = r["rlxjax"]["ops"] - int(0.7 * r["peer"]["ops"])
                out.append(f"  - why: {short} op(s) too many; " + _OPS_GAP.get(
                    w, "see python bench/grad_ops.py for the histogram."))
    return "\n".join(out)


def _section(body, title):
    """The text of section ``title`` of a RESULTS.md ``body`` (heading included), or None."""
    head = f"## {title}\n"
    start = body.find(head)
    if start < 0:
        return None
    end = body.find("\n## ", start + len(head))
    return body[start:end if end >= 0 else len(body)].rstrip("\n")


def _scale_rows(text):
    """{(model, kind): (rlxjax cols, peer cols)} from bench/scale.py's table."""
    out = {}
    for line in text.splitlines():
        parts = [p.split() for p in line.split("|")]
        if len(parts) >= 3 and len(parts[0]) == 2 and len(parts[1]) == 5:
            out[tuple(parts[0])] = (parts[1], parts[2])
    return out


MIXED_BOUND = 0.05  # docs/numerics.md: mixed precision's documented loss-curve bound


def _targets16(rows, texts):
    """Issue 16's done-when, checked against this run's tables (the scale table from this
    run with --scale, else from the section kept from an earlier ``bench/scale.py`` run)."""
    out = []
    for r in rows:
        if "ops" in r["peer"] and "ops" in r["rlxjax"]:
            x, bound = r["rlxjax"]["ops"] / r["peer"]["ops"], 0.8 if r["kind"] == "fwd" else 0.6
            out.append(f"- {r['kind']} non-const MIL ops / the peer's on {r['workload']}: "
                       f"{x:.2f} ({'met' if x <= bound else 'NOT met'}: target <= {bound})")
    scale = _scale_rows(texts.get("scale") or "")
    if ("gpt2-small", "train") in scale:
        ours = scale[("gpt2-small", "train")][0]
        secs, mb = float(ours[0]), float(ours[2])
        out.append(f"- GPT-2 small train step (adamw) compile {secs:.2f} s, peak RSS {mb:.0f} MB "
                   f"in a fresh process ({'met' if secs <= 3 and mb <= 1536 else 'NOT met'}: "
                   "target <= 3 s and <= 1.5 GB)")
    if ("gpt2-small", "grad") in scale:
        ours, peer = scale[("gpt2-small", "grad")]
        try:
            x = float(peer[0].rstrip("*")) / float(ours[0])  # (* = one repetition)
            out.append(f"- GPT-2 small coreml_grad {x:.0f}x faster than the peer "
                       f"({'met' if x >= 50 else 'NOT met'}: target >= 50x)")
        except ValueError:
            out.append(f"- GPT-2 small coreml_grad: no peer time ({' '.join(peer)})")
    elif not scale:
        out.append("- GPT-2 small targets: no scale table (run `python bench/results.py "
                   "--scale` or `python bench/scale.py --results`)")
    for line in (texts.get("flexible") or "").splitlines():
        if "symbolic_shape" in line:
            out.append(f"- {line} (met)")
    mixed = [ln.split() for ln in (texts.get("mixed") or "").splitlines()]
    mixed = [c for c in mixed if len(c) >= 6 and c[0].replace("_", "").isalpha()
             and c[0] not in ("workload", "batch")]
    for c in mixed:
        try:
            rel = float(c[4])
        except ValueError:
            continue
        out.append(f"- mixed precision, 200 steps of {c[0]}: max relative loss deviation "
                   f"from fp32 JAX {rel:.1e} ({'met' if rel <= MIXED_BOUND else 'NOT met'}: "
                   f"documented bound {MIXED_BOUND:.0%})")
    return "\n".join(out)


def _train_step_target(text):
    """Issue 8's reference-backend target, read from bench/train_step.py's table (the
    accelerated path, backend="reference-fast", against jax.jit)."""
    for line in text.splitlines():
        cols = line.split()
        if cols and cols[0] == "transformer_block" and len(cols) == 8:
            ops, ours, jit, ratio = int(cols[2]), float(cols[4]), float(cols[5]), float(cols[6])
            out = [f"- reference-backend (reference-fast) training step on transformer_block: "
                   f"{ratio:.1f}x jax.jit ({'met' if ratio <= 2 else 'NOT met'}: target <= 2x); "
                   f"the oracle path is {float(cols[7]):.1f}x slower than reference-fast"]
            if ratio > 2:
                out.append(f"  - why: {ours * 1e3 / ops:.1f} us per MIL op: the interpreter "
                           f"dispatches each of the {ops} ops to numpy in turn ({ours:.2f} ms), "
                           f"jax.jit runs the step as one fused XLA executable ({jit:.2f} ms). "
                           "Under 2x would take fusing elementwise chains into single numpy "
                           "calls; compiling the whole program instead would stop the backend "
                           "being an independent, op-by-op check of the MIL.")
            return "\n".join(out)
    return ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one repetition per measurement")
    ap.add_argument("--out", default=os.path.join(HERE, "RESULTS.md"))
    ap.add_argument("--scale", action="store_true",
                    help="also run bench/scale.py (real model sizes; slow)")
    ap.add_argument("--finetune", action="store_true",
                    help="also run bench/finetune.py (GPT-2-sized; slow)")
    args = ap.parse_args(argv)
    reps = ["--repeats", "1"] if args.quick else []
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = _machine()
    with tempfile.TemporaryDirectory() as tmp:
        rows_path = os.path.join(tmp, "rows.json")
        sections = [
            ("rlxjax against stablehlo-coreml (`python bench/vs_peer.py`)",
             _run(["bench/vs_peer.py", "--json", rows_path, *reps])),
            ("Reference backend training step against jax.jit (`python bench/train_step.py`)",
             _run(["bench/train_step.py"])),
            ("Compile time against depth (`python bench/compile_time.py`)",
             _run(["bench/compile_time.py", *reps])),
            ("Gradient program size (`python bench/grad_ops.py`)", _run(["bench/grad_ops.py"])),
            ("Flexible batch (`python bench/flexible.py`)", _run(["bench/flexible.py"])),
            ("Mixed-precision training against fp32 JAX (`python bench/mixed_precision.py`)",
             _run(["bench/mixed_precision.py"])),
            ("JAX's primitive harnesses through rlxjax (`python tools/conformance.py`)",
             _run(["tools/conformance.py", "--show", ""])),
        ]
        if args.scale:
            sections.append((SCALE_TITLE, _run(["bench/scale.py", *reps], timeout=4 * 3600)))
        if args.finetune:
            sections.append((FINETUNE_TITLE, _run(["bench/finetune.py"])))
        rows = json.load(open(rows_path)) if os.path.exists(rows_path) else []
    parts = [f"# Benchmark results\n\nGenerated by `python bench/results.py` on {started}; "
             "every number below comes from that one run.\n\n## Machine\n\n" + machine]
    if rows:
        targets = _targets(rows)
        step_text = next((t for title, (t, _) in sections if "training step" in title), "")
        extra = _train_step_target(step_text)
        parts.append("## Targets (issue 8)\n\n" + targets + ("\n" + extra if extra else ""))
    texts = {key: next((t for title, (t, _) in sections if title.startswith(head)), None)
             for key, head in (("scale", SCALE_TITLE), ("flexible", "Flexible batch"),
                               ("mixed", "Mixed-precision"))}
    kept = []  # the slow sections not re-run keep their earlier text (and its date)
    if os.path.exists(args.out):
        with open(args.out) as f:
            old = f.read()
        for title in (SCALE_TITLE, FINETUNE_TITLE):
            if not any(t == title for t, _ in sections) and _section(old, title):
                kept.append(_section(old, title))
    if texts["scale"] is None:
        texts["scale"] = next((k for k in kept if k.startswith(f"## {SCALE_TITLE}")), None)
    if rows:
        parts.append("## Targets (issue 16)\n\n" + _targets16(rows, texts))
    for title, (text, secs) in sections:
        parts.append(f"## {title}\n\n({secs:.0f} s)\n\n```\n{text}\n```")
    parts.extend(kept)
    body = "\n\n".join(parts) + "\n"
    with open(args.out + ".tmp", "w") as f:
        f.write(body)
    os.replace(args.out + ".tmp", args.out)
    print(body)


if __name__ == "__main__":
    main()
