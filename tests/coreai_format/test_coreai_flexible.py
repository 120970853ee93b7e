"""Flexible shapes on Core AI (docs/flexible.md, docs/coreai.md): flexible= with listed
sizes compiles one static Core AI function per size into one asset, and each call runs the
one for its sizes on Apple's runtime (in the worker) - forward, gradient and training steps
against JAX at every size; a range beside listed sizes is refused (ranges alone:
test_coreai_range.py)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import rlxjax
from rlxjax.errors import ArgumentError, DynamicShapeError

pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core (rlxjax[coreai])")
optax = pytest.importorskip("optax")

from helpers import jax_steps  # noqa: E402

rng = np.random.default_rng(3)


def _f32(*shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def mlp(w1, b1, w2, x):
    h = jnp.tanh(x @ w1 + b1)
    logits = h @ w2
    # a mean over the flexible axis (its divisor the runtime size), a reshape of it, a
    # broadcast to it, a slice beside it
    return (jax.nn.softmax(logits, axis=-1), jnp.mean(logits), h.reshape(-1),
            jnp.ones((x.shape[0], 3)) * b1[0], jax.lax.slice_in_dim(h, 1, 3, axis=1))


W = (_f32(6, 8), _f32(8), _f32(8, 3))
SIZES = [1, 7, 16]


def _close(got, want, rtol=2e-5, atol=2e-6):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def test_forward_runs_each_enumerated_size_and_loads_back(tmp_path):
    f = rlxjax.coreml_jit(mlp, format="aimodel", flexible={"x": {0: SIZES}})
    xs = {n: _f32(n, 6, scale=1.0) for n in SIZES}
    for n in (7, 1, 16, 7):  # one compiled program, the function of each size
        _close(f(*W, xs[n]), jax.jit(mlp)(*W, xs[n]))
    compiled = f.lower(*W, xs[1]).compile()
    text = compiled.as_text()
    assert [f"@main__flex0_{n}(" in text for n in SIZES] == [True] * 3
    spec = compiled.input_specs[-1]
    assert spec.shape == ("flex0", 6) and spec.bounds[0] == (1, 16, (1, 7, 16))
    with pytest.raises(ArgumentError) as got:
        f(*W, _f32(5, 6))
    # the same error as the Core ML format's for a size not listed
    coreml = rlxjax.coreml_jit(mlp, backend="reference", flexible={"x": {0: SIZES}})
    with pytest.raises(ArgumentError) as want:
        coreml(*W, _f32(5, 6))
    assert str(got.value) == str(want.value) and "enumerated sizes [1, 7, 16]" in str(got.value)

    m = rlxjax.load(compiled.save(tmp_path / "flex.aimodel"), flat=True)
    for n in (16, 1):
        out = m(*W, xs[n])
        _close([out[k] for k in m.output_names], jax.tree_util.tree_leaves(
            jax.jit(mlp)(*W, xs[n])))
    with pytest.raises(ArgumentError, match="enumerated sizes"):
        m(*W, _f32(5, 6))


def test_a_range_beside_listed_sizes_and_too_many_shapes_are_refused():
    """A range compiles to one function with dynamic dims (test_coreai_range.py), listed
    sizes to one static function each: one program cannot be both."""
    f = rlxjax.coreml_jit(lambda x, y: (x * 2, y + 1), format="aimodel",
                          flexible={"x": {0: (1, 64)}, "y": {0: [1, 8]}})
    with pytest.raises(DynamicShapeError, match=r"input 'x' axis 0 has a flexible range "
                       r"while other flexible axes list enumerated sizes"):
        f.lower(_f32(2, 6), _f32(1, 3)).compile()

    def two(a, b):
        return jnp.sum(a) + jnp.sum(b)

    with pytest.raises(ArgumentError, match="132 enumerated shapes.*at most 128"):
        rlxjax.coreml_jit(two, format="aimodel", flexible={
            "a": {0: list(range(1, 13))}, "b": {0: list(range(1, 12))}},
        ).lower(_f32(2, 3), _f32(2, 3)).compile()


def loss(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)


P = {"w1": _f32(6, 8), "b1": np.zeros(8, np.float32), "w2": _f32(8, 2)}


def test_gradient_with_a_flexible_batch():
    g = rlxjax.coreml_grad(loss, format="aimodel", flexible={"x": {0: [3, 10]},
                                                             "y": {0: [3, 10]}})
    for n in (10, 3):
        x, y = _f32(n, 6, scale=1.0), _f32(n, 2, scale=1.0)
        _close(g(P, x, y), jax.grad(loss)(P, x, y), rtol=1e-5, atol=1e-6)


def test_train_steps_with_a_flexible_batch_in_io_and_state_mode(tmp_path):
    opt = optax.adam(1e-2)
    sizes = [4, 16]
    batches = [(_f32(n, 6, scale=1.0), _f32(n, 2, scale=1.0)) for n in sizes] * 10
    want_p, want = jax_steps(loss, opt, P, batches)
    got = {}
    for mode in ("io", "mlstate"):
        step = rlxjax.coreml_train_step(loss, opt, format="aimodel", state=mode,
                                        flexible={"x": {0: sizes}, "y": {0: sizes}})
        st_ = step.init(P, *batches[0])
        losses = []
        for x, y in batches:  # 20 adam steps, the batch size alternating
            st_, v = step(st_, x, y)
            losses.append(float(v))
        got[mode] = losses
        np.testing.assert_allclose(losses, want, rtol=1e-4)
        for k in P:
            np.testing.assert_allclose(st_.params[k], want_p[k], rtol=1e-4, atol=1e-5)
    assert got["io"] == got["mlstate"]  # the same fp32 programs around the states
    assert want[-2] < 0.8 * want[0] and want[-1] < 0.8 * want[1]  # it learns
    with pytest.raises(ArgumentError, match="enumerated sizes"):
        step(st_, _f32(5, 6), _f32(5, 2))


@settings(max_examples=5, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=3, unique=True))
def test_each_specialised_function_has_the_static_programs_signature(sizes):
    """The static functions of a flexible program have the types a static trace at that
    size has (no runtime: the lowering only)."""
    flex = rlxjax.coreml_jit(mlp, format="aimodel", flexible={"x": {0: sizes}})
    ex = flex.lower(*W, _f32(sizes[0], 6)).compile().executable
    assert [s for s, _ in ex.variants] == [{"flex0": n} for n in sorted(sizes)]
    for n, (_, low) in zip(sorted(sizes), ex.variants):
        static = rlxjax.coreml_jit(mlp, format="aimodel").lower(*W, _f32(n, 6)).compile()
        stat = static.executable.lowered
        assert [(s.io_shape, s.io_dtype) for s in low.inputs + low.outputs] == \
            [(s.io_shape, s.io_dtype) for s in stat.inputs + stat.outputs]
