"""Shared by tests/reliability/: a tiny training problem (its JAX + optax reference in
helpers.jax_loop), the formats to run on, and the step factory."""
import shutil

import jax.numpy as jnp
import numpy as np
import pytest


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


def copy(src, dst) -> str:
    shutil.copytree(src, dst, symlinks=True)
    return str(dst)
