"""The exact simplification passes: the program shrinks, the numbers stay JAX's."""
import jax
import jax.numpy as jnp
import numpy as np

import rlxjax
from helpers import check_against_jax
from rlxjax.transforms.simplify import collapse_reshapes, drop_broadcasts


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_broadcast_into_binary_op_becomes_implicit():
    f = lambda x, b: x * jnp.broadcast_to(b[:, None], x.shape) + 1.0  # noqa: E731
    compiled = check_against_jax(f, _x(3, 4), _x(3))
    assert "tile" not in compiled.op_histogram()
    # jnp.broadcast_to's full-shape broadcast is gone; b[:, None] stays (a size-1 reshape)
    assert not any(n.op == "broadcast_in_dim" and n.output.shape == (3, 4)
                   for n in compiled.graph.nodes)


def test_broadcast_kept_where_it_is_needed():
    # returned as an output, and used against an operand that is not full-shape
    f = lambda b, c: (jnp.broadcast_to(b[:, None], (3, 4)), jnp.broadcast_to(b[:, None], (3, 4)) * c)  # noqa: E731,E501
    compiled = check_against_jax(f, _x(3), _x(4))
    assert any(n.op == "broadcast_in_dim" for n in compiled.graph.nodes)


def test_reshape_chains_collapse():
    f = lambda x: jnp.reshape(jnp.reshape(x, (6, 2)), (3, 4)) * 2  # noqa: E731
    lowered = rlxjax.coreml_jit(f).lower(_x(2, 6))
    assert sum(n.op == "reshape" for n in lowered.graph.nodes) == 1
    assert drop_broadcasts(lowered.graph) == 0 and collapse_reshapes(lowered.graph) == 0
    check_against_jax(f, _x(2, 6))
    g = lambda x: jnp.reshape(jnp.reshape(x, (12,)), (2, 6)) + 1  # noqa: E731
    assert not any(n.op == "reshape" for n in rlxjax.coreml_jit(g).lower(_x(2, 6)).graph.nodes)
    check_against_jax(g, _x(2, 6))


def test_weight_gradient_needs_no_transpose():
    loss = lambda w, x: jnp.sum(jnp.tanh(x @ w))  # noqa: E731
    grad = rlxjax.coreml_grad(loss).lower(_x(4, 5), _x(3, 4)).compile()
    assert "transpose" not in grad.op_histogram()
    np.testing.assert_allclose(grad(_x(4, 5), _x(3, 4)), jax.grad(loss)(_x(4, 5), _x(3, 4)),
                               rtol=1e-5, atol=1e-6)
