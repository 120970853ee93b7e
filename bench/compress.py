"""Weight compression (``compress=``): package weight bytes and errors per scheme.

For a small transformer LM (flax: token embedding, 2 pre-LN blocks of multi-head attention
and a 4x MLP, d=128, vocabulary 256) and an MLP (256-512-512-10), exports an inference
package per scheme (``export_inference(..., compress=)``, target iOS18) and prints, per
scheme: the size of ``weights/weight.bin`` and its ratio to the fp32 package's, the error of
the dequantised weights (largest max|w_q - w| over the weights, and that divided by
max|w|: ``compiled.compression``), the error of the model's output against the fp32
program's on the same input (reference backend), and the export time (median of 3).
Then, for the transformer LM as a next-token loss: the MIL op count of a training step that
trains only the output head on an int8 base against the full step.

Run: ``python bench/compress.py`` (prints a markdown table; docs/numerics.md holds a copy).
"""
from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import rlxjax  # noqa: E402

SCHEMES = (None, "fp16", "int8", "int4", "palettize8", "palettize4")


class Block(nn.Module):
    d: int = 128
    heads: int = 4

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(self.d)(nn.gelu(nn.Dense(4 * self.d)(h)))


class LM(nn.Module):
    vocab: int = 256
    d: int = 128
    layers: int = 2

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab, self.d)(tokens)
        for _ in range(self.layers):
            x = Block(self.d)(x)
        return nn.Dense(self.vocab, name="head")(nn.LayerNorm()(x))


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        for n in (512, 512):
            x = nn.relu(nn.Dense(n)(x))
        return nn.Dense(10)(x)


def models():
    lm, mlp = LM(), MLP()
    tokens = np.random.default_rng(0).integers(0, 256, size=(2, 16)).astype(np.int32)
    x = np.random.default_rng(1).normal(size=(4, 256)).astype(np.float32)
    return {
        "transformer LM (d 128, 2 layers)": (lambda p, t: lm.apply(p, t),
                                             lm.init(jax.random.PRNGKey(0), tokens), tokens),
        "MLP 256-512-512-10": (lambda p, x: mlp.apply(p, x),
                                 mlp.init(jax.random.PRNGKey(1), x), x),
    }


def weight_bytes(package):
    return os.path.getsize(os.path.join(package, "Data", "com.apple.CoreML", "weights",
                                        "weight.bin"))


def compression_table():
    rows = []
    for name, (fn, params, x) in models().items():
        n = sum(np.size(v) for v in jax.tree_util.tree_leaves(params))
        base_out = base_bytes = None
        for scheme in SCHEMES:
            times = []
            with tempfile.TemporaryDirectory() as tmp:
                path = os.path.join(tmp, "m.mlpackage")
                for _ in range(3):
                    t0 = time.perf_counter()
                    c = rlxjax.export_inference(fn, params, x, path=path, target="iOS18",
                                                compress=scheme, backend="reference-fast")
                    times.append(time.perf_counter() - t0)
                size = weight_bytes(path)
            out = np.asarray(c(x), np.float64)
            if scheme is None:
                base_out, base_bytes = out, size
                rep = None
            else:
                rep = c.compression
            rows.append((name, n, scheme or "fp32", size, size / base_bytes,
                         0.0 if rep is None else rep.max_abs_error,
                         0.0 if rep is None else rep.rel_error,
                         float(np.max(np.abs(out - base_out))),
                         float(np.max(np.abs(base_out))), statistics.median(times)))
    return rows


def train_ops():
    lm = LM()
    tokens = np.random.default_rng(0).integers(0, 256, size=(2, 17)).astype(np.int32)
    params = lm.init(jax.random.PRNGKey(0), tokens[:, :-1])

    def loss(p, t):
        logits = lm.apply(p, t[:, :-1])
        return optax.softmax_cross_entropy_with_integer_labels(logits, t[:, 1:]).mean()

    out = {}
    for label, kw in (("full fine-tuning (fp32)", {}),
                      ("head only, int8 base", dict(
                          trainable=lambda path, leaf: "head" in jax.tree_util.keystr(path),
                          compress="int8", target="iOS18"))):
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), backend="reference-fast", **kw)
        t0 = time.perf_counter()
        st = step.init(params, tokens)
        elapsed = time.perf_counter() - t0
        ops = sum(step.last_compiled.op_histogram().values())
        with tempfile.TemporaryDirectory() as tmp:
            size = weight_bytes(step.save(os.path.join(tmp, "t.mlpackage")))
        st, l0 = step(st, tokens)
        out[label] = (ops, step.last_compiled.op_histogram().get("matmul", 0), size, elapsed)
    return out


def main():
    rows = compression_table()
    print("| model | params | scheme | weight.bin bytes | x fp32 | weights max abs err "
          "| weights max rel err | output max abs err (max abs output) | export s (median) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, n, scheme, size, ratio, err, rel, out_err, peak, t in rows:
        print(f"| {name} | {n} | {scheme} | {size} | {ratio:.3f} | {err:.3g} | {rel:.3g} | "
              f"{out_err:.3g} ({peak:.3g}) | {t:.2f} |")
    print()
    print("| training step (transformer LM) | MIL ops | matmul | weight.bin bytes | "
          "compile s |")
    print("|---|---|---|---|---|")
    for label, (ops, mm, size, t) in train_ops().items():
        print(f"| {label} | {ops} | {mm} | {size} | {t:.2f} |")


if __name__ == "__main__":
    main()
