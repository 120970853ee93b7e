"""The fuzzer's oracle (tests/frontend/test_fuzz.py explains it): a random program
(tests/fuzz_programs.py) compiled by rlxjax is judged against float64 with JAX's own fp32
error as the yardstick. Shared by the reference-backend fuzzer and the Core AI one
(tests/coreai_format/test_coreai_fuzz.py)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import rlxjax
from fuzz_interp import make_inputs, run

_REFERENCE = {"backend": "reference"}

K_JAX = 8.0   # the bound's K and RTOL: tests/frontend/test_fuzz.py says how they were set
RTOL = 1e-6


def _f64(fun, args):
    with jax.enable_x64(True):
        a64 = [np.asarray(a, np.float64) if np.asarray(a).dtype == np.float32 else a
               for a in args]
        return jax.tree_util.tree_map(np.asarray, fun(a64, jnp.float64))


def assert_close_to_truth(got, want32, want64, what, terms=0.0):
    g_l, g_t = jax.tree_util.tree_flatten(got)
    w_l, w_t = jax.tree_util.tree_flatten(want32)
    e_l = jax.tree_util.tree_leaves(want64)
    assert g_t == w_t, (what, g_t, w_t)
    for k, (g, w, e) in enumerate(zip(g_l, w_l, e_l)):
        g, w, e = np.asarray(g), np.asarray(w), np.asarray(e)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, k, g.shape, g.dtype, w.shape,
                                                          w.dtype)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=f"{what} output {k}")
            continue
        assert np.all(np.isfinite(e)), f"{what} output {k}: float64 reference not finite"
        err = np.abs(g.astype(np.float64) - e)
        err_jax = np.abs(w.astype(np.float64) - e)
        scale = np.abs(e) + (np.max(np.abs(e)) if e.size else 0.0) + terms
        bound = K_JAX * err_jax + RTOL * scale
        bad = ~(err <= bound)
        if bad.any():
            idx = tuple(np.argwhere(bad)[0])
            raise AssertionError(
                f"{what} output {k}: {int(bad.sum())}/{bad.size} elements off; first at {idx}: "
                f"rlxjax {g[idx]!r} jax {w[idx]!r} f64 {e[idx]!r} (bound {bound[idx]:.3g})")


def check_program(prog, **compile_kw):
    """``prog`` through ``coreml_jit`` (``compile_kw``: the backend or format; default the
    reference backend) against ``jax.jit`` and float64."""
    args = make_inputs(prog)

    def fun(*a):
        return run(prog, a)

    # random='inputs': a 'loop_draw' step's bits are JAX's, computed on the host
    got = rlxjax.coreml_jit(fun, random="inputs", **(compile_kw or _REFERENCE))(*args)
    want = jax.jit(fun)(*args)
    want64 = _f64(lambda a, ft: run(prog, a, ft), args)
    assert_close_to_truth(got, want, want64, "coreml_jit", _sensitivity_scale(prog, args))


def _tapped_cotangents(prog, a, ft):
    """float64 pool values and the cotangent of each under the weighted-sum loss."""
    pool = run(prog, a, ft, full=True)
    taps = [jnp.zeros(v.shape, ft) if jnp.issubdtype(v.dtype, jnp.floating) else None
            for v in pool]
    cts = jax.grad(lambda t: _loss(prog, ft, taps=t)(*a))(taps)
    return pool, cts


def _sensitivity_scale(prog, args):
    """First-order effect of rounding every intermediate value: max_k |dL/dv_k · v_k| for the
    weighted-sum loss L of the outputs (float64). A well-conditioned program has it of the
    size of its outputs; a norm over a row made constant by broadcasting has it ~1/sqrt(eps)
    times larger -- the mean of three equal fp32 values is not always that value, and the
    1-ulp difference is multiplied by rsqrt(eps)."""
    def f(a, ft):
        pool, cts = _tapped_cotangents(prog, a, ft)
        return max([0.0] + [float(jnp.max(jnp.abs(c * v))) for c, v in zip(cts, pool)
                            if c is not None and c.size])
    return _f64(f, args)


def _loss(prog, ft, taps=None):
    weights = [np.random.default_rng(prog.seed + 1 + k) for k in range(len(prog.outputs))]

    def loss(*a):
        total = jnp.zeros((), ft)
        for w_rng, o in zip(weights, run(prog, a, ft, taps)):
            if jnp.issubdtype(o.dtype, jnp.floating):
                w = w_rng.uniform(-1, 1, o.shape).astype(np.float32).astype(ft)
                total = total + jnp.sum(o * w)
        return total
    return loss


def check_grad(prog, **compile_kw):
    args = make_inputs(prog)
    argnums = tuple(k for k, (_, kind) in enumerate(prog.inputs) if kind == "f")
    got = rlxjax.coreml_grad(_loss(prog, jnp.float32), argnums=argnums,
                             **(compile_kw or _REFERENCE))(*args)
    want = jax.grad(_loss(prog, jnp.float32), argnums=argnums)(*args)
    want64 = _f64(lambda a, ft: jax.grad(_loss(prog, ft), argnums=argnums)(*a), args)
    assert_close_to_truth(got, want, want64, "coreml_grad", _cotangent_scale(prog, args))


def _cotangent_scale(prog, args):
    """Largest cotangent of any intermediate value (float64): an input's gradient is a sum
    of such terms, so its rounding error scales with them even where the sum cancels."""
    def f(a, ft):
        _, cts = _tapped_cotangents(prog, a, ft)
        return max([0.0] + [float(jnp.max(jnp.abs(c))) for c in jax.tree_util.tree_leaves(cts)
                            if c.size])
    return _f64(f, args)


def _one(check, prog):
    try:
        check(prog)
    finally:
        # every example jits fresh closures; without this JAX's caches grow by tens of MB
        # per example (2 GB after a few hundred gradient examples)
        jax.clear_caches()
