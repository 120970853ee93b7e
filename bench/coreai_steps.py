"""Training steps on Apple's Core AI runtime: compile time, ops and step time against
``jax.jit`` and the Core ML program on the reference backend.

Per train-step workload (tests/models.py ``workloads``): the time to compile
``coreml_train_step(..., format="aimodel")`` (trace, transform, lower to the coreai dialect,
save, and Core AI's own compile + load in the worker on the first call), its Core AI op
count, and the median step time on Core AI's runtime - in io mode (parameters and adam state
in and out of every call) and in state mode (kept in Core AI states, only the batch and the
loss cross the process boundary) - next to ``jax.jit`` of the same JAX + optax step and the
Core ML program on the reference interpreter's accelerated path, all measured side by side
in one run, in alternation (medians). ``state/jit`` and ``state/fast`` are the ratios. The
Core AI runtime runs in a worker process (rlxjax/coreai/worker.py): each call includes the
round trip through a pipe, which an app calling Core AI in its own process does not pay.
``--gpt2`` adds GPT-2 small's train step (compile time, ops, peak RSS of the worker that
compiles it). Run: ``python bench/coreai_steps.py [repeats] [--gpt2]``.
"""
from __future__ import annotations

import os
import sys
import time

import jax
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import rlxjax  # noqa: E402
from models import workloads  # noqa: E402
from train_step import jax_step, median_times  # noqa: E402  (bench/train_step.py)


def _compiled(loss, params, batch, **kw):
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), **kw)
    state = step.init(params)
    t0 = time.perf_counter()
    state, _ = step(state, *batch)  # traces, lowers, and (Core AI) compiles in the worker
    return step, state, time.perf_counter() - t0


def main(repeats: int = 100, gpt2: bool = False):
    print(f"{'workload':<22} {'compile s':>9} {'AI ops':>7} {'io ms':>8} {'state ms':>9} "
          f"{'fast ms':>8} {'jax.jit ms':>11} {'state/jit':>9} {'state/fast':>10}")
    for name, (loss, params, batch) in sorted(workloads().items()):
        if name == "batchnorm_train":
            continue  # has_aux
        try:
            io, ios, compile_s = _compiled(loss, params, batch, format="aimodel")
            st, sts, _ = _compiled(loss, params, batch, format="aimodel", state="mlstate")
        except rlxjax.RlxError as e:
            print(f"{name:<22} not on Core AI yet: {str(e).splitlines()[0][:90]}")
            continue
        ops = io.last_compiled.cost_analysis()["mil_ops"]
        fast, fs, _ = _compiled(loss, params, batch, backend="reference-fast")
        opt = optax.adam(1e-3)

        jstep = jax_step(loss, opt, batch)
        jp, js = params, opt.init(params)
        jax.block_until_ready(jstep(jp, js))
        fast(fs, *batch)
        holder = {"st": sts}

        def state_step():
            holder["st"], _ = st(holder["st"], *batch)

        t_io, t_st, t_fast, t_jit = median_times(
            [lambda: io(ios, *batch), state_step, lambda: fast(fs, *batch),
             lambda: jax.block_until_ready(jstep(jp, js))], repeats)
        print(f"{name:<22} {compile_s:>9.2f} {ops:>7} {t_io * 1e3:>8.2f} {t_st * 1e3:>9.2f} "
              f"{t_fast * 1e3:>8.2f} {t_jit * 1e3:>11.3f} {t_st / t_jit:>9.1f} "
              f"{t_st / t_fast:>10.2f}")
    if gpt2:
        _gpt2()


def _gpt2(seq: int = 128):
    """GPT-2 small's adam train step (state mode) as an .aimodel: rlxjax's compile (trace,
    grad, lower to coreai, save) and Core AI's own compile + load in a fresh worker, with
    that worker's peak resident memory. Parameters by shape only (no step is run)."""
    import tempfile

    from rlxjax.coreai.worker import Session
    from rlxjax.training.layout import leaf_struct
    from scale_models import gpt2_small

    _, params, _, loss, batch = gpt2_small(concrete=False, seq=seq)
    opt = optax.adam(1e-4)
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", format="aimodel")
    structs = jax.tree_util.tree_map(leaf_struct, params)
    t0 = time.perf_counter()
    compiled = step.lower(structs, jax.eval_shape(opt.init, structs), *batch).compile()
    t_rlx = time.perf_counter() - t0
    ops = compiled.cost_analysis()["mil_ops"]
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        path = compiled.save(os.path.join(d, "gpt2.aimodel"))
        t_save = time.perf_counter() - t0
        t0 = time.perf_counter()
        session = Session(path)
        session.ping("the compile")  # answered once it is loaded
        t_ai = time.perf_counter() - t0
        with open(f"/proc/{session.proc.pid}/status") as f:
            rss = next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
        session.close()
    print(f"GPT-2 small train step (seq {seq}, adam, state mode): rlxjax compile {t_rlx:.1f} s, "
          f"save {t_save:.1f} s, Core AI compile + load {t_ai:.1f} s, {ops} Core AI ops, "
          f"worker peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(*(int(a) for a in args[:1]), gpt2="--gpt2" in sys.argv)
