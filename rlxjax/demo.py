"""The README's main job (for now): compile a small JAX model with ``coreml_jit``, check it
through coremltools' loader, save the ``.mlpackage`` and compare it with JAX."""
from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np

from .api import coreml_jit


def init_mlp(key, d_in=16, d_hidden=64, d_out=10):
    k1, k2 = jax.random.split(key)
    return {
        "ln": {"scale": jnp.ones((d_in,)), "bias": jnp.zeros((d_in,))},
        "dense_0": {"kernel": jax.random.normal(k1, (d_in, d_hidden)) / np.sqrt(d_in),
                    "bias": jnp.zeros((d_hidden,))},
        "dense_1": {"kernel": jax.random.normal(k2, (d_hidden, d_out)) / np.sqrt(d_hidden),
                    "bias": jnp.zeros((d_out,))},
    }


def mlp(params, x):
    """LayerNorm -> Dense -> gelu -> Dense -> log-softmax, in plain jax.numpy."""
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    h = (x - mu) * jax.lax.rsqrt(var + 1e-5) * params["ln"]["scale"] + params["ln"]["bias"]
    h = jax.nn.gelu(h @ params["dense_0"]["kernel"] + params["dense_0"]["bias"])
    logits = h @ params["dense_1"]["kernel"] + params["dense_1"]["bias"]
    return jax.nn.log_softmax(logits)


def run(out_dir: str = "out", target: str = "iOS17", backend=None) -> dict:
    params = init_mlp(jax.random.PRNGKey(0))
    x = np.asarray(jax.random.normal(jax.random.PRNGKey(1), (8, 16)), dtype=np.float32)

    t0 = time.perf_counter()
    compiled = coreml_jit(mlp, target=target, backend=backend).lower(params, x).compile()
    t_compile = time.perf_counter() - t0
    compiled.validate()
    path = compiled.save(os.path.join(out_dir, "demo_mlp.mlpackage"))

    got = compiled(params, x)
    want = np.asarray(jax.jit(mlp)(params, x))
    err = float(np.max(np.abs(got - want)))
    report = {"path": path, "compile_s": t_compile, "max_abs_err": err,
              "mil_ops": compiled.cost_analysis()["mil_ops"], "target": target,
              "inputs": [s.name for s in compiled.input_specs]}
    print(f"compiled mlp for {target} in {t_compile:.3f}s: {report['mil_ops']} MIL ops")
    print("program inputs: " + ", ".join(report["inputs"]))
    print(f"saved {path}")
    print(f"max |coreml(reference) - jax| = {err:.3e} over {want.size} outputs")
    if not err <= 1e-5:
        raise SystemExit(f"demo FAILED: result differs from JAX by {err}")
    print("demo OK: the ML Program agrees with JAX")
    return report
