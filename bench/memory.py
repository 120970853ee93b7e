"""Memory of training steps: memory_analysis() against the measured peak and XLA's.

What ``memory_analysis()`` reports, against the reference interpreter's measured peak and
XLA's ``memory_analysis()`` of the same JAX step.

Part 1, the train-step workloads (tests/models.py, adam): temp bytes with the ops in the
order the lowering emits them ("emitted": what every program had before the memory order of
coreml/mil_order.py) and in memory order, the peak of live temporaries the reference
interpreter measures while it runs the ordered program (coreml/interpreter/liveness.py) and
how far the analysis is from it, and XLA's temp for ``jax.jit`` of the same JAX + optax step.

Part 2, GPT-2 small (bench/scale_models.py, adamw, batch 1) at seq 128 and 512: temp and
peak (arguments + weights + the peak of outputs written so far and temporaries; XLA's peak
is argument + output + temp - alias) in emitted order, in memory order,
and in memory order with every block under ``nn.remat`` (jax.checkpoint, nothing saved),
the FLOPs of each step (coreml/cost.py) and what recomputation adds; XLA's temp and
peak for the same step without and with the remat. XLA places
temporaries in output buffers not yet written (a gradient in the buffer of its new
parameter), so its temp is small; rlxjax's temp counts every live value that is not an
output, and ``temp_outside_outputs_in_bytes`` ("temp XLA-like") counts them as XLA does
(rlxjax/memory.py). Then ``state="mlstate"`` (parameters and optimizer state in Core ML
states) with the state codec on chunks (states/mlstate.py ``CHUNK``) and on the whole
packed vector (``CHUNK`` past the vector's length: what every program did before chunks),
next to XLA's step with the parameters and optimizer state donated (updated in place).

Run: ``python bench/memory.py [--layers N] [--seqs 128,512] [--skip-workloads]
[--rows mlstate,mlstate+remat]`` (``--rows``: only those GPT-2 rows).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import jax
import optax

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import rlxjax  # noqa: E402
import rlxjax.coreml.format as coreml_format  # noqa: E402
from rlxjax.states import mlstate  # noqa: E402
from rlxjax.coreml.interpreter.liveness import LiveBytesProgram  # noqa: E402

MIB = 2 ** 20


@contextlib.contextmanager
def emitted_order():
    """Compile with the ops in the order the lowering emits them (no memory order)."""
    saved = coreml_format.order_for_memory
    coreml_format.order_for_memory = lambda model: 0
    try:
        yield
    finally:
        coreml_format.order_for_memory = saved


def xla_stats(loss, opt, params, opt_state, batch, has_aux=False, donate=False):
    """XLA's memory_analysis() of jax.jit of the step; ``donate``: parameters and optimizer
    state donated (updated in place, as ``state="mlstate"`` updates its states)."""
    def step(p, s, *b):
        g = jax.grad(loss, has_aux=has_aux)(p, *b)
        g = g[0] if has_aux else g
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s

    return jax.jit(step, donate_argnums=(0, 1) if donate else ()).lower(
        params, opt_state, *batch).compile().memory_analysis()


def feeds_of(compiled, *args):
    leaves, treedef = jax.tree_util.tree_flatten(tuple(args))
    arrays = compiled._checked_args(leaves, treedef)
    return {s.mil_name: s.to_feature(a) for s, a in zip(compiled.input_specs, arrays)}


def workloads_table():
    from models import workloads

    print(f"{'workload':<22} {'emitted KiB':>11} {'ordered KiB':>11} {'ordered/emitted':>15} "
          f"{'measured KiB':>12} {'analysis-measured':>17} {'XLA temp KiB':>12}")
    for name, (loss, params, batch) in sorted(workloads().items()):
        has_aux = name == "batchnorm_train"
        opt = optax.adam(1e-3)
        with emitted_order():
            s0 = rlxjax.coreml_train_step(loss, opt, has_aux=has_aux)
            s0.init(params, *batch)
        step = rlxjax.coreml_train_step(loss, opt, has_aux=has_aux)
        st = step.init(params, *batch)
        c = step.last_compiled
        before, after = s0.memory_analysis(), step.memory_analysis()
        prog = LiveBytesProgram(c.spec, c._weights_dir)
        _, m = prog.measure(feeds_of(c, st.params, st.opt_state, *batch))
        x = xla_stats(loss, opt, params, opt.init(params), batch, has_aux)
        t0, t1, tm = before.temp_size_in_bytes, after.temp_size_in_bytes, m["peak_temp_bytes"]
        print(f"{name:<22} {t0 / 1024:>11.1f} {t1 / 1024:>11.1f} {t1 / t0:>15.2f} "
              f"{tm / 1024:>12.1f} {(t1 - tm) / tm:>16.2%} {x.temp_size_in_bytes / 1024:>12.1f}")


@contextlib.contextmanager
def whole_vector_codec():
    """Compile ``state="mlstate"`` steps with the codec on the whole packed vector."""
    saved = mlstate.CHUNK
    mlstate.CHUNK = 2 ** 62
    try:
        yield
    finally:
        mlstate.CHUNK = saved


#: (label, per-block remat, memory order, state mode) of every GPT-2 row
GPT2_ROWS = (("emitted", False, False, "io"), ("ordered", False, True, "io"),
             ("ordered+remat", True, True, "io"), ("mlstate", False, True, "mlstate"),
             ("mlstate+remat", True, True, "mlstate"),
             ("mlstate unchunked", False, True, "mlstate"))


def gpt2_rows(seq, layers, only=None):
    from scale_models import gpt2_small

    rows = []
    xla = {}  # (remat, donated) -> XLA's stats
    for label, remat, ordered, state in GPT2_ROWS:
        if only is not None and label not in only:
            continue
        _, params, _, loss, batch = gpt2_small(seq=seq, remat=remat, layers=layers)
        opt = optax.adamw(1e-4)
        ostate = jax.eval_shape(opt.init, params)
        t0 = time.perf_counter()
        with contextlib.ExitStack() as stack:
            if not ordered:
                stack.enter_context(emitted_order())
            if label.endswith("unchunked"):
                stack.enter_context(whole_vector_codec())
            c = rlxjax.coreml_train_step(loss, opt, target="iOS18", state=state).lower(
                params, ostate, *batch).compile()
        secs = time.perf_counter() - t0
        m = c.memory_analysis()
        x = None
        if label in ("ordered", "ordered+remat", "mlstate", "mlstate+remat"):
            key = (remat, state)
            if key not in xla:
                xla[key] = xla_stats(loss, opt, params, ostate, batch,
                                     donate=state == "mlstate")
            x = xla[key]
        rows.append((label, m, c.cost_analysis()["flops"], x, secs))
    return rows


def gpt2_table(seqs, layers, only=None):
    print(f"\nGPT-2 small ({layers} layers, d 768, vocab 50257), batch 1, adamw, iOS18 fp32, "
          "state='io' unless the row says mlstate")
    print(f"{'seq':>4} {'program':<17} {'temp MiB':>9} {'x emitted':>9} {'temp XLA-like':>13} "
          f"{'peak MiB':>9} {'GFLOP':>7} {'recompute':>9} {'XLA temp':>9} {'XLA peak':>9} "
          f"{'compile s':>9}")
    for seq in seqs:
        rows = gpt2_rows(seq, layers, only)
        by = {r[0]: r for r in rows}
        base_temp = by["emitted"][1].temp_size_in_bytes if "emitted" in by else None
        for label, m, flops, x, secs in rows:
            # recomputation's (and the state codec's) flops: against the io step's, or the
            # mlstate step's without remat
            base = by.get("mlstate" if label.startswith("mlstate") else "ordered")
            extra = f"{(flops - base[2]) / base[2]:+.1%}" if base is not None and \
                label.endswith("+remat") else ""
            times = f"{m.temp_size_in_bytes / base_temp:>9.2f}" if base_temp else f"{'':>9}"
            xt = f"{x.temp_size_in_bytes / MIB:9.1f}" if x is not None else f"{'':>9}"
            xa = (f"{(x.argument_size_in_bytes + x.output_size_in_bytes + x.temp_size_in_bytes - x.alias_size_in_bytes) / MIB:9.1f}"  # noqa: E501
                  if x is not None else f"{'':>9}")
            print(f"{seq:>4} {label:<17} {m.temp_size_in_bytes / MIB:>9.1f} "
                  f"{times} "
                  f"{m.temp_outside_outputs_in_bytes / MIB:>13.1f} "
                  f"{m.peak_memory_in_bytes / MIB:>9.1f} "
                  f"{flops / 1e9:>7.1f} {extra:>9} {xt} {xa} {secs:>9.1f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seqs", default="128,512")
    ap.add_argument("--skip-workloads", action="store_true")
    ap.add_argument("--rows", default=None,
                    help="only these GPT-2 rows, comma-separated (of: "
                         + ", ".join(r[0] for r in GPT2_ROWS) + "); implies --skip-workloads")
    args = ap.parse_args(argv)
    only = None
    if args.rows is not None:
        only = {r.strip() for r in args.rows.split(",")}
        unknown = only - {r[0] for r in GPT2_ROWS}
        if unknown:
            ap.error(f"unknown rows {sorted(unknown)}")
    if not args.skip_workloads and only is None:
        workloads_table()
    gpt2_table([int(s) for s in args.seqs.split(",")], args.layers, only)


if __name__ == "__main__":
    main()
