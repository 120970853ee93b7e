"""A flexible *range* on Core AI (docs/flexible.md, rlxjax/coreai/dynamic.py): one Core AI
function whose inputs have dynamic (``?``) dims, its shapes computed in the program, run on
Apple's runtime (in the worker) at sizes across the range - its ends and inside - against
JAX: an MLP with a batch range, a transformer block with a prompt-length range (causal
mask, RMSNorm, LayerNorm), a gradient and adam training steps with a batch range; and the
refusal of an op that cannot take a dynamic dim, which says to list the sizes."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st
from jax import export

import rlxjax
from rlxjax.errors import ArgumentError, UnsupportedPrimitiveError

pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core (rlxjax[coreai])")
optax = pytest.importorskip("optax")

from helpers import jax_steps  # noqa: E402

rng = np.random.default_rng(5)


def _f32(*shape, scale=0.5):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _close(got, want, rtol=2e-5, atol=2e-6):
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol)


def mlp(w1, b1, w2, x):
    h = jax.nn.gelu(x @ w1 + b1)
    logits = h @ w2
    # a softmax, a mean over the flexible axis (its divisor the runtime size), a reshape of
    # it, a broadcast to it, a slice beside it, a cumsum and a max along it (the cumsum of
    # the input's whole numbers: exact in any summation order, as XLA's and Core AI's differ)
    return (jax.nn.softmax(logits, axis=-1), jnp.mean(logits), h.reshape(-1),
            jnp.ones((x.shape[0], 3)) * b1[0], jax.lax.slice_in_dim(h, 1, 3, axis=1),
            jnp.cumsum(jnp.round(x * 4), axis=0), jnp.max(h, axis=0))


W = (_f32(6, 8), _f32(8), _f32(8, 3))
_MLP = {}


def _mlp():
    if not _MLP:
        _MLP["f"] = rlxjax.coreml_jit(mlp, format="aimodel", flexible={"x": {0: (1, 64)}})
    return _MLP["f"]


@settings(max_examples=2, deadline=None)
@given(st.integers(1, 64))
@example(1)
@example(64)
def test_mlp_with_a_batch_range_is_one_dynamic_function_equal_to_jax(n):
    x = _f32(n, 6, scale=1.0)
    _close(_mlp()(*W, x), jax.jit(mlp)(*W, x))


def test_the_range_program_has_dynamic_dims_and_loads_back(tmp_path):
    compiled = _mlp().lower(*W, _f32(3, 6)).compile()
    text = compiled.as_text()
    assert "tensor<?x6xf32>" in text and "coreai.get_shape" in text
    assert text.count("coreai.graph @") == 1  # one function, not one per size
    spec = compiled.input_specs[-1]
    assert spec.shape == ("flex0", 6) and spec.bounds[0] == (1, 64)
    with pytest.raises(ArgumentError, match=r"outside the flexible range \[1, 64\]"):
        compiled(*W, _f32(65, 6))
    m = rlxjax.load(compiled.save(tmp_path / "range.aimodel"), flat=True)
    for n in (64, 2):
        x = _f32(n, 6, scale=1.0)
        out = m(*W, x)
        _close([out[k] for k in m.output_names], jax.tree_util.tree_leaves(
            jax.jit(mlp)(*W, x)))


@pytest.mark.slow
def test_jax_symbolic_shapes_are_a_range():
    (b,) = export.symbolic_shape("b", constraints=["b <= 16"])
    structs = [jax.ShapeDtypeStruct(w.shape, w.dtype) for w in W]
    compiled = rlxjax.coreml_jit(mlp, format="aimodel").lower(
        *structs, jax.ShapeDtypeStruct((b, 6), jnp.float32)).compile()
    for n in (16, 5):
        x = _f32(n, 6, scale=1.0)
        _close(compiled(*W, x), jax.jit(mlp)(*W, x))


def _block():
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x):
            h = nn.RMSNorm()(x)
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2]))  # an iota of the length
            h = nn.MultiHeadDotProductAttention(num_heads=2, qkv_features=8)(h, h, mask=mask)
            x = x + h
            return x + nn.Dense(8)(nn.gelu(nn.Dense(16)(nn.LayerNorm()(x))))

    m = Block()
    return m, m.init(jax.random.PRNGKey(0), jnp.ones((1, 4, 8)))


_BLOCK = {}


@pytest.mark.slow
@settings(max_examples=3, deadline=None)
@given(st.integers(1, 32))
@example(1)
@example(32)
def test_transformer_block_with_a_prompt_length_range(t):
    if not _BLOCK:
        m, params = _block()
        _BLOCK.update(m=m, params=params, f=rlxjax.coreml_jit(
            m.apply, format="aimodel", flexible={1: {1: (1, 32)}}))
    x = _f32(2, t, 8, scale=1.0)
    _close(_BLOCK["f"](_BLOCK["params"], x), jax.jit(_BLOCK["m"].apply)(_BLOCK["params"], x),
           rtol=1e-5, atol=2e-6)


def loss(p, x, y):
    return jnp.mean((jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] - y) ** 2)


P = {"w1": _f32(6, 8), "b1": np.zeros(8, np.float32), "w2": _f32(8, 2)}
BATCH = {"x": {0: (1, 64)}, "y": {0: (1, 64)}}


@pytest.mark.slow
def test_gradient_with_a_batch_range():
    g = rlxjax.coreml_grad(loss, format="aimodel", flexible=BATCH)
    for n in (1, 64, 13):
        x, y = _f32(n, 6, scale=1.0), _f32(n, 2, scale=1.0)
        _close(g(P, x, y), jax.grad(loss)(P, x, y), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["io", "mlstate"])
def test_train_steps_with_a_batch_range(mode):
    opt = optax.adam(1e-2)
    batches = [(_f32(n, 6, scale=1.0), _f32(n, 2, scale=1.0)) for n in (1, 9, 64, 5)] * 3
    p, want = jax_steps(loss, opt, P, batches)
    step = rlxjax.coreml_train_step(loss, opt, format="aimodel", state=mode, flexible=BATCH)
    state, got = step.init(P, *batches[0]), []
    for x, y in batches:  # 12 adam steps, the batch size changing every step
        state, v = step(state, x, y)
        got.append(float(v))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for k in P:
        np.testing.assert_allclose(state.params[k], p[k], rtol=1e-4, atol=1e-5)


def test_an_op_that_cannot_take_a_dynamic_dim_is_refused_by_name():
    def first_best(x):
        return jnp.argmax(x, axis=0)  # over the flexible axis

    f = rlxjax.coreml_jit(first_best, format="aimodel", flexible={"x": {0: (1, 64)}})
    with pytest.raises(UnsupportedPrimitiveError, match=r"argmax.*not lowered for Core AI "
                       r"with a dynamic dim.*list the sizes instead \(enumerated"):
        f.lower(_f32(4, 3)).compile()
    # what the message says to do works: one static function per listed size
    listed = rlxjax.coreml_jit(first_best, format="aimodel", flexible={"x": {0: [1, 4]}})
    x = _f32(4, 3)
    np.testing.assert_array_equal(listed(x), jax.jit(first_best)(x))
