"""Fast where it runs (issue 37): four models' forward and training steps on Apple's Core AI
runtime, and their Core ML programs' size.

Models (flax, adam): an MLP 784-256-256-10 at batch 64; a CNN (2 conv + dense) on 28x28x1
at batch 32; a 2-layer transformer encoder (d 128, 4 heads, seq 64) at batch 8; a
GPT-2-style decoder (4 layers, d 256, vocab 8192, seq 128, tied embedding) at batch 4.

Per model, four ``.aimodel`` programs compiled by rlxjax - the forward (weights as
constants; ``fwd_in``: the forward with the parameters as inputs, as a training step has
them), the io training step (parameters and adam state in and out of every call) and
the state training step (``state="mlstate"``: kept in Core AI states, updated in place) -
are loaded into this one process on the Core AI runtime of ``coreai-core`` and called
directly (``coreai.runtime``, no worker process: what an app pays), timed round robin
(medians, ms): ``fwd``, ``fwd_in``, ``io``, ``state`` and their ratios. Beside them, round
robin in the same loop, the two steps as a user calls them, ``step(state, *batch)`` through
rlxjax's worker process (``io_w``, ``state_w``: arrays through shared memory, the state
step's states mirrored to ``/dev/shm`` after each call, the guarantee that a dead worker
loses no completed step), and their ratios to the same assets run directly.
The Core ML programs of the same two steps (iOS18) are counted: ops and bytes moved (read +
written, coreml/cost.py's static model) for io and state.

``--profile`` adds, per step, Core AI's own profile of one call summed by op type (the ops
that cost most). If ``bench/coreai_calls.py`` exists (the worker transport's table), its
``main()`` runs too (``--sizes`` passed on to it). Run: ``python bench/coreai_speed.py
[repeats] [--profile] [--only NAME] [--sizes 4,1K,...]``.

``--coreml`` prints only the Core ML counts (no runtime needed; issue 37, deliverable 2):
per model, the io and state steps' non-const MIL ops, MB read + written and the estimated
peak of temporaries (``memory_analysis``). A/B against another checkout:
``PYTHONPATH=<checkout> python bench/coreai_speed.py --coreml``.
"""
from __future__ import annotations

import asyncio
import collections
import importlib.util
import os
import re
import statistics
import sys
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import rlxjax  # noqa: E402
from scale_models import GPT2  # noqa: E402


def _xent(logits, onehot):
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * onehot, axis=-1))


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Dense(256)(x))
        x = nn.relu(nn.Dense(256)(x))
        return nn.Dense(10)(x)


class CNN(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.relu(nn.Conv(32, (3, 3), padding="SAME")(x))
        x = nn.relu(nn.Conv(64, (3, 3), strides=(2, 2), padding="SAME")(x))
        return nn.Dense(10)(x.reshape(x.shape[0], -1))


class EncoderLayer(nn.Module):
    d: int
    heads: int

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(self.d)(nn.gelu(nn.Dense(4 * self.d)(h)))


class Encoder(nn.Module):
    d: int = 128
    heads: int = 4
    layers: int = 2

    @nn.compact
    def __call__(self, x):
        for _ in range(self.layers):
            x = EncoderLayer(self.d, self.heads)(x)
        return nn.Dense(10)(nn.LayerNorm()(x).mean(axis=1))


def _classifier(model, x, classes=10):
    rng = np.random.default_rng(0)
    y = jax.nn.one_hot(rng.integers(0, classes, x.shape[0]), classes).astype(np.float32)
    params = jax.tree_util.tree_map(np.asarray, model.init(jax.random.PRNGKey(0), x))

    def loss(p, x, y):
        return _xent(model.apply(p, x), y)

    return model.apply, params, (x,), loss, (x, np.asarray(y))


def mlp():
    x = np.random.default_rng(1).standard_normal((64, 784)).astype(np.float32)
    return _classifier(MLP(), x)


def cnn():
    x = np.random.default_rng(1).standard_normal((32, 28, 28, 1)).astype(np.float32)
    return _classifier(CNN(), x)


def transformer():
    x = np.random.default_rng(1).standard_normal((8, 64, 128)).astype(np.float32)
    return _classifier(Encoder(), x)


def gpt2():
    model = GPT2(vocab=8192, positions=128, d=256, layers=4, heads=4)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, model.vocab, (4, 128)).astype(np.int32)
    targets = rng.integers(0, model.vocab, (4, 128)).astype(np.int32)
    params = jax.tree_util.tree_map(np.asarray, model.init(jax.random.PRNGKey(0), tokens))

    def loss(p, tokens, targets):
        return _xent(model.apply(p, tokens), jax.nn.one_hot(targets, model.vocab))

    return model.apply, params, (tokens,), loss, (tokens, targets)


MODELS = {"MLP": mlp, "CNN": cnn, "transformer": transformer, "GPT-2-style": gpt2}


# -- compile ----------------------------------------------------------------------------
def _feeds(compiled, args):
    leaves, tree = jax.tree_util.tree_flatten(tuple(args))
    arrays = compiled._checked_args(leaves, tree)  # noqa: SLF001 - the call's own feeds
    return {s.mil_name: s.to_feature(a) for s, a in zip(compiled.input_specs, arrays)}


def compile_all(make, folder):
    """{program: (asset path, feeds, states or None, compiled)} and the Core ML counts."""
    apply, params, fwd_args, loss, batch = make()
    out = {}
    fwd = rlxjax.coreml_jit(lambda *a: apply(params, *a), format="aimodel").lower(
        *fwd_args).compile()
    out["fwd"] = (fwd.save(os.path.join(folder, "fwd.aimodel")), _feeds(fwd, fwd_args), None,
                  fwd)
    fin = rlxjax.coreml_jit(apply, format="aimodel").lower(params, *fwd_args).compile()
    out["fwd_in"] = (fin.save(os.path.join(folder, "fwd_in.aimodel")),
                     _feeds(fin, (params,) + tuple(fwd_args)), None, fin)
    opt = optax.adam(1e-3)
    io = rlxjax.coreml_train_step(loss, opt, format="aimodel")
    state = io.init(params, *batch)
    c = io.last_compiled
    out["io"] = (c.save(os.path.join(folder, "io.aimodel")),
                 _feeds(c, (state.params, state.opt_state) + tuple(batch)), None, c)
    st = rlxjax.coreml_train_step(loss, opt, format="aimodel", state="mlstate")
    sstate = st.init(params, *batch)
    c = st.last_compiled
    dev = sstate.device
    pieces = {dev.mil_names[n]: a for n, a in dev.read_pieces().items()}
    out["state"] = (c.save(os.path.join(folder, "state.aimodel")), _feeds(c, batch), pieces, c)
    # the same two steps as a user calls them: step(state, *batch), through rlxjax's worker
    # process (arrays in shared memory; the state step's states mirrored after each call)
    held = {"io": state, "state": sstate}

    def io_call():
        io(held["io"], *batch)  # an io step returns new arrays: the state passed in is kept

    def state_call():
        held["state"] = st(held["state"], *batch)[0]  # a state step consumes its state

    out["io_w"], out["state_w"] = io_call, state_call
    coreml = {}
    for mode in ("io", "mlstate"):
        step = rlxjax.coreml_train_step(loss, opt, state=mode, target="iOS18")
        step.init(params, *batch)
        cost = step.last_compiled.cost_analysis()
        coreml[mode] = (cost["mil_ops"], cost["bytes_read"] + cost["bytes_written"])
    return out, coreml


# -- run on the Core AI runtime, in this process ------------------------------------------
def _coreai():
    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray

    return AIModelAsset, NDArray


async def _time(programs, repeats, profile):
    AIModelAsset, NDArray = _coreai()
    models, calls = [], {}
    try:
        for name, program in programs.items():
            if callable(program):  # a call through rlxjax's worker: timed as it is
                program()  # the first call warms up
                calls[name] = (program, None, None)
                continue
            path, feeds, states, _ = program
            ctx = AIModelAsset.load(path).executable()
            model = await ctx.__aenter__()
            models.append(ctx)
            fn = model.load_function("main")
            nd = {k: NDArray(np.ascontiguousarray(v)) for k, v in feeds.items()}
            st = None if states is None else \
                {k: NDArray(np.ascontiguousarray(v)) for k, v in states.items()}
            calls[name] = (fn, nd, st)
            await (fn(nd) if st is None else fn(nd, state=st))  # the first call warms up
        times = {n: [] for n in calls}
        for _ in range(repeats):
            for name, (fn, nd, st) in calls.items():
                t0 = time.perf_counter()
                if nd is None:
                    fn()
                else:
                    await (fn(nd) if st is None else fn(nd, state=st))
                times[name].append(time.perf_counter() - t0)
        prof = {}
        if profile:
            for name, program in programs.items():
                if name in ("io", "state"):
                    path = program[0]
                    prof[name] = await _profile(None, path, calls[name])
        return {n: statistics.median(t) for n, t in times.items()}, prof
    finally:
        for ctx in reversed(models):
            await ctx.__aexit__(None, None, None)


async def _profile(_, path, call):
    """One call of ``path`` under Core AI's profiler: seconds per op type."""
    from coreai.runtime import Profiler

    AIModelAsset, _ = _coreai()
    _, nd, st = call
    begins, spans = {}, collections.Counter()
    counter = iter(range(1 << 30))

    def begin(ev):
        i = next(counter)
        begins[i] = (ev.timestamp, ev.event_id, ev.data)
        return i

    def end(ev, i):
        t0, eid, data = begins.pop(i)
        spans[_op_type(eid, data)] += ev.timestamp - t0

    prof = Profiler(on_log_event_begin=begin, on_log_event_end=end)
    async with AIModelAsset.load(path).executable() as model:
        fn = model.load_function("main", profiler=prof)
        await (fn(nd) if st is None else fn(nd, state=st))
        spans.clear()
        await (fn(nd) if st is None else fn(nd, state=st))
    return spans


def _op_type(eid, data):
    m = re.search(r"coreai\.([a-z_0-9.]+)", data or "") or re.search(r"coreai\.([a-z_0-9.]+)",
                                                                      eid or "")
    return m.group(1).rpartition(".")[2] if m else (eid or "?")


def _histogram(compiled, kinds=("transpose", "reshape", "broadcast_to", "pad", "conv",
                                "matmul", "batch_matmul", "concat", "slice")):
    ops = collections.Counter(o.type for o in compiled.executable.operations())
    return {k: ops[k] for k in kinds if ops[k]}


def coreml_counts(only=None):
    """``--coreml``: the Core ML io and state steps of each model, counted."""
    print(f"rlxjax from {os.path.dirname(rlxjax.__file__)}")
    print(f"{'model':12} {'ops io':>7} {'state':>6} {'st/io':>6} {'MB io':>9} {'state':>9} "
          f"{'st/io':>6} {'temp MiB io':>11} {'state':>7}")
    for name, make in MODELS.items():
        if only and name != only:
            continue
        _, params, _, loss, batch = make()
        got = {}
        for mode in ("io", "mlstate"):
            step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), state=mode,
                                            target="iOS18")
            step.init(params, *batch)
            cost = step.last_compiled.cost_analysis()
            got[mode] = (cost["mil_ops"], (cost["bytes_read"] + cost["bytes_written"]) / 1e6,
                         step.memory_analysis().temp_size_in_bytes / 2 ** 20)
        (oi, bi, ti), (os_, bs, ts) = got["io"], got["mlstate"]
        print(f"{name:12} {oi:7d} {os_:6d} {os_ / oi:6.2f} {bi:9.1f} {bs:9.1f} {bs / bi:6.2f} "
              f"{ti:11.2f} {ts:7.2f}", flush=True)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    profile = "--profile" in argv
    only = argv[argv.index("--only") + 1] if "--only" in argv else None
    if "--coreml" in argv:
        return coreml_counts(only)
    nums = [a for a in argv if a.isdigit()]
    repeats = int(nums[0]) if nums else 20
    from importlib.metadata import version

    print(f"Core AI runtime of coreai-core {version('coreai-core')}, jax {jax.__version__}; "
          f"round robin in one process, median of {repeats} calls (ms)")
    head = (f"{'model':<12} {'fwd':>8} {'fwd_in':>8} {'io':>8} {'state':>8} {'io_w':>8} "
            f"{'state_w':>8} {'io/fwd':>7} {'st/fwd':>7} {'st/io':>6} {'io_w/io':>7} "
            f"{'st_w/st':>7} {'st_w/io_w':>9} | {'ML ops io':>9} {'state':>6} {'ML MB io':>9} "
            f"{'state':>7}")
    print(head)
    rows = []
    for name, make in MODELS.items():
        if only and name != only:
            continue
        with tempfile.TemporaryDirectory() as folder:
            programs, coreml = compile_all(make, folder)
            t, prof = asyncio.run(_time(programs, repeats, profile))
        f, fi, i, s, iw, sw = (t[k] * 1e3 for k in ("fwd", "fwd_in", "io", "state", "io_w",
                                                     "state_w"))
        (oi, bi), (os_, bs) = coreml["io"], coreml["mlstate"]
        print(f"{name:<12} {f:>8.2f} {fi:>8.2f} {i:>8.2f} {s:>8.2f} {iw:>8.2f} {sw:>8.2f} "
              f"{i / f:>7.2f} {s / f:>7.2f} {s / i:>6.2f} {iw / i:>7.2f} {sw / s:>7.2f} "
              f"{sw / iw:>9.2f} | {oi:>9} {os_:>6} {bi / 2**20:>9.1f} {bs / 2**20:>7.1f}")
        for k in ("fwd", "io", "state"):
            print(f"{'':<12}   {k} Core AI ops: {_histogram(programs[k][3])}")
        for k, spans in prof.items():
            spans = collections.Counter({op: v for op, v in spans.items()
                                         if not op.startswith(("Function", "call."))})
            total = sum(spans.values()) or 1
            top = ", ".join(f"{op} {v / total:.0%}" for op, v in spans.most_common(8))
            print(f"{'':<12}   {k} profile: {top}")
        rows.append({"model": name, "fwd_ms": f, "fwd_in_ms": fi, "io_ms": i, "state_ms": s,
                     "io_worker_ms": iw, "state_worker_ms": sw,
                     "coreml_io": coreml["io"], "coreml_state": coreml["mlstate"]})
    calls = os.path.join(HERE, "coreai_calls.py")
    if os.path.exists(calls) and not only:
        spec = importlib.util.spec_from_file_location("coreai_calls", calls)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.main(["--sizes", argv[argv.index("--sizes") + 1]] if "--sizes" in argv else [])
    return rows


if __name__ == "__main__":
    main()
