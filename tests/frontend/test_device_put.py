"""``jax.device_put`` inside a compiled function is the identity (issue 13)."""
import jax
import jax.numpy as jnp
import numpy as np

import rlxjax
from helpers import assert_tree_close


def test_device_put_is_the_identity_forward_and_grad():
    x, i = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3), np.arange(3, dtype=np.int32)

    def f(x, i):
        y, j = jax.device_put((x * 2, i + 1))
        return jax.device_put(y, jax.devices()[0]) + j, j

    assert_tree_close(rlxjax.coreml_jit(f, backend="reference")(x, i), jax.jit(f)(x, i),
                      rtol=0, atol=0)
    loss = lambda x: jnp.sum(f(x, i)[0] ** 2)  # noqa: E731
    assert_tree_close(rlxjax.coreml_grad(loss, backend="reference")(x), jax.grad(loss)(x),
                      rtol=1e-6, atol=1e-6)
