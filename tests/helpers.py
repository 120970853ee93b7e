"""Shared test oracle: compile with rlxjax, validate with coremltools' loader, run on the
test backend, and compare with jax.jit of the same function.

The test backend is the reference backend (the numpy MIL interpreter's general path, the
oracle) unless ``RLXJAX_TEST_BACKEND`` says otherwise: ``coreml`` (macOS only) runs programs
on Core ML's own runtime, ``reference-fast`` on the interpreter's accelerated path, including
those the tests request with ``backend="reference"`` (see conftest.py); ``coreai`` compiles
the programs ``check_against_jax`` checks with ``format="aimodel"`` and runs them on Apple's
Core AI runtime (each in its worker process, rlxjax/coreai/worker.py): a program Core AI
cannot take yet (an rlxjax error saying so) is a skip with the reason, a runtime death or
hang a failure naming the program."""
from __future__ import annotations

import os

import jax
import numpy as np

import rlxjax

FP32_TOL = dict(rtol=1e-5, atol=1e-6)
TEST_BACKENDS = ("reference", "reference-fast", "coreml", "coreai")
TEST_BACKEND = os.environ.get("RLXJAX_TEST_BACKEND", "").strip() or "reference"

#: ``RLXJAX_TEST_EXAMPLES=full`` draws every example the hypothesis tests that use
#: ``examples`` were written with; by default they draw half of them (rounded up), so the
#: default suite (JAX's reference costs an XLA compile per drawn example) stays near its 10
#: minutes.
FULL_EXAMPLES = os.environ.get("RLXJAX_TEST_EXAMPLES", "").strip() == "full"


def examples(n: int) -> int:
    """The number of hypothesis examples a test written with ``n`` draws in this run."""
    return n if FULL_EXAMPLES or n <= 2 else (n + 1) // 2


def assert_tree_close(got, want, rtol=1e-5, atol=1e-6):
    g_leaves, g_tree = jax.tree_util.tree_flatten(got)
    w_leaves, w_tree = jax.tree_util.tree_flatten(want)
    assert g_tree == w_tree, f"structure {g_tree} != {w_tree}"
    for g, w in zip(g_leaves, w_leaves):
        w = np.asarray(w)
        assert isinstance(g, np.ndarray), type(g)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)


def check_against_jax(fun, *args, rtol=1e-5, atol=1e-6, target="iOS17", precision="fp32",
                      static_argnums=(), validate=True):
    """Compile ``fun`` for ``args``, validate it, run it on the test backend and compare
    with ``jax.jit(fun)``. Returns the Compiled object."""
    if TEST_BACKEND == "coreai":
        return _check_on_core_ai(fun, args, rtol, atol, precision, static_argnums, validate)
    cf = rlxjax.coreml_jit(fun, target=target, precision=precision,
                           static_argnums=static_argnums, backend=TEST_BACKEND)
    compiled = cf.lower(*args).compile()
    if validate:
        compiled.validate()
    dyn = [a for i, a in enumerate(args) if i not in compiled_static(static_argnums)]
    got = compiled(*dyn)
    want = jax.jit(fun, static_argnums=static_argnums)(*args)
    assert_tree_close(got, want, rtol=rtol, atol=atol)
    return compiled


def not_for_core_ai_yet(e: BaseException) -> bool:
    """Whether ``e`` is rlxjax saying Core AI cannot take a program yet (a skip under
    RLXJAX_TEST_BACKEND=coreai), not a failure."""
    from rlxjax.coreai.worker import CoreAIRuntimeError
    from rlxjax.errors import RlxError, UnsupportedPrimitiveError

    if isinstance(e, CoreAIRuntimeError):  # a death or a hang: a failure
        return False
    text = str(e)
    return isinstance(e, UnsupportedPrimitiveError) or (
        isinstance(e, RlxError) and ("Core AI" in text or "aimodel" in text)
        and ("not" in text or "only" in text))


def _check_on_core_ai(fun, args, rtol, atol, precision, static_argnums, validate):
    import pytest

    try:
        cf = rlxjax.coreml_jit(fun, format="aimodel", precision=precision,
                               static_argnums=static_argnums, backend="coreai")
        compiled = cf.lower(*args).compile()
        if validate:
            compiled.validate()
    except Exception as e:  # noqa: BLE001 - classified: "not yet" is a skip
        if not_for_core_ai_yet(e):
            pytest.skip(f"not for Core AI yet: {type(e).__name__}: {str(e).splitlines()[0]}")
        raise
    dyn = [a for i, a in enumerate(args) if i not in compiled_static(static_argnums)]
    got = compiled(*dyn)  # a runtime death / hang raises CoreAIRuntimeError naming it
    want = jax.jit(fun, static_argnums=static_argnums)(*args)
    assert_tree_close(got, want, rtol=rtol, atol=atol)
    return compiled


def compiled_static(static_argnums):
    return set(static_argnums if isinstance(static_argnums, (tuple, list)) else (static_argnums,))


def jax_loop(loss, opt, params, batch, steps):
    """The reference training loop: ``steps`` jitted JAX + optax steps on one batch;
    returns the final params and the loss of every step."""
    import optax

    @jax.jit
    def step(p, s):
        v, g = jax.value_and_grad(loss)(p, *batch)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, v

    p, s, losses = params, opt.init(params), []
    for _ in range(steps):
        p, s, v = step(p, s)
        losses.append(float(v))
    return p, losses


def jax_steps(loss, opt, params, batches):
    """The reference training loop over a list of batches (passed as arguments, so their
    shapes may change from step to step): one jitted JAX + optax step per batch; returns the
    final params and the loss of every step."""
    import optax

    @jax.jit
    def step(p, s, *batch):
        v, g = jax.value_and_grad(loss)(p, *batch)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, v

    p, s, losses = params, opt.init(params), []
    for batch in batches:
        p, s, v = step(p, s, *batch)
        losses.append(float(v))
    return p, losses


def jax_masked_loop(full, flags, loss_fn, optimizer, steps, batches):
    """JAX + optax on the leaves of ``full`` where ``flags`` (one per leaf) is True, the
    others fixed at their values in ``full`` (the reference of a ``trainable=`` step):
    (the loss of every step, the whole trained tree). Batches are cycled."""
    import jax.numpy as jnp
    import optax

    leaves, treedef = jax.tree.flatten(full)
    trained = [jnp.asarray(x) for x, m in zip(leaves, flags) if m]

    def merged(t):
        it = iter(t)
        return jax.tree.unflatten(treedef, [next(it) if m else x
                                            for x, m in zip(leaves, flags)])

    @jax.jit
    def step(trained, opt_state, x, y):
        loss, g = jax.value_and_grad(lambda t: loss_fn(merged(t), x, y))(trained)
        updates, opt_state = optimizer.update(g, opt_state, trained)
        return optax.apply_updates(trained, updates), opt_state, loss

    opt_state, out = optimizer.init(trained), []
    for i in range(steps):
        trained, opt_state, loss = step(trained, opt_state, *batches[i % len(batches)])
        out.append(float(loss))
    return out, merged(trained)


def load_tool(name: str):
    """The module ``tools/<name>.py`` (tools/ is no package): for tests of the tools."""
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "tools", f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- random="device": loss curves against JAX's noise band ---------------------------------
def loss_windows(losses, w):
    """Mean loss per window of ``w`` consecutive steps (one curve: a 1-d array)."""
    return np.asarray(losses, np.float64).reshape(-1, w).mean(1)


def noise_band(curves, sds=4.0, floor=0.1):
    """JAX's loss curves (runs x windows) over different keys -> (mean, half-width) per
    window: ``sds`` run-to-run standard deviations, and at least ``floor`` of the mean
    (a few runs underestimate the spread)."""
    curves = np.asarray(curves, np.float64)
    m = curves.mean(0)
    return m, np.maximum(sds * curves.std(0), floor * np.abs(m))


def assert_tracks_noise_band(ours, jax_curves, trains=0.5):
    """Each of our windowed curves lies in JAX's noise band, and trains (last window below
    ``trains`` x first); returns (mean, half-width) for reporting."""
    mean, tol = noise_band(jax_curves)
    for curve in ours:
        curve = np.asarray(curve)
        assert (np.abs(curve - mean) <= tol).all(), (curve, mean, tol)
        assert curve[-1] < trains * curve[0], curve
    return mean, tol


def without_and_with(monkeypatch, module, pass_name: str, build):
    """(``module.pass_name`` switched off, left on) results of ``build()``: a Core ML MIL
    pass compared with the program it changes (tests/memory/)."""
    out = []
    for on in (False, True):
        with monkeypatch.context() as m:
            if not on:
                m.setattr(module, pass_name, lambda model: 0)
            out.append(build())
    return out


def mlp_workload():
    """(loss, params, batch) of the flax MLP + LayerNorm (models.workloads()'s
    'mlp_layernorm'), built alone: workloads() builds six models."""
    from models import MLP, cross_entropy, onehot, rng_data

    (x,), y, m = rng_data(0, (8, 16)), onehot(1, 8, 4), MLP()
    return (lambda p, x, y: cross_entropy(m.apply(p, x), y),
            m.init(jax.random.PRNGKey(0), x), (x, y))


def bits(a):
    """The bits of an fp32 / fp16 array, as unsigned integers (to compare exactly: -0.0,
    NaN payloads)."""
    a = np.asarray(a)
    return a.view({4: np.uint32, 2: np.uint16}[a.dtype.itemsize])


def skip_module_without(*modules: str) -> None:
    """Skip the calling test module when any of ``modules`` is not installed, without
    importing them (``pytest.importorskip`` imports: flwr-datasets pulls in Flower's
    simulation and its plotting, seconds in every xdist worker at collection)."""
    import importlib.util

    import pytest

    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)} (pip install 'rlxjax[flower]')",
                    allow_module_level=True)
