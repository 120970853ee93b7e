"""Accuracy of the fused activations against float64, next to JAX's float32.

softmax, log_softmax, gelu and silu, JAX on XLA:CPU: the table of docs/numerics.md
("Fused activations"). Run: ``python bench/activation_accuracy.py``.

For each function, the same float32 inputs (``x = s·N(0, 1)``, 4096 values per scale,
rows of 64 for the softmaxes) go through rlxjax on the reference backend (the fused MIL
op, as the reference interpreter evaluates it) and through ``jax.jit``; the reference is
JAX in float64 of the same inputs. Each entry is the normwise error ``max|result −
reference| / max|reference|``. The gradient is that of ``Σ f(x)·w`` (w standard normal).

A second table: the relative error of gelu in its negative tail (x in [-9, -3], where
gelu(x) is -4e-3 .. -1e-18), where ``1 + erf(x/√2)`` (MIL's gelu EXACT, and the reference
interpreter's float64 evaluation of it) cancels and JAX's ``erfc`` form does not.

A third table: the tanh-gelu gradient on a dense grid (x in [-12, 12], 4801 points),
against a float64 evaluation written so that nothing cancels (``s + x·s(1 − s)·w`` with
s a sigmoid; float64 JAX's own ``½(1 + tanh u)`` is 0 below x ≈ -8 and so cannot arbitrate
the tail): the largest absolute error, and the largest relative error for x in [-10, -3]
(gradient -3e-36 .. -1e-2; below x = -10 it is within a factor ~100 of float32's smallest
normal, 1.2e-38, and its sigmoid factor is no longer a normal float32).
"""
from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import rlxjax  # noqa: E402

SCALES = (1.0, 4.0, 12.0)
CASES = {
    "softmax": lambda x: jax.nn.softmax(x, axis=-1),
    "log_softmax": lambda x: jax.nn.log_softmax(x, axis=-1),
    "gelu (erf)": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu (tanh)": lambda x: jax.nn.gelu(x, approximate=True),
    "silu": jax.nn.silu,
}


def _err(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return np.max(np.abs(got - ref)) / np.max(np.abs(ref))


def tail():
    """(x, gelu reference, rlxjax relative error, jax relative error) in gelu's tail."""
    x = np.linspace(-9, -3, 13).astype(np.float32)
    rows = []
    for approximate in (False, True):
        def f(x, approximate=approximate):
            return jax.nn.gelu(x, approximate=approximate)

        with jax.enable_x64(True):
            ref = np.asarray(f(x.astype(np.float64)))
        ours = np.asarray(rlxjax.coreml_jit(f, backend="reference")(x), np.float64)
        theirs = np.asarray(jax.jit(f)(x), np.float64)
        for i in range(0, len(x), 2):
            if ref[i] == 0:  # float64 underflow: no relative error to speak of
                continue
            rows.append((approximate, float(x[i]), ref[i], abs(ours[i] / ref[i] - 1),
                         abs(theirs[i] / ref[i] - 1)))
    return rows


def _tanh_gelu_grad64(x):
    """d/dx of ½x(1 + tanh(u)), u = c(x + a·x³), in float64 without cancellation:
    ½(1 + tanh u) = s = sigmoid(2u) and ½(1 − tanh² u)·u' = s(1 − s)·2u'."""
    x = np.asarray(x, np.float64)
    c, a = np.sqrt(2 / np.pi), 0.044715
    v = 2 * c * (x + a * x ** 3)
    e = np.exp(-np.abs(v))
    s = np.where(v >= 0, 1 / (1 + e), e / (1 + e))
    r = np.where(v >= 0, e / (1 + e), 1 / (1 + e))  # 1 - s
    return s + x * s * r * 2 * c * (1 + 3 * a * x * x)


def grad_grid():
    """(max abs error on [-12, 12], max rel error on [-12, -3]) of the tanh-gelu
    gradient, rlxjax (reference backend) and jax.jit(jax.grad) in float32."""
    x = np.linspace(-12, 12, 4801).astype(np.float32)

    def loss(x):
        return jnp.sum(jax.nn.gelu(x, approximate=True))

    ref = _tanh_gelu_grad64(x)
    tail = (x >= -10) & (x <= -3)
    out = []
    for got in (rlxjax.coreml_grad(loss, backend="reference")(x), jax.jit(jax.grad(loss))(x)):
        err = np.abs(np.asarray(got, np.float64) - ref)
        out.append((err.max(), np.max(err[tail] / np.abs(ref[tail]))))
    return out


def measure():
    rows = []
    for name, f in CASES.items():
        def loss(x, w, f=f):
            return jnp.sum(f(x) * w)

        for s in SCALES:
            rng = np.random.default_rng(0)
            x = (s * rng.standard_normal((64, 64))).astype(np.float32)
            w = rng.standard_normal((64, 64)).astype(np.float32)
            with jax.enable_x64(True):
                ref = np.asarray(f(x.astype(np.float64)))
                gref = np.asarray(jax.grad(loss)(x.astype(np.float64), w.astype(np.float64)))
            ours = rlxjax.coreml_jit(f, backend="reference")(x)
            gours = rlxjax.coreml_grad(loss, backend="reference")(x, w)
            theirs = jax.jit(f)(x)
            gtheirs = jax.jit(jax.grad(loss))(x, w)
            rows.append((name, s, _err(ours, ref), _err(theirs, ref), _err(gours, gref),
                         _err(gtheirs, gref)))
    return rows


def main():
    print(f"{'function':<13} {'scale':>5}  {'rlxjax fwd':>10} {'jax fwd':>9}  "
          f"{'rlxjax grad':>11} {'jax grad':>9}")
    for name, s, a, b, c, d in measure():
        print(f"{name:<13} {s:>5g}  {a:>10.1e} {b:>9.1e}  {c:>11.1e} {d:>9.1e}")
    print("normwise error max|got - ref| / max|ref| vs float64 JAX")
    print(f"\n{'gelu':<6} {'x':>5} {'gelu(x)':>10} {'rlxjax rel':>10} {'jax rel':>9}")
    for approximate, x, r, a, b in tail():
        print(f"{'tanh' if approximate else 'erf':<6} {x:>5g} {r:>10.2e} {a:>10.1e} {b:>9.1e}")
    print("relative error in the negative tail, vs float64 JAX")
    (oa, orl), (ta, trl) = grad_grid()
    print(f"\ntanh-gelu gradient, x in [-12, 12]: max abs error rlxjax {oa:.1e}, jax {ta:.1e}; "
          f"max rel error on [-10, -3]: rlxjax {orl:.1e}, jax {trl:.1e} (vs float64)")


if __name__ == "__main__":
    main()
