"""``lax.dynamic_update_slice`` on Core AI (coreai/ops_shape.py): an update spanning all but
one axis - a KV cache's new position - is one ``scatter_along_axis``, one spanning every
axis is the update itself, others are placed by gathers and a mask; all bit for bit JAX's,
starts out of range clamped as JAX clamps them."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax

pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core (rlxjax[coreai])")

X = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3) - 7.5
CASES = [  # (update shape, starts): one window axis; every axis whole; two window axes
    ((2, 1, 3), (0, 3, 0)), ((2, 2, 3), (0, 4, 0)), ((2, 1, 3), (0, -2, 0)),
    ((2, 5, 3), (1, 2, 1)), ((1, 2, 3), (1, 3, 0)), ((1, 1, 1), (5, -1, 2))]


def test_dynamic_update_slice_is_jax_bit_for_bit():
    updates = [(-np.arange(np.prod(s), dtype=np.float32) - 100).reshape(s) for s, _ in CASES]
    starts = [np.array(st, np.int32) for _, st in CASES]

    def f(x, ups, sts):
        return tuple(jax.lax.dynamic_update_slice(x, u, tuple(s[i] for i in range(3)))
                     for u, s in zip(ups, sts))

    c = rlxjax.coreml_jit(f, format="aimodel").lower(X, updates, starts).compile()
    got = c(X, updates, starts)
    want = jax.jit(f)(X, updates, starts)
    for g, w, case in zip(got, want, CASES):
        np.testing.assert_array_equal(g, np.asarray(w), err_msg=str(case))
    ops = c.op_histogram()
    assert ops.get("scatter_along_axis", 0) == 3   # the three one-window-axis cases


def test_an_int32_cache_row_update():
    x = jnp.zeros((3, 4), jnp.int32)
    c = rlxjax.coreml_jit(lambda x, r, i: jax.lax.dynamic_update_slice(x, r, (i, 0)),
                          format="aimodel")
    row = np.array([[7, -8, 9, 2**31 - 1]], np.int32)
    for i in (0, 2, 9):
        want = jax.lax.dynamic_update_slice(x, row, (i, 0))
        np.testing.assert_array_equal(c(np.asarray(x), row, np.int32(i)), np.asarray(want))
