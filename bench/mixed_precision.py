"""Mixed-precision training against fp32 JAX: loss curves, bytes per step.

Per training workload (tests/models.py, the losses bench/train_step.py times), 200
adam(1e-3) steps on its batch with ``coreml_train_step(..., precision="mixed")``
(reference-fast backend: fp16 forward and backward, fp32 weights and moments, dynamic loss
scaling) next to ``jax.jit`` of the fp32 step, and next to the same mixed algorithm written
in plain JAX (jnp.float16 through JAX's autodiff, tests/mixed_reference.py), which shows
how much of the deviation fp16 itself causes. Columns:

* ``max rel``: max over steps of |loss_mixed − loss_fp32| / |loss_fp32| (rlxjax mixed);
  ``jax16 rel``: the same for the plain-JAX mixed reference;
* ``final ratio``: loss_mixed / loss_fp32 after the last step;
* ``skipped``: steps skipped on inf/nan gradients, ``scale``: the final loss scale;
* ``MB fp32`` / ``MB mixed``: bytes read + written by the step's MIL ops (the static cost
  model, rlxjax/coreml/cost.py), and their ratio;
* ``coreai rel`` / ``coreai end``: the max rel deviation and the final ratio of the same
  mixed step as a Core AI program (``format="aimodel"``: the fp16 forward / backward as
  Core AI fp16 ops, whose matmuls accumulate in fp16) on Apple's Core AI runtime, when
  coreai-core is installed; ``refused`` names what Core AI's fp16 rules do not lower yet.

A second table is the cost model alone (nothing run) for the step of a 4-layer relu MLP
(width 256) at growing batch: total bytes moved per step, fp32 vs mixed, how much of the
mixed step's traffic is fp16, and the matmuls' bytes ratio. The fp32 optimizer update
(and the per-parameter cost of mixed precision: casts in and out, the unscale, a select
per parameter and moment) does not grow with the batch; the fp16 forward/backward does.

Run: ``python bench/mixed_precision.py [steps]``.
"""
from __future__ import annotations

import os
import sys

import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import rlxjax  # noqa: E402
from mixed_reference import fp32_step, mixed_init, mixed_step  # noqa: E402
from models import workloads  # noqa: E402

WORKLOADS = ("channelnet_groupnorm", "cnn_groupnorm", "dit_block", "mlp_layernorm",
             "transformer_block")


def curves(loss, params, batch, steps, lr=1e-3):
    """(rlxjax mixed, JAX fp32, JAX mixed) loss curves, skipped steps, final scale, and the
    fp32 and mixed steps' compiled programs."""
    opt = optax.adam(lr)
    mixed = rlxjax.coreml_train_step(loss, opt, precision="mixed", backend="reference-fast")
    st = mixed.init(params)
    ours, skipped = [], 0
    for _ in range(steps):
        before = mixed.scale_of(st)
        st, value = mixed(st, *batch)
        skipped += mixed.scale_of(st) < before
        ours.append(float(value))
    scale = mixed.scale_of(st)
    fp32 = rlxjax.coreml_train_step(loss, opt, backend="reference-fast")
    fp32(fp32.init(params), *batch)

    ref, p, s = fp32_step(loss, opt), params, opt.init(params)
    want = []
    for _ in range(steps):
        p, s, value = ref(p, s, *batch)
        want.append(float(value))
    ref16, p, s = mixed_step(loss, opt), params, mixed_init(opt, params)
    jax16 = []
    for _ in range(steps):
        p, s, value = ref16(p, s, *batch)
        jax16.append(float(value))
    return (np.array(ours), np.array(want), np.array(jax16), skipped, scale,
            fp32.last_compiled, mixed.last_compiled)


def coreai_curve(loss, params, batch, steps, lr=1e-3):
    """The mixed step's loss curve on the Core AI runtime, or the error that refuses it."""
    try:
        step = rlxjax.coreml_train_step(loss, optax.adam(lr), precision="mixed",
                                        format="aimodel")
        st, out = step.init(params), []
        for _ in range(steps):
            st, value = step(st, *batch)
            out.append(float(value))
    except rlxjax.errors.BackendUnavailableError:
        return None
    except rlxjax.errors.UnsupportedPrimitiveError as e:
        return e
    return np.array(out)


def moved(compiled) -> int:
    c = compiled.cost_analysis()
    return c["bytes_read"] + c["bytes_written"]


def rows(steps: int = 200, names=WORKLOADS):
    out = []
    for name, (loss, params, batch) in sorted(workloads().items()):
        if name not in names:
            continue
        ours, want, jax16, skipped, scale, c32, c16 = curves(loss, params, batch, steps)
        ai = coreai_curve(loss, params, batch, steps)
        if isinstance(ai, np.ndarray):
            ai = (float(np.max(np.abs(ai - want) / np.abs(want))), float(ai[-1] / want[-1]))
        elif ai is not None:
            ai = f"refused ({ai.primitive})"
        out.append(dict(coreai=ai, 
            workload=name, loss0=want[0], fp32_final=want[-1], mixed_final=ours[-1],
            max_rel=float(np.max(np.abs(ours - want) / np.abs(want))),
            jax16_rel=float(np.max(np.abs(jax16 - want) / np.abs(want))),
            final_ratio=float(ours[-1] / want[-1]), skipped=int(skipped), scale=scale,
            bytes_fp32=moved(c32), bytes_mixed=moved(c16),
            ops_fp32=c32.cost_analysis()["mil_ops"], ops_mixed=c16.cost_analysis()["mil_ops"]))
    return out


def mlp_loss(p, x, y):
    h = x
    for w, b in p[:-1]:
        h = jnp.maximum(h @ w + b, 0)
    w, b = p[-1]
    return jnp.mean((h @ w + b - y) ** 2)


def bytes_rows(width=256, layers=4, batches=(16, 256, 1024, 4096)):
    r = np.random.default_rng(0)
    p = [(r.normal(size=(width, width)).astype(np.float32) / np.sqrt(width),
          np.zeros(width, np.float32)) for _ in range(layers)]
    out = []
    for batch in batches:
        x = r.normal(size=(batch, width)).astype(np.float32)
        y = r.normal(size=(batch, width)).astype(np.float32)
        cost = {}
        for prec in ("fp32", "mixed"):
            step = rlxjax.coreml_train_step(mlp_loss, optax.adam(1e-3), precision=prec)
            cost[prec] = step.lower(p, step.init(p).opt_state, x, y).compile().cost_analysis()
        mm = {k: sum(o["bytes_read"] + o["bytes_written"] for o in c["ops"]
                     if o["type"] == "matmul") for k, c in cost.items()}
        total = {k: c["bytes_read"] + c["bytes_written"] for k, c in cost.items()}
        out.append(dict(batch=batch, fp32=total["fp32"], mixed=total["mixed"],
                        fp16=cost["mixed"]["bytes_by_dtype"].get("FLOAT16", 0),
                        matmul_ratio=mm["mixed"] / mm["fp32"]))
    return out


def _coreai(ai) -> str:
    if ai is None:
        return f"{'-':>10} {'-':>10}"
    if isinstance(ai, str):
        return ai
    return f"{ai[0]:10.2e} {ai[1]:10.4f}"


def main(steps: int = 200):
    print(f"{steps} adam(1e-3) steps, precision='mixed' (reference-fast) vs jax.jit fp32")
    print(f"{'workload':<22} {'loss0':>7} {'fp32 end':>9} {'mixed end':>9} {'max rel':>8} "
          f"{'jax16 rel':>9} {'final':>7} {'skipped':>7} {'scale':>7} {'MB fp32':>8} "
          f"{'MB mixed':>8} {'ratio':>6} {'ops':>9} {'coreai rel':>10} {'coreai end':>10}")
    for r in rows(steps):
        print(f"{r['workload']:<22} {r['loss0']:7.4f} {r['fp32_final']:9.5f} "
              f"{r['mixed_final']:9.5f} {r['max_rel']:8.2e} {r['jax16_rel']:9.2e} "
              f"{r['final_ratio']:7.4f} {r['skipped']:7d} {r['scale']:7.0f} "
              f"{r['bytes_fp32'] / 1e6:8.3f} {r['bytes_mixed'] / 1e6:8.3f} "
              f"{r['bytes_mixed'] / r['bytes_fp32']:6.2f} "
              f"{r['ops_fp32']:>4}/{r['ops_mixed']:<4} {_coreai(r['coreai'])}")
    print()
    print("bytes moved per step (cost model), adam step of a 4-layer relu MLP, width 256")
    print(f"{'batch':>6} {'MB fp32':>9} {'MB mixed':>9} {'ratio':>6} {'fp16 share':>10} "
          f"{'matmul ratio':>12}")
    for r in bytes_rows():
        print(f"{r['batch']:>6} {r['fp32'] / 1e6:9.2f} {r['mixed'] / 1e6:9.2f} "
              f"{r['mixed'] / r['fp32']:6.2f} {r['fp16'] / r['mixed']:10.2f} "
              f"{r['matmul_ratio']:12.2f}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
