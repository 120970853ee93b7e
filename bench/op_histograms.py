"""MIL op histograms and constant elements of the test workloads' programs.

The histograms count consts too. The programs, compiled for the test workloads
(tests/models.py): forward, rlxjax gradient, JAX's gradient compiled op by op, fp16
forward, and an optax training step; plus the norm backward cases of bench/grad_ops.py.
Compile only, nothing runs. Used to check that a compiler change keeps programs the same
size or smaller:

    python bench/op_histograms.py > before.json   # on the old tree
    python bench/op_histograms.py > after.json
    python bench/op_histograms.py --compare before.json after.json
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))


def _entry(compiled) -> dict:
    cost = compiled.cost_analysis()
    return {"hist": compiled.op_histogram(include_const=True), "mil_ops": cost["mil_ops"],
            "weight_bytes": cost["weight_bytes"]}


def programs() -> dict:
    import jax
    import optax

    import rlxjax
    from grad_ops import norm_backward_ops  # noqa: F401  (import check only)
    from models import workloads

    out = {}
    for name, (loss, params, batch) in sorted(workloads().items()):
        aux = name == "batchnorm_train"
        out[f"{name}/fwd"] = _entry(rlxjax.coreml_jit(loss).lower(params, *batch).compile())
        out[f"{name}/fwd_fp16"] = _entry(
            rlxjax.coreml_jit(loss, precision="fp16").lower(params, *batch).compile())
        out[f"{name}/grad"] = _entry(
            rlxjax.coreml_grad(loss, has_aux=aux).lower(params, *batch).compile())
        out[f"{name}/jax_grad"] = _entry(
            rlxjax.coreml_jit(jax.grad(loss, has_aux=aux)).lower(params, *batch).compile())
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), has_aux=aux)
        st = step.init(params)
        out[f"{name}/train_step"] = _entry(step.lower(st.params, st.opt_state, *batch).compile())
    return out


def compare(before: dict, after: dict) -> int:
    worse = 0
    for name in sorted(before):
        b, a = before[name], after.get(name)
        if a is None:
            print(f"{name}: missing after")
            continue
        ha, hb = a["hist"], b["hist"]
        diff = {k: ha.get(k, 0) - hb.get(k, 0) for k in set(ha) | set(hb)
                if ha.get(k, 0) != hb.get(k, 0)}
        mark = ""
        if a["mil_ops"] > b["mil_ops"] or a["weight_bytes"] > b["weight_bytes"]:
            worse += 1
            mark = "  <-- larger"
        print(f"{name:38s} ops {b['mil_ops']:5d} -> {a['mil_ops']:5d}  weights "
              f"{b['weight_bytes']:8d} -> {a['weight_bytes']:8d}  {diff or ''}{mark}")
    return worse


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:
        with open(sys.argv[2]) as f, open(sys.argv[3]) as g:
            sys.exit(1 if compare(json.load(f), json.load(g)) else 0)
    json.dump(programs(), sys.stdout, indent=1, sort_keys=True)
