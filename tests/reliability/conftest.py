"""tests/reliability/: fault injection on the files and processes a training app lives on.

Shared here: a tiny training problem (its JAX + optax reference in helpers.jax_loop) and
packages saved once per session in both formats, which each test copies before tampering.
"""
import os
import shutil
import sys

import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

rng = np.random.default_rng(7)
P = {"w": (rng.standard_normal((5, 3)) * 0.5).astype(np.float32),
     "b": np.zeros(3, np.float32)}
X = rng.standard_normal((8, 5)).astype(np.float32)
Y = rng.standard_normal((8, 3)).astype(np.float32)


def predict(p, x):
    return jnp.tanh(x @ p["w"] + p["b"])


def loss(p, x, y):
    return jnp.mean((predict(p, x) - y) ** 2)


def has_coreai() -> bool:
    try:
        import coreai.authoring  # noqa: F401
    except ImportError:
        return False
    return True


FORMATS = ["mlpackage", pytest.param("aimodel", marks=pytest.mark.skipif(
    not has_coreai(), reason="format='aimodel' needs coreai-core (rlxjax[coreai])"))]


def make_step(fmt: str, mode: str = "io"):
    import optax

    import rlxjax

    kw = {"target": "iOS18"} if fmt == "mlpackage" else {}
    return rlxjax.coreml_train_step(loss, optax.adam(1e-2), state=mode, format=fmt, **kw)


@pytest.fixture(scope="session")
def saved(tmp_path_factory):
    """fmt -> {"io": path, "mlstate": path, "state": export_state folder of mlstate}."""
    root = tmp_path_factory.mktemp("saved")
    cache = {}

    def get(fmt):
        if fmt not in cache:
            out = {}
            for mode in ("io", "mlstate"):
                step = make_step(fmt, mode)
                st, _ = step(step.init(P, X, Y), X, Y)
                out[mode] = step.save(str(root / f"{mode}.{fmt}"))
                if mode == "mlstate":
                    out["state"] = step.export_state(st, str(root / f"state_{fmt}"))
            cache[fmt] = out
        return cache[fmt]

    return get


def copy(src, dst) -> str:
    shutil.copytree(src, dst, symlinks=True)
    return str(dst)
