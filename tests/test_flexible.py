"""Flexible shapes (docs/flexible.md): a function lowered with a symbolic batch
(jax.export.symbolic_shape, or coreml_jit's flexible=) is one Core ML program with RangeDim
inputs that passes coremltools' loader and runs at any size in range on the reference
backend, matching jax.jit at each size."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from jax import export

import rlxjax
from rlxjax.errors import ArgumentError, DynamicShapeError


def _mlp(w1, b1, w2, x):
    h = jnp.tanh(x @ w1 + b1)
    logits = h @ w2
    probs = jax.nn.softmax(logits, axis=-1)
    # a mean over the flexible axis (divides by the runtime size), a reshape of it, a
    # broadcast to it and a slice beside it
    return (probs, jnp.mean(logits), h.reshape(-1), jnp.ones((x.shape[0], 3)) * b1[0],
            jax.lax.slice_in_dim(h, 1, 3, axis=1), jnp.mean(h, axis=0))


def _params(rng):
    return (rng.standard_normal((16, 32)).astype(np.float32),
            rng.standard_normal(32).astype(np.float32),
            rng.standard_normal((32, 5)).astype(np.float32))


def _check(compiled, fn, params, sizes, rng):
    for n in sizes:
        x = rng.standard_normal((n, 16)).astype(np.float32)
        got, want = compiled(*params, x), jax.jit(fn)(*params, x)
        for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


def test_symbolic_batch_runs_at_1_7_and_64_from_one_package(tmp_path):
    rng = np.random.default_rng(0)
    params = _params(rng)
    (b,) = export.symbolic_shape("b", constraints=["b <= 128"])
    structs = [jax.ShapeDtypeStruct(p.shape, p.dtype) for p in params]
    x = jax.ShapeDtypeStruct((b, 16), jnp.float32)
    compiled = rlxjax.coreml_jit(_mlp, backend="reference").lower(*structs, x).compile()
    compiled.validate()  # coremltools' MIL loader
    feat = {f.name: f for f in compiled.spec.description.input}["x"].type.multiArrayType
    assert [(r.lowerBound, r.upperBound) for r in feat.shapeRange.sizeRanges] == \
        [(1, 128), (16, 16)]
    fn_input = {i.name: i for i in compiled.spec.mlProgram.functions["main"].inputs}["x"]
    assert fn_input.type.tensorType.dimensions[0].WhichOneof("dimension") == "unknown"
    path = compiled.save(tmp_path / "flex.mlpackage")
    loaded = rlxjax.load(path, backend="reference")  # the one package, at every size
    for n in (1, 7, 64):
        x = rng.standard_normal((n, 16)).astype(np.float32)
        got = loaded(*params, x)
        want = jax.tree_util.tree_leaves(jax.jit(_mlp)(*params, x))
        assert len(got) == len(want)
        for g, w in zip(got.values(), want):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)
    _check(compiled, _mlp, params, (1, 7, 64), rng)


def test_flexible_option_names_the_axes_and_compiles_once():
    rng = np.random.default_rng(1)
    params = _params(rng)
    f = rlxjax.coreml_jit(_mlp, backend="reference", flexible={"x": {0: (1, 64)}})
    _check(f, _mlp, params, (3, 1, 64), rng)
    assert len(f._cache) == 1  # one program for every batch size
    with pytest.raises(ArgumentError, match=r"'x' axis 0 .* is 65, outside the flexible "
                                            r"range \[1, 64\]"):
        f(*params, np.zeros((65, 16), np.float32))


def test_flexible_by_position_and_unbounded():
    rng = np.random.default_rng(2)
    params = _params(rng)
    f = rlxjax.coreml_jit(_mlp, backend="reference", flexible={3: {0: None}})
    compiled = f.lower(*params, np.zeros((2, 16), np.float32)).compile()
    feat = {s.name: s for s in compiled.input_specs}["x"]
    assert feat.bounds[0] == (1, -1)
    _check(f, _mlp, params, (5, 200), rng)


@settings(max_examples=4, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_flexible_two_inputs_share_the_batch(n, seed):
    def loss(w, x, y):
        pred = x @ w
        return jnp.mean((pred - y) ** 2), jnp.sum(pred * y, axis=1)

    f = rlxjax.coreml_jit(loss, backend="reference",
                          flexible={"x": {0: (1, 16)}, "y": {0: (1, 16)}})
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    x = rng.standard_normal((n, 4)).astype(np.float32)
    y = rng.standard_normal((n, 3)).astype(np.float32)
    got, want = f(w, x, y), jax.jit(loss)(w, x, y)
    for g, wv in zip(got, want):
        np.testing.assert_allclose(g, wv, rtol=2e-5, atol=2e-5)
    with pytest.raises(ArgumentError, match="one size per call"):
        f(w, x, np.zeros((n + 1, 3), np.float32))


def test_the_reference_backend_checks_the_range():
    from rlxjax.runtime import make_backend
    from rlxjax.runtime.reference.interpreter import ReferenceRuntimeError

    (b,) = export.symbolic_shape("b", constraints=["b >= 2", "b <= 4"])
    c = rlxjax.coreml_jit(lambda x: x * 2.0, backend="reference").lower(
        jax.ShapeDtypeStruct((b, 3), jnp.float32)).compile()
    run = make_backend("reference", c.spec, c._weights_dir)
    assert run.run({c.input_specs[0].mil_name: np.ones((3, 3), np.float32)})
    with pytest.raises(ReferenceRuntimeError, match="outside the flexible shape range"):
        run.run({c.input_specs[0].mil_name: np.ones((5, 3), np.float32)})


def test_what_cannot_be_flexible_is_a_clear_error():
    (b,) = export.symbolic_shape("b")
    x = jax.ShapeDtypeStruct((b, 8), jnp.float32)
    with pytest.raises(DynamicShapeError, match=r"(gather|slice) at .*test_flexible.py.*flexible dimension .b."):
        rlxjax.coreml_jit(lambda x: x[1:]).lower(x).compile()
    with pytest.raises(DynamicShapeError, match=r"^scan at .*test_flexible.py.*'b'"):
        rlxjax.coreml_jit(lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * 2.0, x)).lower(x)
    with pytest.raises(DynamicShapeError, match=r"^concatenate at .*test_flexible.py.*'b'"):
        rlxjax.coreml_jit(lambda x: jnp.concatenate([x, x])).lower(x)
    (e,) = export.symbolic_shape("2*c")
    with pytest.raises(DynamicShapeError, match=r"input 'x' axis 0 .* '2\*c', an expression"):
        rlxjax.coreml_jit(lambda x: x).lower(jax.ShapeDtypeStruct((e, 8), jnp.float32))


def _flax_models():
    import flax.linen as nn

    class CNN(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(4, (3, 3))(x))
            x = nn.max_pool(nn.avg_pool(x, (2, 2), (2, 2)), (2, 2), (1, 1))
            return nn.Dense(5)(x.reshape((x.shape[0], -1)))

    class Block(nn.Module):  # pre-norm transformer block, mean-pooled
        @nn.compact
        def __call__(self, x):
            h = nn.LayerNorm()(x)
            x = x + nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8)(h, h)
            x = x + nn.Dense(8)(nn.gelu(nn.Dense(16)(nn.LayerNorm()(x))))
            return nn.Dense(3)(x.mean(axis=1))

    return {"cnn": (CNN(), (6, 6, 2)), "transformer": (Block(), (5, 8))}


@pytest.mark.slow  # ~25 s: two flax models compiled and run at three sizes
@pytest.mark.parametrize("name", ["cnn", "transformer"])
def test_flax_models_with_a_flexible_batch(name):
    model, shape = _flax_models()[name]
    params = model.init(jax.random.PRNGKey(0), jnp.ones((2,) + shape))
    fn = lambda p, x: model.apply(p, x)  # noqa: E731
    f = rlxjax.coreml_jit(fn, backend="reference", flexible={"x": {0: (1, 64)}})
    rng = np.random.default_rng(3)
    for n in (1, 7, 64):
        x = rng.standard_normal((n,) + shape).astype(np.float32)
        np.testing.assert_allclose(f(params, x), jax.jit(fn)(params, x), rtol=1e-4, atol=2e-5)
    (compiled,) = f._cache.values()
    compiled.validate()


@pytest.mark.parametrize("mode", ["io", "mlstate"])
def test_train_step_with_a_flexible_batch(mode):
    """One training program steps at batch 1, 7 and 64; the mean divides by the runtime
    batch, so loss and parameters follow optax in JAX at every size."""
    import optax

    def loss(p, x, y):
        return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)

    rng = np.random.default_rng(4)
    params = {"w1": rng.standard_normal((4, 8)).astype(np.float32) * 0.5,
              "b1": np.zeros(8, np.float32),
              "w2": rng.standard_normal((8, 2)).astype(np.float32) * 0.5}
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, state=mode, backend="reference",
                                    flexible={"x": {0: (1, 64)}, "y": {0: (1, 64)}})
    state, jp, js = step.init(params), params, opt.init(params)

    @jax.jit
    def jstep(p, s, x, y):
        value, g = jax.value_and_grad(loss)(p, x, y)
        updates, s = opt.update(g, s, p)
        return optax.apply_updates(p, updates), s, value

    for n in (1, 7, 64):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        y = rng.standard_normal((n, 2)).astype(np.float32)
        state, value = step(state, x, y)
        jp, js, want = jstep(jp, js, x, y)
        np.testing.assert_allclose(value, want, rtol=2e-5)
    assert len(step._programs) == 1
    got = step.params(state) if mode == "io" else None
    if got is not None:
        for k in params:
            np.testing.assert_allclose(got[k], jp[k], rtol=1e-4, atol=1e-6)
    with pytest.raises(ArgumentError, match="batch arguments only"):
        rlxjax.coreml_train_step(loss, opt, flexible={"params": {0: (1, 4)}})


def test_enumerated_sizes(tmp_path):
    """flexible= with a list of sizes: Core ML enumerated shapes (each can run on the
    Neural Engine); a size not listed is refused by the host, the reference backend and
    the loaded package alike."""
    from rlxjax.runtime import make_backend
    from rlxjax.runtime.reference.interpreter import ReferenceRuntimeError

    def f(w, x):
        return jnp.tanh(x @ w).mean(0)

    rng = np.random.default_rng(5)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    g = rlxjax.coreml_jit(f, backend="reference", flexible={"x": {0: [64, 1, 8]}})
    for n in (1, 8, 64):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(g(w, x), jax.jit(f)(w, x), rtol=1e-5, atol=1e-6)
    (c,) = g._cache.values()
    c.validate()
    arr = {i.name: i for i in c.spec.description.input}["x"].type.multiArrayType
    assert [tuple(s.shape) for s in arr.enumeratedShapes.shapes] == [(1, 4), (8, 4), (64, 4)]
    assert not arr.shapeRange.sizeRanges
    with pytest.raises(ArgumentError, match=r"is 7, not one of the enumerated sizes \[1, 8, 64\]"):
        g(w, np.ones((7, 4), np.float32))
    run = make_backend("reference", c.spec, c._weights_dir)
    with pytest.raises(ReferenceRuntimeError, match="not one of the enumerated shapes"):
        run.run({"w": w, "x": np.ones((7, 4), np.float32)})
    loaded = rlxjax.load(c.save(tmp_path / "enum.mlpackage"), backend="reference")
    with pytest.raises(ArgumentError, match="enumerated sizes"):
        loaded(w, np.ones((7, 4), np.float32))
    two = rlxjax.coreml_jit(lambda x, y: x + y, flexible={"x": {0: [1, 2]}, "y": {0: [1, 2]}})
    with pytest.raises(ArgumentError, match="before iOS18 Core ML takes enumerated shapes on "
                                            "one input only"):
        two.lower(np.ones((1, 3), np.float32), np.ones((1, 3), np.float32)).compile()
    ok = rlxjax.coreml_jit(lambda x, y: x + y, target="iOS18", backend="reference",
                           flexible={"x": {0: [1, 2]}, "y": {0: [1, 2]}})
    np.testing.assert_array_equal(ok(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)),
                                  np.full((2, 3), 2, np.float32))
