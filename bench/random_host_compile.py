"""Compile time of the ``random="inputs"`` host part: one ``jax.jit`` (before) against the
two-stage compile of rlxjax/frontend/random/host_compile.py (after), side by side.

For each model with dropout, the gradient is lowered once (``coreml_grad(loss,
random="inputs")``); then its host part (the draws, computed by JAX on each call) is
compiled fresh several times each way: ``before`` is ``jax.jit`` of the whole host part, as
rlxjax compiled it until issue 26; ``after`` is ``host_compile.Staged`` (integer half with
XLA's backend optimisation off, float half as ``jax.jit`` compiles it). The table gives
median seconds, their ratio, the draws' equality (bit for bit) and the whole first call of
the gradient (trace + lowering + host compile + run) with ``after``, so the host part's
share of it shows. Models: a flax MLP with three dropout layers, and - when keras-hub is
installed (KERAS_BACKEND=jax) - a GPT-2 and a T5 tiny config with dropout 0.1.
Run: ``python bench/random_host_compile.py`` (``--repeats N``).
"""
from __future__ import annotations

import argparse
import os
import statistics
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


def _old_jit(parts):
    """The host part as rlxjax compiled it before: one jax.jit, default options."""
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

    return jax.jit(host)


def _first_call(make, args):
    f = make()
    t = time.perf_counter()
    out = jax.block_until_ready(f(*args))
    return time.perf_counter() - t, out


def measure(name, loss, args, repeats):
    grad = rlxjax.coreml_grad(loss, random="inputs")
    t = time.perf_counter()
    jax.block_until_ready(grad(*args))
    whole = time.perf_counter() - t
    host = grad.lower(*args)._traced.host
    leaves = jax.tree_util.tree_leaves(tuple(args))
    hargs = [leaves[i] for i in host.leaves]
    parts = host.parts
    outvars = parts.needed + parts.host_outs
    before, after, same = [], [], True
    for _ in range(repeats):
        tb, ob = _first_call(lambda: _old_jit(parts), hargs)
        ta, oa = _first_call(lambda: host_compile.Staged(parts.fj, parts.consts,
                                                         parts.host_vars, parts.in_order,
                                                         outvars), hargs)
        before.append(tb)
        after.append(ta)
        same &= all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(oa, ob))
    b, a = statistics.median(before), statistics.median(after)
    return (f"{name:<10} {len(parts.in_order):>6} {b:>9.2f} {a:>9.2f} {b / a:>7.1f}x "
            f"{'yes' if same else 'NO':>6} {whole:>12.2f}")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    opts = ap.parse_args(argv)
    models = [("flax-mlp", flax_mlp)]
    try:
        import keras_hub  # noqa: F401
        models += [("gpt2", lambda: _keras_lm("gpt2")), ("t5", lambda: _keras_lm("t5"))]
    except ImportError:
        print("(keras-hub not installed: the flax model only)")
    print(f"{'model':<10} {'eqns':>6} {'before s':>9} {'after s':>9} {'ratio':>8} "
          f"{'same':>6} {'1st grad s':>12}")
    for name, make in models:
        loss, args = make()
        print(measure(name, loss, args, opts.repeats), flush=True)
    print(f"(medians of {opts.repeats} fresh compiles of each host part; '1st grad s': the "
          "gradient's first call, trace to result, with the two-stage host part)")


if __name__ == "__main__":
    main()
