"""Weight bytes: one package that trains and predicts, against two programs.

The package of ``step.save(path, predict=...)`` against the two programs saved separately,
for a model whose frozen 256x256 fp32 table (closed over, 256 KiB) both the loss and
``predict`` use. The multifunction writer deduplicates weight blobs by content, so the
table is stored once. Also prints the MIL op counts of both functions and the time to save
the package.

Run: ``python bench/multifunction_size.py``.
"""
from __future__ import annotations

import os
import sys
import tempfile
import time

import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import rlxjax  # noqa: E402
from rlxjax.training.multifunction import compile_predict  # noqa: E402

rng = np.random.default_rng(0)
TABLE = rng.standard_normal((256, 256)).astype(np.float32)
PARAMS = {"w": rng.standard_normal((256, 16)).astype(np.float32) * 0.05}
X = rng.standard_normal((8, 256)).astype(np.float32)
Y = rng.standard_normal((8, 16)).astype(np.float32)


def predict(p, x):
    return jnp.tanh(x @ TABLE) @ p["w"]


def loss(p, x, y):
    return jnp.mean((predict(p, x) - y) ** 2)


def weight_bytes(pkg):
    f = os.path.join(pkg, "Data", "com.apple.CoreML", "weights", "weight.bin")
    return os.path.getsize(f) if os.path.exists(f) else 0


def main():
    print(f"frozen table: {TABLE.nbytes} bytes")
    print(f"{'mode':<8}{'train':>10}{'predict':>10}{'sum':>10}{'one pkg':>10}{'ratio':>7}"
          f"{'save s':>8}  MIL ops (train, predict)")
    with tempfile.TemporaryDirectory() as d:
        for mode in ("io", "mlstate"):
            step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), state=mode,
                                            target="iOS18")
            step.init(PARAMS, X, Y)
            train = weight_bytes(step.save(os.path.join(d, f"{mode}_t.mlpackage")))
            pred_c = compile_predict(step, step._latest, predict, [X])
            pred = weight_bytes(pred_c.save(os.path.join(d, f"{mode}_p.mlpackage")))
            times = []
            for i in range(3):
                t0 = time.perf_counter()
                one = step.save(os.path.join(d, f"{mode}_{i}.mlpackage"), predict=(predict, X))
                times.append(time.perf_counter() - t0)
            both = weight_bytes(one)
            n_t = sum(v for k, v in step.last_compiled.op_histogram().items())
            n_p = sum(pred_c.op_histogram().values())
            print(f"{mode:<8}{train:>10}{pred:>10}{train + pred:>10}{both:>10}"
                  f"{both / (train + pred):>7.2f}{sorted(times)[1]:>8.2f}  ({n_t}, {n_p})")


if __name__ == "__main__":
    main()
