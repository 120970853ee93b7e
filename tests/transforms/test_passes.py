"""Program-shrinking passes (transforms/cse.py, coreml/mil_cse.py, drop_unit_reshapes):
each removes ops, leaves every output bit-identical to the program compiled without it
(sign of zero and NaNs included) and equal to JAX's."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
import rlxjax.coreml.format
import rlxjax.transforms.simplify as simplify_mod
from helpers import assert_tree_close

# Bit-identity is a statement about the ML Program's semantics: checked on the reference
# interpreter (Core ML may pick other kernels for a different program).
pytestmark = pytest.mark.reference_backend

PASSES = {
    "cse": (simplify_mod, "cse"),
    "concat_pad_sums": (simplify_mod, "concat_pad_sums"),
    "drop_unit_reshapes": (simplify_mod, "drop_unit_reshapes"),
    "mil_cse": (rlxjax.coreml.format, "mil_cse"),  # the Core ML format runs it
}


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind == "f" else a


def _compile(monkeypatch, fn, args, grad, without=None):
    with monkeypatch.context() as m:
        if without:
            mod, name = PASSES[without]
            m.setattr(mod, name, lambda *a, **k: 0)
        wrap = rlxjax.coreml_grad if grad else rlxjax.coreml_jit
        return wrap(fn, backend="reference").lower(*args).compile()


def check_pass(monkeypatch, name, fn, *args, grad=False, rtol=1e-5, atol=1e-6):
    """Compile with and without pass ``name``; returns (ops with, ops without)."""
    on = _compile(monkeypatch, fn, args, grad)
    off = _compile(monkeypatch, fn, args, grad, without=name)
    on.validate()
    got, base = on(*args), off(*args)
    for g, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(base)):
        np.testing.assert_array_equal(_bits(g), _bits(b))
    want = (jax.grad(fn) if grad else fn)(*args)
    assert_tree_close(got, want, rtol=rtol, atol=atol)
    return on.cost_analysis()["mil_ops"], off.cost_analysis()["mil_ops"]


def test_rlx_cse_merges_repeated_expressions(monkeypatch):
    def f(x, y):
        a = jnp.sin(x) * y + jnp.exp(x)
        b = jnp.sin(x) * y - jnp.exp(x)  # sin(x) * y and exp(x) again
        return a * b, jnp.sin(x) * y

    ops_on, ops_off = check_pass(monkeypatch, "cse", f, _x(4, 8), _x(4, 8, seed=1))
    lowered = rlxjax.coreml_jit(f).lower(_x(4, 8), _x(4, 8, seed=1))
    assert sum(n.op == "sin" for n in lowered.graph.nodes) == 1
    assert sum(n.op == "exp" for n in lowered.graph.nodes) == 1


def test_rlx_cse_keeps_distinct_constants_apart(monkeypatch):
    # x * 0.0 and x * -0.0 differ in the sign of zero; x + 1 and x + 1 merge
    f = lambda x: (x * 0.0, x * -0.0, (x + 1.0) * (x + 1.0))  # noqa: E731
    check_pass(monkeypatch, "cse", f, np.array([1.0, -2.0, 0.0, -0.0], np.float32))


@pytest.mark.parametrize("parts,use", [
    (3, (0, 1, 2)),   # q/k/v style: every piece used, the axis covered
    (6, (0, 2, 5)),   # gaps: unused pieces get zero cotangents
    (4, (3, 1)),      # out of order
])
def test_split_backward_becomes_concatenate(monkeypatch, parts, use):
    w = _x(5, 4 * parts)
    x = _x(3, 5, seed=1)

    def loss(w, x):
        # slices by hand (jnp.split is one RLX split, whose VJP is a concatenate already)
        y = x @ w
        pieces = [y[..., 4 * i:4 * (i + 1)] for i in range(parts)]
        # -0.0 cotangents: a negative factor times a zero-valued piece
        return sum(jnp.sum(jnp.tanh(pieces[i]) * (k + 1) * (-1) ** k) for k, i in enumerate(use))

    ops_on, ops_off = check_pass(monkeypatch, "concat_pad_sums", loss, w, x, grad=True)
    if len(use) > 1:
        assert ops_on < ops_off
    lowered = rlxjax.coreml_grad(loss).lower(w, x)
    assert not any(n.op == "pad" for n in lowered.graph.nodes)


def test_split_backward_keeps_negative_zero_semantics(monkeypatch):
    # The cotangent of the middle piece is -0.0 everywhere: the sum of zero-padded pieces
    # (JAX's transpose of slices) turns it into +0.0 (-0.0 + +0.0), and so must the
    # rewrite (jnp.split's transpose, a concatenate, keeps -0.0: tests/transforms/test_peephole.py).
    def loss(v):
        a, b, c = v[:2], v[2:4], v[4:]
        return jnp.sum(a * 2.0) + jnp.sum(b * -0.0) + jnp.sum(c * 3.0)

    v = _x(6)
    check_pass(monkeypatch, "concat_pad_sums", loss, v, grad=True)
    g = rlxjax.coreml_grad(loss, backend="reference")(v)
    assert not np.signbit(g[2:4]).any() and not np.signbit(jax.grad(loss)(v)[2:4]).any()


def test_leading_unit_reshape_dropped(monkeypatch):
    f = lambda x, b: x + jnp.reshape(b, (1, -1)) * jnp.reshape(b, (1, 1, -1))  # noqa: E731
    ops_on, ops_off = check_pass(monkeypatch, "drop_unit_reshapes", f, _x(2, 3, 4), _x(4))
    assert ops_on < ops_off


def test_unit_reshape_kept_when_it_sets_the_rank(monkeypatch):
    # the other operand has a lower rank: the reshape decides the result's rank
    f = lambda x, b: jnp.reshape(b, (1, 1, 4)) * x  # noqa: E731
    check_pass(monkeypatch, "drop_unit_reshapes", f, _x(4), _x(4, seed=1))
    assert rlxjax.coreml_jit(f).lower(_x(4), _x(4)).graph.outputs[0][1].shape == (1, 1, 4)


def test_mil_cse_shares_norm_statistics(monkeypatch):
    def loss(p, x):  # a hand-written layer norm: recognised, paired with its fused backward
        x = x + p["s"]  # the norm's input is differentiated: its backward recomputes the
        mu = x.mean(-1, keepdims=True)  # statistics (else x-hat is MIL's layer_norm)
        h = (x - mu) * jax.lax.rsqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
        h = h * p["g"] + p["b"]
        return jnp.mean(((h * h * h) @ p["w"]) ** 2)

    p = {"g": _x(8, seed=1) + 1, "b": _x(8, seed=2), "w": _x(8, 8, seed=3), "s": _x(8, seed=4)}
    ops_on, ops_off = check_pass(monkeypatch, "mil_cse", loss, p, _x(4, 8), grad=True,
                                 rtol=1e-4, atol=1e-6)
    assert ops_on <= ops_off - 5  # the norm backward's recomputed statistics


def test_random_draws_are_never_merged():
    from rlxjax.ir import DType, Graph
    from rlxjax.ir.builder import Builder
    from rlxjax.transforms.cse import cse

    g = Graph()
    b = Builder(g)
    draws = [b.add("bernoulli", shape=(64,), dtype=DType.f32, prob=0.5, seed=-1)
             for _ in range(2)]
    g.add_output("out", b.add("sub", *draws))
    assert cse(g) == 0
    assert sum(n.op == "bernoulli" for n in g.nodes) == 2
