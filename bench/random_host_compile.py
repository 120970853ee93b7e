"""Compile time of the random="inputs" host part, and its share of a first call.

Measured side by side in one run: the host part compiled each way, and its share of a
dropout model's first ``coreml_grad`` / ``coreml_train_step`` call.

Table 1 (the host part alone, each way compiled fresh ``--repeats`` times, medians of
its first call): ``one jit`` is ``jax.jit`` of the whole host part (rlxjax until issue
26), ``unbatched`` the two stages one equation per draw (integer half with XLA backend
optimisation off: the first fix of issue 26), ``xla b.`` the integer half batched per
signature and compiled with XLA's loop emitter, ``now`` host_compile.Staged as rlxjax
runs it (integer half by numpy where host_numpy.py has every rule - ``stage1`` says which
- else ``xla b.``); ``same``: all four give the same bits; ``xla ms`` / ``now ms``: one
later call of the compiled host part (median of 20).

Table 2 (whole calls, each repeat in fresh processes, medians):
``grad 1st`` the gradient's first call (trace, lowering, Core ML program, host compile,
run) and ``host`` the host part's compile within it; ``step 1st`` a training step's first
call of the same loss after the gradient (its host part is the gradient's: compiled once),
``alone`` a training step's first call with nothing compiled before; ``2nd`` the second
calls, ``host run`` one call of the compiled host part. ``%``: host part / whole call.

Models: a flax MLP with three dropout layers; a 12-layer flax transformer LM with dropout
in every block (embedding, attention weights, both residual branches: 37 draws), the
stand-in for a keras-hub model with dropout where keras is not installed; and - when
keras-hub is installed (KERAS_BACKEND=jax) - GPT-2 and T5 tiny configs with dropout 0.1.
Run: ``python bench/random_host_compile.py`` (``--repeats N``, ``--models a,b``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

import rlxjax  # noqa: E402
from rlxjax.frontend.random import host_compile  # noqa: E402


def flax_mlp():
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x, train=True):
            for _ in range(3):
                x = nn.Dropout(0.1, deterministic=not train)(nn.relu(nn.Dense(64)(x)))
            return nn.Dense(10)(x)

    m = MLP()
    x = np.ones((32, 16), np.float32)
    params = m.init(jax.random.key(0), x, train=False)

    def loss(p, x, key):
        return jnp.mean(m.apply(p, x, rngs={"dropout": key}) ** 2)

    return loss, (params, x, jax.random.key(1))


def flax_transformer(layers=12, d=32, heads=2, seq=12, batch=2, vocab=64):
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x, train=True):
            h = nn.LayerNorm()(x)
            h = nn.MultiHeadDotProductAttention(num_heads=heads, dropout_rate=0.1,
                                                deterministic=not train)(h, h)
            x = x + nn.Dropout(0.1, deterministic=not train)(h)
            h = nn.Dense(d)(nn.gelu(nn.Dense(2 * d)(nn.LayerNorm()(x))))
            return x + nn.Dropout(0.1, deterministic=not train)(h)

    class LM(nn.Module):
        @nn.compact
        def __call__(self, tok, train=True):
            x = nn.Dropout(0.1, deterministic=not train)(nn.Embed(vocab, d)(tok))
            for _ in range(layers):
                x = Block()(x, train)
            return nn.Dense(vocab)(nn.LayerNorm()(x))

    m = LM()
    tok = np.random.default_rng(0).integers(0, vocab, (batch, seq)).astype(np.int32)
    params = m.init(jax.random.key(0), tok, train=False)

    def loss(p, tok, key):
        return jnp.mean(m.apply(p, tok, rngs={"dropout": key}) ** 2)

    return loss, (params, tok, jax.random.key(1))


def _keras_lm(kind):
    import keras
    import keras_hub

    keras.utils.set_random_seed(0)
    V, B, L = 64, 2, 12
    if kind == "gpt2":
        bb = keras_hub.models.GPT2Backbone(vocabulary_size=V, num_layers=4, num_heads=2,
                                           hidden_dim=16, intermediate_dim=32,
                                           max_sequence_length=32, dropout=0.1)
        model = keras_hub.models.GPT2CausalLM(backbone=bb, preprocessor=None)
    else:
        model = keras_hub.models.T5Backbone(vocabulary_size=V, num_layers=2, num_heads=2,
                                            hidden_dim=16, intermediate_dim=32, key_value_dim=8,
                                            dropout=0.1)
    fn, tv, ntv = rlxjax.keras.stateless(model, training=True)
    tok = np.random.default_rng(0).integers(0, V, (B, L)).astype(np.int32)
    mask = np.ones((B, L), bool)
    if kind == "gpt2":
        x = {"token_ids": tok, "padding_mask": mask}
    else:
        x = {"encoder_token_ids": tok, "encoder_padding_mask": mask,
             "decoder_token_ids": tok, "decoder_padding_mask": mask}

    def loss(tv, ntv, x):
        out = fn(tv, ntv, x)
        out = out if kind == "gpt2" else out["decoder_sequence_output"]
        return jnp.mean(out.astype(jnp.float32) ** 2)

    return loss, (tv, ntv, x)


def _env_fn(parts):
    """The host part as one function of its leaves, equations in program order."""
    from rlxjax import _jax_compat as jc

    fj, consts, invars, eqns = parts.fj, parts.consts, parts.host_vars, parts.in_order
    outvars = parts.needed + parts.host_outs

    def host(*leaves):
        env = dict(zip(fj.constvars, consts))
        env.update(zip(invars, leaves))
        read = lambda v: v.val if isinstance(v, jc.Literal) else env[v]  # noqa: E731
        for eqn in eqns:
            for v, o in zip(eqn.outvars, jc.eval_equation(eqn, [read(x) for x in eqn.invars])):
                env[v] = o
        return [read(v) for v in outvars]

    return host


def _staged(parts, batched=True, numpy=True):
    outvars = parts.needed + parts.host_outs
    s = host_compile.Staged(parts.fj, parts.consts, parts.host_vars, parts.in_order, outvars)
    s.numpy = s.numpy and numpy
    if not batched:  # the first fix of issue 26: one equation per step, O0 only
        s.steps = [[e] for e in s.first]
        fast = {"xla_backend_optimization_level": 0}

        def compile_(leaves):
            one = jax.jit(s._stage1).lower(*leaves).compile(compiler_options=fast)
            mid = jax.eval_shape(s._stage1, *leaves)
            return one, jax.jit(s._stage2).lower(list(leaves), mid).compile()

        s._compile = compile_
    return s


def _first_call(make, args):
    f = make()
    t = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    return time.perf_counter() - t, out


def _same(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))


def host_table(name, parts, hargs, repeats):
    ways = {"one jit": lambda: jax.jit(_env_fn(parts)),
            "unbatched": lambda: _staged(parts, batched=False),
            "xla": lambda: _staged(parts, numpy=False),
            "now": lambda: _staged(parts)}
    times = {k: [] for k in ways}
    outs, made = {}, {}
    for _ in range(repeats):
        for k, make in ways.items():
            made[k] = make()
            t, outs[k] = _first_call(lambda: made[k], hargs)
            times[k].append(t)
    med = {k: statistics.median(v) for k, v in times.items()}
    run = {k: 1000 * statistics.median(_timed(made[k], *hargs) for _ in range(20))
           for k in ("xla", "now")}
    same = all(_same(outs[k], outs["one jit"]) for k in ways)
    draws = sum(e.primitive.name == "random_bits" for e in parts.in_order)
    stage1 = "numpy" if made["now"].numpy else "xla"
    return (f"{name:<12} {len(parts.in_order):>5} {draws:>5} {med['one jit']:>8.2f} "
            f"{med['unbatched']:>9.2f} {med['xla']:>7.2f} {med['now']:>6.2f} "
            f"{med['one jit'] / med['now']:>6.1f}x {med['unbatched'] / med['now']:>6.1f}x "
            f"{'yes' if same else 'NO':>5} {stage1:>6} {run['xla']:>7.1f} {run['now']:>7.1f}")


class _HostClock:
    """Seconds spent compiling host parts (host_compile.Staged._compile) while active."""

    def __init__(self):
        self.seconds, self._real = 0.0, host_compile.Staged._compile
        clock = self

        def timed(staged, leaves):
            t = time.perf_counter()
            try:
                return clock._real(staged, leaves)
            finally:
                clock.seconds += time.perf_counter() - t

        host_compile.Staged._compile = timed

    def lap(self):
        s, self.seconds = self.seconds, 0.0
        return s


def _timed(fn, *args):
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def one_process(loss, args, which):
    """One repeat of table 2 in this (fresh) process: 'grad' (gradient, then a training
    step sharing its host part) or 'alone' (a training step with nothing before it)."""
    clock, cols = _HostClock(), {}
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), random="inputs")
    state = [step.init(args[0])]

    def one_step():
        state[0], value = step(state[0], *args[1:])
        return value

    if which == "alone":
        cols["a1"] = _timed(one_step)
        cols["ah"] = clock.lap()
        return cols
    grad = rlxjax.coreml_grad(loss, random="inputs")
    cols["g1"] = _timed(grad, *args)
    cols["gh"] = clock.lap()
    cols["g2"] = _timed(grad, *args)
    cols["s1"] = _timed(one_step)
    cols["sh"] = clock.lap()
    cols["s2"] = _timed(one_step)
    host = grad.lower(*args)._traced.host
    leaves = jax.tree_util.tree_leaves(tuple(args))
    hargs = [leaves[i] for i in host.leaves]
    cols["run"] = statistics.median(_timed(host.fn, *hargs) for _ in range(20))
    return cols


def calls_row(name, repeats):
    """Table 2's row of ``name``: medians over ``repeats`` fresh processes of each kind
    (in one process, JAX's tracing caches would make every repeat after the first warm)."""
    cols: dict = {}
    for _ in range(repeats):
        for which in ("grad", "alone"):
            out = subprocess.run([sys.executable, __file__, "--child", name, which],
                                 capture_output=True, text=True, check=True).stdout
            for k, v in json.loads(out.strip().splitlines()[-1]).items():
                cols.setdefault(k, []).append(v)
    m = {k: statistics.median(v) for k, v in cols.items()}
    pct = lambda h, w: f"{100 * h / w:>4.0f}%"  # noqa: E731
    return (f"{name:<12} {m['g1']:>8.2f} {m['gh']:>5.2f} {pct(m['gh'], m['g1'])} "
            f"{m['g2']:>6.3f} {m['s1']:>8.2f} {m['sh']:>5.2f} {pct(m['sh'], m['s1'])} "
            f"{m['s2']:>6.3f} {m['a1']:>7.2f} {m['ah']:>5.2f} {pct(m['ah'], m['a1'])} "
            f"{1000 * m['run']:>8.1f}")


def _models():
    models = {"flax-mlp": flax_mlp, "flax-lm12": flax_transformer}
    try:
        import keras_hub  # noqa: F401
        models.update(gpt2=lambda: _keras_lm("gpt2"), t5=lambda: _keras_lm("t5"))
    except ImportError:
        pass
    return models


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--models", default=None, help="comma-separated subset of the models")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "WHICH"), help=argparse.SUPPRESS)
    opts = ap.parse_args(argv)
    models = _models()
    if opts.child:
        loss, args = models[opts.child[0]]()
        print(json.dumps(one_process(loss, args, opts.child[1])))
        return
    if "gpt2" not in models:
        print("(keras-hub not installed: the flax models only; flax-lm12 stands in for a "
              "keras-hub model with dropout)")
    names = opts.models.split(",") if opts.models else list(models)
    print(f"\n1. host part compile, s (medians of {opts.repeats})")
    print(f"{'model':<12} {'eqns':>5} {'draws':>5} {'one jit':>8} {'unbatched':>9} "
          f"{'xla b.':>7} {'now':>6} {'vs jit':>7} {'vs unb':>7} {'same':>5} {'stage1':>6} "
          f"{'xla ms':>7} {'now ms':>7}")
    for name in names:
        loss, args = models[name]()
        host = rlxjax.coreml_grad(loss, random="inputs").lower(*args)._traced.host
        leaves = jax.tree_util.tree_leaves(tuple(args))
        print(host_table(name, host.parts, [leaves[i] for i in host.leaves], opts.repeats),
              flush=True)
    print(f"\n2. whole calls with the host part as now, s (medians of {opts.repeats} fresh "
          "processes); host = its compile inside the call")
    print(f"{'model':<12} {'grad 1st':>8} {'host':>5} {'%':>5} {'2nd':>6} {'step 1st':>8} "
          f"{'host':>5} {'%':>5} {'2nd':>6} {'alone':>7} {'host':>5} {'%':>5} "
          f"{'host run ms':>8}")
    for name in names:
        print(calls_row(name, opts.repeats), flush=True)


if __name__ == "__main__":
    main()
