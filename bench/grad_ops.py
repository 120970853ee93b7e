"""Program size of rlxjax's own gradient against JAX's.

For each model, the non-const MIL op count of ``coreml_grad(loss)`` (rlxjax's grad
transform with fused norm backward ops) and of ``coreml_jit(jax.grad(loss))`` (JAX's AD,
then compiled op by op), with the ratio; then the MIL op count of each norm's backward
lowering alone; then, for each fused activation (softmax, log_softmax, gelu, silu), the
forward and gradient MIL ops with the fused op against the same program with
``recognize_activations`` switched off (the decomposed form JAX emits); likewise attention
(``recognize_attention`` off) on iOS17 and iOS18; then whole attention blocks (nnx
MultiHeadAttention, which calls jax.nn.dot_product_attention, and a causal flax block) with
both passes on and off; then Gemma blocks (bench/gemma_blocks.py: flax's example, with and
without Gemma 2's soft-capping, and keras-hub's GemmaDecoderBlock when keras_hub imports).
Run: ``python bench/grad_ops.py`` (``--blocks`` for the attention blocks only, ``--gemma``
for the Gemma blocks only; the keras-hub one with
``KERAS_BACKEND=jax /work/.venv-keras/bin/python bench/grad_ops.py --gemma``).
"""
from __future__ import annotations

import contextlib
import os
import sys

import jax
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
sys.path.insert(0, os.path.dirname(__file__))

import rlxjax  # noqa: E402
import rlxjax.nn as rnn  # noqa: E402
from models import workloads  # noqa: E402


def mil_ops(fn, *args) -> int:
    f = fn if isinstance(fn, rlxjax.CoreMLFunction) else rlxjax.coreml_jit(fn)
    return f.lower(*args).compile().cost_analysis()["mil_ops"]


def model_table():
    rows = []
    for name, (loss, params, batch) in sorted(workloads().items()):
        has_aux = name == "batchnorm_train"
        ours = mil_ops(rlxjax.coreml_grad(loss, has_aux=has_aux), params, *batch)
        theirs = mil_ops(jax.grad(loss, has_aux=has_aux), params, *batch)
        rows.append((name, ours, theirs, ours / theirs))
    return rows


def norm_backward_ops():
    """MIL ops of one norm's backward (input + parameter gradients) alone: the
    value-and-gradient program of ``sum(norm(...))`` minus its forward program (so the
    count includes the one op that broadcasts the sum's cotangent)."""
    r = np.random.default_rng(0)
    x = r.standard_normal((4, 8, 16)).astype(np.float32)
    xc = r.standard_normal((2, 8, 4, 4)).astype(np.float32)
    v16, v8 = (r.standard_normal(16).astype(np.float32), r.standard_normal(8).astype(np.float32))
    cases = {
        "layer_norm": (lambda x, g, b: rnn.layer_norm(x, g, b), (x, v16, v16)),
        "rms_norm": (lambda x, g, b: rnn.rms_norm(x, g, b), (x, v16, v16)),
        "group_norm (NCHW)": (lambda x, g, b: rnn.group_norm(x, g, b, num_groups=4), (xc, v8, v8)),
        "layer_norm2d": (lambda x, g, b: rnn.layer_norm2d(x, g, b), (xc, v8, v8)),
        "batch_norm_train": (lambda x, g, b: rnn.batch_norm_train(
            x, g, b, running_mean=v16, running_var=np.abs(v16), axis=-1)[0], (x, v16, v16)),
        "ada_layer_norm": (lambda x, s, t: rnn.ada_layer_norm(x, s, t),
                           (x, r.standard_normal((4, 1, 16)).astype(np.float32), v16)),
        "gated_residual": (lambda x, y, g: rnn.gated_residual(x, y, g), (x, x, v16)),
    }
    rows = []
    for name, (f, args) in cases.items():
        def loss(*a, f=f):
            return f(*a).sum()

        fwd = mil_ops(loss, *args)
        both = mil_ops(rlxjax.coreml_value_and_grad(loss, argnums=(0, 1, 2)), *args)
        rows.append((name, both - fwd))
    return rows


@contextlib.contextmanager
def _without(*pass_names):
    """Run with BEFORE_AD passes switched off (the 'decomposed' column)."""
    from rlxjax.transforms import pipeline

    saved = pipeline.BEFORE_AD
    pipeline.BEFORE_AD = tuple(p for p in saved if p not in pass_names)
    try:
        yield
    finally:
        pipeline.BEFORE_AD = saved


def activation_ops():
    """(name, fwd fused, fwd decomposed, grad fused, grad decomposed): non-const MIL ops
    of ``f(*args)`` and of the gradient of ``sum(f(*args)·w)`` (w an input, so nothing
    folds), with the recognising pass on and off."""
    import jax.numpy as jnp

    r = np.random.default_rng(0)
    x = r.standard_normal((8, 64)).astype(np.float32)
    q, k, v = (r.standard_normal((2, 4, 16, 8)).astype(np.float32) for _ in range(3))

    def attend(q, k, v):
        s = jnp.einsum("bhld,bhsd->bhls", q, k) / np.sqrt(8.0)
        return jnp.einsum("bhls,bhsd->bhld", jax.nn.softmax(s), v)

    act = "recognize_activations"
    cases = {
        "softmax": (jax.nn.softmax, (x,), act, "iOS17"),
        "log_softmax": (jax.nn.log_softmax, (x,), act, "iOS17"),
        "gelu (erf)": (lambda x: jax.nn.gelu(x, approximate=False), (x,), act, "iOS17"),
        "gelu (tanh)": (lambda x: jax.nn.gelu(x, approximate=True), (x,), act, "iOS17"),
        "silu": (jax.nn.silu, (x,), act, "iOS17"),
        "attention iOS17": (attend, (q, k, v), "recognize_attention", "iOS17"),
        "attention iOS18": (attend, (q, k, v), "recognize_attention", "iOS18"),
    }
    rows = []
    for name, (f, args, pass_name, target) in cases.items():
        w = r.standard_normal(f(*args).shape).astype(np.float32)

        def loss(*a, f=f):
            return jnp.sum(f(*a[:-1]) * a[-1])

        def both():
            argnums = tuple(range(len(args)))
            return (mil_ops(rlxjax.coreml_jit(f, target=target), *args),
                    mil_ops(rlxjax.coreml_grad(loss, argnums=argnums, target=target),
                            *args, w))

        fused = both()
        with _without(pass_name):
            plain = both()
        rows.append((name, fused[0], plain[0], fused[1], plain[1]))
    return rows


def block_ops():
    """(name, fwd fused, fwd decomposed, grad fused, grad decomposed) on iOS18 for attention
    blocks, recognize_activations and recognize_attention both on / both off."""
    import flax.linen as nn
    import jax.numpy as jnp
    from flax import nnx

    x = np.random.default_rng(0).standard_normal((2, 16, 64)).astype(np.float32)
    m = nnx.MultiHeadAttention(num_heads=4, in_features=64, decode=False, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(m)
    lin = nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=64)
    mask = nn.make_causal_mask(np.ones((2, 16)))
    p = lin.init(jax.random.key(0), x, mask=mask)
    cases = {
        "nnx MHA": (lambda s, x: nnx.merge(graphdef, s)(x), (state, x)),
        "flax causal MHA": (lambda p, x: lin.apply(p, x, mask=mask), (p, x)),
    }
    rows = []
    for name, (f, args) in cases.items():
        w = np.cos(np.arange(x.size, dtype=np.float32)).reshape(x.shape)

        def loss(a0, a1, w, f=f):
            return jnp.sum(f(a0, a1) * w)

        def both():
            return (mil_ops(rlxjax.coreml_jit(f, target="iOS18"), *args),
                    mil_ops(rlxjax.coreml_grad(loss, argnums=(0, 1), target="iOS18"),
                            *args, w))

        fused = both()
        with _without("recognize_activations", "recognize_attention"):
            plain = both()
        rows.append((name, fused[0], plain[0], fused[1], plain[1]))
    return rows


def gemma_ops():
    """(name, fwd fused, fwd decomposed, grad fused, grad decomposed, fused attentions) on
    iOS18 for Gemma blocks as flax's example and keras-hub write them (bench/gemma_blocks.py;
    keras-hub's only where it imports), both passes on / both off; grad w.r.t. the
    parameters and x."""
    import jax.numpy as jnp

    import gemma_blocks

    cases = {"flax Gemma block": gemma_blocks.flax_block,
             "flax Gemma 2 softcap": lambda: gemma_blocks.flax_block(soft_cap=50.0)}
    try:
        import keras_hub  # noqa: F401
        cases["keras-hub Gemma block"] = gemma_blocks.keras_block
        cases["keras-hub Llama block"] = gemma_blocks.keras_llama_block
    except ImportError:
        print("(keras_hub not importable: run under /work/.venv-keras, KERAS_BACKEND=jax, "
              "for the keras-hub block)")
    rows = []
    for name, make in cases.items():
        f, args = make()
        w = np.cos(np.arange(args[1].size, dtype=np.float32)).reshape(args[1].shape)

        def loss(*a, f=f):
            return jnp.sum(f(*a[:-1]) * a[-1])

        def both():
            fwd = rlxjax.coreml_jit(f, target="iOS18").lower(*args).compile()
            grad = rlxjax.coreml_grad(loss, argnums=(0, 1), target="iOS18")
            return (fwd.cost_analysis()["mil_ops"], mil_ops(grad, *args, w),
                    fwd.graph.op_histogram().get("attention", 0))

        fused = both()
        with _without("recognize_activations", "recognize_attention"):
            plain = both()
        rows.append((name, fused[0], plain[0], fused[1], plain[1], fused[2]))
    return rows


def _print_fused(rows):
    print(f"{'fused op':<22} {'fwd':>5} {'decomp':>7} {'ratio':>6} {'grad':>6} {'decomp':>7} "
          f"{'ratio':>6}")
    for name, f1, f0, g1, g0 in rows:
        print(f"{name:<22} {f1:>5} {f0:>7} {f1 / f0:>6.2f} {g1:>6} {g0:>7} {g1 / g0:>6.2f}")


def _print_gemma():
    print("non-const MIL ops of Gemma / Llama blocks on iOS18, fused vs both passes off "
          "(att: fused attention ops)")
    rows = gemma_ops()
    _print_fused([r[:5] for r in rows])
    for r in rows:
        print(f"  {r[0]}: {r[5]} fused attention")


def main():
    if "--gemma" in sys.argv:
        _print_gemma()
        return
    if "--blocks" in sys.argv:
        print("non-const MIL ops of attention blocks on iOS18, fused vs both passes off")
        _print_fused(block_ops())
        return
    print("non-const MIL ops of the training gradient")
    print(f"{'model':<24} {'coreml_grad':>12} {'jit(jax.grad)':>14} {'ratio':>7}")
    for name, ours, theirs, ratio in model_table():
        print(f"{name:<24} {ours:>12} {theirs:>14} {ratio:>7.2f}")
    print("\nMIL ops of each norm's backward alone (input and parameter gradients)")
    for name, n in norm_backward_ops():
        print(f"{name:<24} {n:>5}")
    print("\nnon-const MIL ops of each fused op, fused vs decomposed (its pass off)")
    _print_fused(activation_ops())
    print("\nnon-const MIL ops of attention blocks on iOS18, fused vs both passes off")
    _print_fused(block_ops())
    print()
    _print_gemma()


if __name__ == "__main__":
    main()
