"""A/B of two checkouts' Core AI lowerings of a coreai_speed.py model, in one process.

Each checkout compiles the model's forward (weights as constants) and its io training step
(adam) in a child process (``PYTHONPATH`` = that checkout) into a folder of ``.aimodel``
assets and their feeds; this process then loads the four assets on the Core AI runtime of
``coreai-core`` and calls them round robin (medians, ms): ``fwd`` and ``io`` per checkout,
io / fwd, and new / base. ``--profile`` adds Core AI's profile of one io call per
checkout, summed by op type. Run from a checkout (the "new" side)::

    python bench/coreai_ab.py --base /tmp/main_checkout [repeats] [--only CNN] [--profile]

(``git archive main | tar -x -C /tmp/main_checkout`` makes the base.)
"""
from __future__ import annotations

import asyncio
import collections
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def emit(folder, model):
    """(child) compile ``model``'s forward and io step with the rlxjax on the path."""
    sys.path.insert(0, HERE)
    import optax

    import coreai_speed as cs
    import rlxjax

    apply, params, fwd_args, loss, batch = cs.MODELS[model]()
    fwd = rlxjax.coreml_jit(lambda *a: apply(params, *a), format="aimodel").lower(
        *fwd_args).compile()
    fwd.save(os.path.join(folder, "fwd.aimodel"))
    np.savez(os.path.join(folder, "fwd.npz"), **cs._feeds(fwd, fwd_args))  # noqa: SLF001
    io = rlxjax.coreml_train_step(loss, optax.adam(1e-3), format="aimodel")
    state = io.init(params, *batch)
    c = io.last_compiled
    c.save(os.path.join(folder, "io.aimodel"))
    feeds = cs._feeds(c, (state.params, state.opt_state) + tuple(batch))  # noqa: SLF001
    np.savez(os.path.join(folder, "io.npz"), **feeds)
    hist = {k: cs._histogram(x) for k, x in (("fwd", fwd), ("io", c))}  # noqa: SLF001
    print(json.dumps({"rlxjax": rlxjax.__file__, "ops": hist}))


def _compile(checkout, folder, model):
    env = dict(os.environ, PYTHONPATH=checkout)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--emit", folder, model],
                       env=env, capture_output=True, text=True, timeout=3600)
    if r.returncode:
        raise RuntimeError(f"compiling with {checkout} failed:\n{r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--emit"]:
        return emit(argv[1], argv[2])
    base = os.path.abspath(argv[argv.index("--base") + 1])
    model = argv[argv.index("--only") + 1] if "--only" in argv else "CNN"
    profile = "--profile" in argv
    nums = [a for a in argv if a.isdigit()]
    repeats = int(nums[0]) if nums else 5
    sys.path.insert(0, HERE)
    import coreai_speed as cs

    with tempfile.TemporaryDirectory() as tmp:
        programs, info = {}, {}
        for side, checkout in (("base", base), ("new", ROOT)):
            folder = os.path.join(tmp, side)
            os.makedirs(folder)
            info[side] = _compile(checkout, folder, model)
            for k in ("fwd", "io"):
                feeds = dict(np.load(os.path.join(folder, k + ".npz")))
                programs[f"{side}_{k}"] = (os.path.join(folder, k + ".aimodel"), feeds, None,
                                           None)
        times, _ = asyncio.run(cs._time(programs, repeats, False))  # noqa: SLF001
        prof = {}
        if profile:
            prof = asyncio.run(_profiles(cs, programs))
    print(f"{model}: Core AI runtime, round robin in one process, median of {repeats} calls (ms)")
    print(f"{'side':<6} {'fwd':>9} {'io':>9} {'io/fwd':>7}  rlxjax")
    for side in ("base", "new"):
        f, i = times[f"{side}_fwd"] * 1e3, times[f"{side}_io"] * 1e3
        print(f"{side:<6} {f:>9.2f} {i:>9.2f} {i / f:>7.2f}  {info[side]['rlxjax']}")
        print(f"{'':<6} ops: {info[side]['ops']}")
        if side in prof:
            spans = prof[side]
            total = sum(spans.values()) or 1
            top = ", ".join(f"{op} {v / total:.0%}" for op, v in spans.most_common(9))
            print(f"{'':<6} io profile ({total / 1e6:.0f} ms in ops): {top}")
    print(f"new/base: fwd {times['new_fwd'] / times['base_fwd']:.2f}, "
          f"io {times['new_io'] / times['base_io']:.2f}")
    return times


async def _profiles(cs, programs):
    from coreai.runtime import NDArray

    out = {}
    for side in ("base", "new"):
        path, feeds, _, _ = programs[f"{side}_io"]
        nd = {k: NDArray(np.ascontiguousarray(v)) for k, v in feeds.items()}
        spans = await cs._profile(None, path, (None, nd, None))  # noqa: SLF001
        out[side] = collections.Counter({op: v for op, v in spans.items()
                                         if not op.startswith(("Function", "call."))})
    return out


if __name__ == "__main__":
    main()
