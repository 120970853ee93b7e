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
    loaded = rlxjax.load(path, backend="reference", flat=True)  # the one package, at every size
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
    from rlxjax.coreml.backends import make_backend
    from rlxjax.coreml.interpreter.interpreter import ReferenceRuntimeError

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
    from rlxjax.coreml.backends import make_backend
    from rlxjax.coreml.interpreter.interpreter import ReferenceRuntimeError

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
    loaded = rlxjax.load(c.save(tmp_path / "enum.mlpackage"), backend="reference", flat=True)
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


# -- gathers on a flexible batch of indices (token models) ------------------------------
_V, _L = 30, 6


def _token_lm():
    import flax.linen as nn
    import optax

    class LM(nn.Module):  # Embed -> Dense -> logits
        @nn.compact
        def __call__(self, tok):
            return nn.Dense(_V)(jnp.tanh(nn.Embed(_V, 8)(tok)))

    model = LM()
    params = model.init(jax.random.PRNGKey(0), jnp.zeros((2, _L), jnp.int32))

    def loss(p, tok, tgt):  # take_along_axis of the flexible-batch logits
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, tok), tgt).mean()

    return model, params, loss


def _tokens(rng, n):
    return (rng.integers(0, _V, (n, _L)).astype(np.int32),
            rng.integers(0, _V, (n, _L)).astype(np.int32))


def _close_trees(got, want, **tol):
    got, want = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, **tol)


def test_token_lm_forward_and_grad_with_a_flexible_batch():
    """nn.Embed is a gather of a static table at flexible-batch token indices; its
    gradient a scatter-add of flexible-batch updates into the table; the loss a
    take_along_axis of flexible-batch logits: one program each, at batch 1, 7 and 64."""
    model, params, loss = _token_lm()
    fwd = lambda p, tok: model.apply(p, tok)  # noqa: E731
    flex = {"tok": {0: (1, 64)}, "tgt": {0: (1, 64)}}
    f = rlxjax.coreml_jit(fwd, backend="reference", flexible={"tok": {0: (1, 64)}})
    g = rlxjax.coreml_grad(loss, backend="reference", flexible=flex)
    rng = np.random.default_rng(5)
    jgrad = jax.jit(jax.grad(loss))
    for n in (1, 7, 64):
        tok, tgt = _tokens(rng, n)
        np.testing.assert_allclose(f(params, tok), jax.jit(fwd)(params, tok),
                                   rtol=2e-5, atol=2e-5)
        _close_trees(g(params, tok, tgt), jgrad(params, tok, tgt),
                     rtol=1e-4, atol=1e-6)
    assert len(f._cache) == 1 and len(g._cache) == 1
    for compiled in (*f._cache.values(), *g._cache.values()):
        compiled.validate()  # coremltools' MIL loader


def test_token_lm_train_step_with_a_flexible_batch():
    import optax

    _, params, loss = _token_lm()
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, backend="reference",
                                    flexible={"tok": {0: (1, 64)}, "tgt": {0: (1, 64)}})
    state, jp, js = step.init(params), params, opt.init(params)

    @jax.jit
    def jstep(p, s, tok, tgt):
        value, grads = jax.value_and_grad(loss)(p, tok, tgt)
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, value

    rng = np.random.default_rng(6)
    for n in (1, 7, 64):
        tok, tgt = _tokens(rng, n)
        state, value = step(state, tok, tgt)
        jp, js, want = jstep(jp, js, tok, tgt)
        np.testing.assert_allclose(value, want, rtol=2e-5)
    assert len(step._programs) == 1
    _close_trees(step.params(state), jp, rtol=1e-4, atol=1e-6)


_T = np.random.default_rng(7).standard_normal((20, 8)).astype(np.float32)
_GATHERS = {  # fn(table, x, idx), flexible batch of x and idx
    "take": lambda t, x, i: jnp.take(t, i[:, 0], axis=0) * x[:, :1],
    "take_3d": lambda t, x, i: t[i].sum(axis=1) + x,
    "take_clip": lambda t, x, i: jnp.take(t, i[:, 0] * 3 - 5, axis=0, mode="clip") + x,
    "take_fill": lambda t, x, i: jnp.take(t, i[:, 0] * 3 - 5, axis=0, mode="fill",
                                          fill_value=0.5) + x,
    "columns": lambda t, x, i: x[:, jnp.array([0, 2, 5])] * t[0, :3],
    "take_along_axis": lambda t, x, i: jnp.take_along_axis(x * t[1], i % 8, axis=1),
}


@pytest.mark.parametrize("name", sorted(_GATHERS))
@settings(max_examples=1, deadline=None)
@given(n=st.integers(1, 9), seed=st.integers(0, 99))
def test_gathers_with_a_flexible_index_batch(name, n, seed):
    """Forward and gradient (w.r.t. the static table and the flexible-batch x)."""
    fn = _GATHERS[name]
    loss = lambda t, x, i: jnp.sum(jnp.sin(fn(t, x, i)))  # noqa: E731
    flex = {1: {0: (1, 16)}, 2: {0: (1, 16)}}
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 8)).astype(np.float32)
    i = rng.integers(0, 20, (n, 3)).astype(np.int32)
    got = rlxjax.coreml_jit(fn, backend="reference", flexible=flex)(_T, x, i)
    np.testing.assert_allclose(got, jax.jit(fn)(_T, x, i), rtol=2e-5, atol=2e-5)
    grad = rlxjax.coreml_grad(loss, argnums=(0, 1), backend="reference", flexible=flex)
    _close_trees(grad(_T, x, i), jax.jit(jax.grad(loss, argnums=(0, 1)))(_T, x, i),
                 rtol=1e-4, atol=1e-5)


def test_flexible_refusals_name_the_jax_primitive_without_python_internals():
    (b,) = export.symbolic_shape("b")
    x = jax.ShapeDtypeStruct((b, 8), jnp.float32)
    for fn, prim in ((lambda x: jnp.take(x, jnp.array([0, 2]), axis=0), "gather"),
                     (lambda x: jnp.sort(x, axis=0), "sort")):
        with pytest.raises(DynamicShapeError, match=rf"^{prim} at .*test_flexible.py") as e:
            rlxjax.coreml_jit(fn).lower(x).compile()
        assert "Dyn" not in str(e.value) and "int()" not in str(e.value)
        assert "unsupported operand" not in str(e.value)


@pytest.mark.slow  # ~17 s: the gradient program of a transformer LM
def test_causal_attention_lm_with_a_flexible_batch():
    """A decoder LM (embedding + positions, causal self-attention, MLP, LayerNorms, tied
    cross-entropy over token targets): forward and gradient at batch 1, 7 and 64."""
    import flax.linen as nn
    import optax

    class LM(nn.Module):
        @nn.compact
        def __call__(self, tok):
            h = nn.Embed(_V, 16)(tok) + self.param("pos", nn.initializers.normal(0.02),
                                                   (_L, 16))
            att = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=16)
            h = h + att(nn.LayerNorm()(h), mask=nn.make_causal_mask(tok))
            h = h + nn.Dense(16)(nn.gelu(nn.Dense(32)(nn.LayerNorm()(h))))
            return nn.Dense(_V)(nn.LayerNorm()(h))

    model = LM()
    params = model.init(jax.random.PRNGKey(1), jnp.zeros((2, _L), jnp.int32))
    fwd = lambda p, tok: model.apply(p, tok)  # noqa: E731

    def loss(p, tok, tgt):
        return optax.softmax_cross_entropy_with_integer_labels(model.apply(p, tok), tgt).mean()

    f = rlxjax.coreml_jit(fwd, backend="reference", flexible={"tok": {0: (1, 64)}})
    g = rlxjax.coreml_grad(loss, backend="reference",
                           flexible={"tok": {0: (1, 64)}, "tgt": {0: (1, 64)}})
    rng, jgrad = np.random.default_rng(8), jax.jit(jax.grad(loss))
    for n in (1, 7, 64):
        tok, tgt = _tokens(rng, n)
        np.testing.assert_allclose(f(params, tok), jax.jit(fwd)(params, tok),
                                   rtol=1e-4, atol=2e-5)
        _close_trees(g(params, tok, tgt), jgrad(params, tok, tgt), rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("lib", ["nnx", "equinox"])
def test_embedding_layers_of_other_libraries_with_a_flexible_batch(lib):
    if lib == "nnx":
        from flax import nnx

        layer = nnx.Embed(_V, 8, rngs=nnx.Rngs(0))
        graphdef, state = nnx.split(layer)
        fn = lambda s, tok: nnx.merge(graphdef, s)(tok)  # noqa: E731
        params = state
    else:
        eqx = pytest.importorskip("equinox")

        layer = eqx.nn.Embedding(_V, 8, key=jax.random.PRNGKey(0))
        params, static = eqx.partition(layer, eqx.is_array)
        fn = lambda p, tok: jax.vmap(jax.vmap(eqx.combine(p, static)))(tok)  # noqa: E731
    loss = lambda p, tok: jnp.sum(jnp.sin(fn(p, tok)))  # noqa: E731
    f = rlxjax.coreml_jit(fn, backend="reference", flexible={"tok": {0: (1, 64)}})
    g = rlxjax.coreml_grad(loss, backend="reference", flexible={"tok": {0: (1, 64)}})
    rng = np.random.default_rng(9)
    for n in (1, 7, 64):
        tok, _ = _tokens(rng, n)
        np.testing.assert_allclose(f(params, tok), jax.jit(fn)(params, tok), rtol=2e-5,
                                   atol=2e-5)
        _close_trees(g(params, tok), jax.jit(jax.grad(loss))(params, tok), rtol=1e-4,
                     atol=1e-5)


def test_embedding_with_two_flexible_index_dims():
    """Batch and sequence both flexible: the depth-1 index is squeezed, not reshaped."""
    fn = lambda t, i: jnp.take(t, i, axis=0) * 2.0  # noqa: E731
    loss = lambda t, i: jnp.sum(jnp.sin(fn(t, i)))  # noqa: E731
    flex = {"i": {0: (1, 64), 1: (1, 16)}}
    f = rlxjax.coreml_jit(fn, backend="reference", flexible=flex)
    g = rlxjax.coreml_grad(loss, backend="reference", flexible=flex)
    for n, m in ((1, 1), (3, 5), (64, 16)):
        i = np.random.default_rng(n).integers(0, 20, (n, m)).astype(np.int32)
        np.testing.assert_allclose(f(_T, i), jax.jit(fn)(_T, i), rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(g(_T, i), jax.jit(jax.grad(loss))(_T, i), rtol=1e-4,
                                   atol=1e-5)
    (compiled,) = f._cache.values()
    compiled.validate()


def test_a_causal_mask_over_a_flexible_prompt_length():
    """An iota of a flexible length (``jnp.tril`` of the sequence's ones, flax's
    ``make_causal_mask``) is a running count: causal attention over a flexible prompt
    length, against jax.jit at the range's ends and inside."""

    def attend(q, k):
        t = q.shape[0]
        s = jnp.where(jnp.tril(jnp.ones((t, t), bool)), q @ k.T, -1e9)
        pos = jnp.arange(t, dtype=jnp.float32)  # a float iota too
        return jax.nn.softmax(s, axis=-1) @ k + pos[:, None]

    f = rlxjax.coreml_jit(attend, backend="reference", flexible={"q": {0: (1, 32)},
                                                                 "k": {0: (1, 32)}})
    rng = np.random.default_rng(4)
    for n in (1, 9, 32):
        q, k = (rng.standard_normal((n, 4)).astype(np.float32) for _ in range(2))
        np.testing.assert_allclose(f(q, k), jax.jit(attend)(q, k), rtol=2e-5, atol=2e-5)
