"""recognize_norms: decomposed flax / flax.nnx / equinox / hand-written norms become RLX norm
nodes, the rewritten graph still computes what jax.jit computes, and mathematically different
variants are left alone."""
from __future__ import annotations

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

import rlxjax
import rlxjax.nn
from rlxjax.ir import verify
from rlxjax.transforms.recognize_norms import recognize_norms
from helpers import assert_tree_close, examples

NORM_OPS = ("layer_norm", "rms_norm", "group_norm", "batch_norm", "batch_norm_train",
            "layer_norm2d")
# The norm ops compute the centred two-pass variance; flax's default fast variance
# max(0, E[x²] - E[x]²) is the same number mathematically but rounds differently in fp32
# (a few ulps of E[x²], amplified by rsqrt), hence 1e-5 rather than the usual 1e-6 atol.
TOL = dict(rtol=1e-5, atol=1e-5)


def _rand(rng, *shape, offset=0.0):
    return jnp.asarray(rng.normal(size=shape).astype(np.float32) + offset)


def _perturb(tree, rng, positive=False):
    """Non-trivial parameters (flax inits scale=1, bias=0, which would hide affine bugs)."""
    def f(a):
        d = rng.normal(size=a.shape).astype(np.float32)
        return a + (np.abs(d) if positive else d)
    return jax.tree.map(f, tree)


def _root_ops(graph):
    """rsqrt/sqrt nodes computed at run time (attention's sqrt(head_dim) of a constant does
    not count)."""
    return [n for n in graph.nodes if n.op in ("rsqrt", "sqrt")
            and not (n.inputs[0].node is not None and n.inputs[0].node.op == "constant")]


def check(fun, *args, expect, roots_left=None, oracle=None):
    """Lower, recognise, count the norm nodes, compile, validate, compare with jax.jit
    (of ``oracle`` if given: the same function written with the centred variance)."""
    lowered = rlxjax.coreml_jit(fun, backend="reference").lower(*args)
    recognize_norms(lowered.graph)  # idempotent if lower() already ran the pass
    verify(lowered.graph)
    hist = lowered.graph.op_histogram()
    found = {op: hist[op] for op in NORM_OPS if op in hist}
    if callable(expect):
        assert expect(found), found
    else:
        assert found == expect, f"{found} != {expect}\n{lowered.graph}"
    if roots_left is None:
        roots_left = 0 if found else None
    if roots_left is not None:
        assert len(_root_ops(lowered.graph)) == roots_left, str(lowered.graph)
    compiled = lowered.compile()
    compiled.validate()
    assert_tree_close(compiled(*args), jax.jit(oracle or fun)(*args), **TOL)
    return lowered.graph


# -- flax.linen ----------------------------------------------------------------------------
def _linen(module, x, rng, centred_oracle=False, **kw):
    params = _perturb(module.init(jax.random.PRNGKey(0), x), rng, positive=True)
    if centred_oracle:
        kw["oracle"] = module.clone(use_fast_variance=False).apply
    return check(module.apply, params, x, **kw)


@pytest.mark.parametrize("kwargs", [
    {}, {"use_fast_variance": False}, {"use_scale": False}, {"use_bias": False},
    {"use_scale": False, "use_bias": False, "epsilon": 1e-3},
    {"reduction_axes": (-2, -1), "feature_axes": (-2, -1)},
])
def test_linen_layer_norm(kwargs):
    rng = np.random.default_rng(0)
    _linen(nn.LayerNorm(**kwargs), _rand(rng, 2, 3, 8, offset=0.5), rng,
           expect={"layer_norm": 1})


def test_linen_layer_norm_per_feature_scale_over_two_axes():
    # Normalised over (T, D) but scaled per D only: group_norm(1 group, channels last)
    # takes a (D,) scale as it is; layer_norm(axis=1) would need it broadcast to (T, D).
    rng = np.random.default_rng(1)
    _linen(nn.LayerNorm(reduction_axes=(-2, -1)), _rand(rng, 2, 3, 8), rng,
           expect={"group_norm": 1})


def test_linen_rms_norm():
    rng = np.random.default_rng(2)
    _linen(nn.RMSNorm(), _rand(rng, 2, 3, 8), rng, expect={"rms_norm": 1})
    _linen(nn.RMSNorm(use_scale=False, epsilon=1e-3), _rand(rng, 4, 8), rng,
           expect={"rms_norm": 1})


@pytest.mark.parametrize("kwargs", [
    {"num_groups": 4}, {"num_groups": None, "group_size": 2}, {"num_groups": 1},
    {"num_groups": 8, "use_fast_variance": False}, {"num_groups": 2, "use_bias": False},
])
def test_linen_group_norm(kwargs):
    rng = np.random.default_rng(3)
    _linen(nn.GroupNorm(**kwargs), _rand(rng, 2, 5, 5, 8), rng, expect={"group_norm": 1})


def test_linen_batch_norm_eval():
    rng = np.random.default_rng(4)
    _linen(nn.BatchNorm(use_running_average=True), _rand(rng, 2, 3, 8), rng,
           expect={"batch_norm": 1})


@pytest.mark.parametrize("kwargs", [{}, {"use_fast_variance": False, "momentum": 0.9},
                                    {"use_scale": False, "momentum": 0.5}])
def test_linen_batch_norm_train(kwargs):
    rng = np.random.default_rng(5)
    m = nn.BatchNorm(use_running_average=False, **kwargs)
    x = _rand(rng, 4, 3, 8)
    v = _perturb(m.init(jax.random.PRNGKey(0), x), rng, positive=True)
    graph = check(lambda v, x: m.apply(v, x, mutable=["batch_stats"]), v, x,
                  expect={"batch_norm_train": 1})
    (node,) = [n for n in graph.nodes if n.op == "batch_norm_train"]
    outs = {name: v for name, v in graph.outputs}
    assert outs["out.1.batch_stats.mean"] is node.outputs[1]
    assert outs["out.1.batch_stats.var"] is node.outputs[2]
    assert node.params["momentum"] == kwargs.get("momentum", 0.99)


# -- flax.nnx ------------------------------------------------------------------------------
@pytest.mark.parametrize("make, shape, expect", [
    (lambda: nnx.LayerNorm(8, rngs=nnx.Rngs(0)), (4, 8), {"layer_norm": 1}),
    (lambda: nnx.RMSNorm(8, rngs=nnx.Rngs(0)), (2, 3, 8), {"rms_norm": 1}),
    (lambda: nnx.GroupNorm(8, num_groups=4, rngs=nnx.Rngs(0)), (2, 5, 8), {"group_norm": 1}),
])
def test_nnx(make, shape, expect):
    rng = np.random.default_rng(6)
    graphdef, state = nnx.split(make())
    state = _perturb(state, rng, positive=True)
    check(lambda s, x: nnx.merge(graphdef, s)(x), state, _rand(rng, *shape), expect=expect)


# -- equinox (unbatched modules, vmapped) ---------------------------------------------------
@pytest.mark.parametrize("make, shape, expect", [
    (lambda: eqx.nn.LayerNorm(8), (4, 8), {"layer_norm": 1}),
    (lambda: eqx.nn.LayerNorm((3, 8), use_bias=False), (2, 3, 8), {"layer_norm": 1}),
    (lambda: eqx.nn.RMSNorm(8), (4, 8), {"rms_norm": 1}),
    (lambda: eqx.nn.GroupNorm(4, 8), (2, 8, 5), {"group_norm": 1}),
    (lambda: eqx.nn.GroupNorm(2, 4, channelwise_affine=False), (3, 4, 2, 3), {"group_norm": 1}),
])
def test_equinox(make, shape, expect):
    rng = np.random.default_rng(7)
    model = _perturb(make(), rng, positive=True)
    check(lambda m, x: jax.vmap(m)(x), model, _rand(rng, *shape), expect=expect)


# -- hand-written ----------------------------------------------------------------------------
def ln_sqrt_var(x, g, b):
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.var(x, -1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + 1e-5) * g + b


def ln_rsqrt_dev(x, g, b):
    mean = jnp.mean(x, -1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, -1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def rms_hand(x, g, b):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * g


@pytest.mark.parametrize("fun, expect", [(ln_sqrt_var, {"layer_norm": 1}),
                                         (ln_rsqrt_dev, {"layer_norm": 1}),
                                         (rms_hand, {"rms_norm": 1})])
def test_hand_written(fun, expect):
    rng = np.random.default_rng(8)
    check(fun, _rand(rng, 4, 8), _rand(rng, 8), _rand(rng, 8), expect=expect)


def test_intermediates_with_other_users_stay_correct():
    def f(x):
        mean = jnp.mean(x, -1, keepdims=True)
        xc = x - mean
        var = jnp.mean(xc * xc, -1, keepdims=True)
        y = xc * lax.rsqrt(var + 1e-5)
        return y, mean, var, y * 2.0
    rng = np.random.default_rng(9)
    graph = check(f, _rand(rng, 2, 3, 8), expect={"layer_norm": 1})
    assert graph.op_histogram()["reduce_sum"] == 2  # mean and var are still outputs
    (node,) = [n for n in graph.nodes if n.op == "layer_norm"]
    assert not node.params["has_gamma"]  # y itself is the node; y * 2 stays a mul


def test_affine_that_is_not_per_feature_stays_outside_the_node():
    def per_sample_gamma(x, g, b):
        mean, var = _mean_var(x)
        return (x - mean) * lax.rsqrt(var + 1e-5) * x[:, :1] + b
    rng = np.random.default_rng(16)
    graph = check(per_sample_gamma, _rand(rng, 4, 8), _rand(rng, 8), _rand(rng, 8),
                  expect={"layer_norm": 1})
    (node,) = [n for n in graph.nodes if n.op == "layer_norm"]
    assert not node.params["has_gamma"] and not node.params["has_beta"]


def test_primitive_graph_is_left_alone():
    rng = np.random.default_rng(10)
    x, g, b = _rand(rng, 4, 8), _rand(rng, 8), _rand(rng, 8)
    lowered = rlxjax.coreml_jit(lambda x, g, b: rlxjax.nn.layer_norm(x, g, b)).lower(x, g, b)
    assert recognize_norms(lowered.graph) == {}


def test_returns_counts():
    rng = np.random.default_rng(11)
    x, g, b = _rand(rng, 4, 8), _rand(rng, 8), _rand(rng, 8)
    lowered = rlxjax.coreml_jit(lambda x, g, b: (ln_rsqrt_dev(x, g, b), rms_hand(x, g, b))
                                ).lower(x, g, b)
    counts = recognize_norms(lowered.graph)
    assert counts in ({"layer_norm": 1, "rms_norm": 1}, {})  # {} if lower() already ran it


# -- models -----------------------------------------------------------------------------------
class Block(nn.Module):
    """RMSNorm -> 4-head self-attention -> residual -> LayerNorm -> MLP -> residual."""

    @nn.compact
    def __call__(self, x):
        h = nn.RMSNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=4, qkv_features=16)(h, h)
        h = nn.LayerNorm()(x)
        return x + nn.Dense(16)(nn.gelu(nn.Dense(32)(h)))


class ConvFreeCNN(nn.Module):
    """NHWC -> GroupNorm -> Dense over channels -> gelu -> GroupNorm (no conv yet)."""

    @nn.compact
    def __call__(self, x):
        x = nn.GroupNorm(num_groups=4)(x)
        return nn.GroupNorm(num_groups=2)(nn.gelu(nn.Dense(16)(x)))


def test_transformer_block():
    rng = np.random.default_rng(12)
    _linen(Block(), _rand(rng, 2, 5, 16), rng, expect={"layer_norm": 1, "rms_norm": 1})


def test_conv_free_cnn():
    rng = np.random.default_rng(13)
    _linen(ConvFreeCNN(), _rand(rng, 2, 4, 4, 8), rng, expect={"group_norm": 2})


# -- left decomposed: not the same mathematics ------------------------------------------------
def _mean_var(x, axis=-1, ddof=0):
    return jnp.mean(x, axis, keepdims=True), jnp.var(x, axis, keepdims=True, ddof=ddof)


def eps_outside_sqrt(x, g, b):
    mean, var = _mean_var(x)
    return (x - mean) / (jnp.sqrt(var) + 1e-5) * g + b


def eps_outside_rsqrt(x, g, b):
    mean, var = _mean_var(x)
    return (x - mean) * (lax.rsqrt(var) + 1e-5) * g + b


def unbiased_var(x, g, b):
    mean, var = _mean_var(x, ddof=1)
    return (x - mean) / jnp.sqrt(var + 1e-5) * g + b


def wrong_divisor(x, g, b):
    mean = jnp.sum(x, -1, keepdims=True) / 7.0
    return (x - mean) * lax.rsqrt(jnp.var(x, -1, keepdims=True) + 1e-5) * g + b


def not_centred(x, g, b):
    _, var = _mean_var(x)
    return x * lax.rsqrt(var + 1e-5) * g + b


def mean_and_var_over_other_axes(x, g, b):
    mean, _ = _mean_var(x, -1)
    _, var = _mean_var(x, 0)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def leading_axis_norm(x, g, b):
    mean, var = _mean_var(x, 0)  # per-feature over the batch, no running statistics
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def rms_eps_outside(x, g, b):
    return x / (jnp.sqrt(jnp.mean(x * x, -1, keepdims=True)) + 1e-6) * g


@pytest.mark.parametrize("fun", [eps_outside_sqrt, eps_outside_rsqrt, unbiased_var,
                                 wrong_divisor, not_centred, mean_and_var_over_other_axes,
                                 leading_axis_norm, rms_eps_outside])
def test_different_mathematics_is_left_decomposed(fun):
    rng = np.random.default_rng(14)
    check(fun, _rand(rng, 4, 8), _rand(rng, 8), _rand(rng, 8), expect={}, roots_left=1)


def _bn_train(momentum, one_minus, ddof=0):
    def f(x, g, b, rm, rv):
        mean = jnp.mean(x, (0, 1))
        var = jnp.var(x, (0, 1))
        y = (x - mean) * lax.rsqrt(var + 1e-5) * g + b
        stat_var = jnp.var(x, (0, 1), ddof=ddof)
        return y, momentum * rm + one_minus * mean, momentum * rv + one_minus * stat_var
    return f


@pytest.mark.parametrize("f, expect", [
    (_bn_train(0.9, 1 - 0.9), {"batch_norm_train": 1}),
    (_bn_train(0.9, 0.2), {}),                 # not m·running + (1-m)·stat
    (_bn_train(0.9, 1 - 0.9, ddof=1), {}),     # running var from the unbiased variance
])
def test_hand_written_batch_norm_train(f, expect):
    rng = np.random.default_rng(15)
    args = (_rand(rng, 4, 3, 8), _rand(rng, 8), _rand(rng, 8), _rand(rng, 8),
            jnp.abs(_rand(rng, 8)))
    check(f, *args, expect=expect, roots_left=0 if expect else 1)


# -- hypothesis over shapes, axes, eps, groups ------------------------------------------------
# Random shapes include groups of 2-3 elements with eps=1e-6, where flax's fast variance
# E[x²] - E[x]² loses most digits to cancellation (var << E[x]²) while the op's centred
# variance does not. The two are the same function, so there the oracle is jax.jit of the
# module with use_fast_variance=False.
EPS = st.sampled_from([1e-6, 1e-5, 1e-3, 0.1])


@settings(max_examples=examples(6), deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=4), k=st.integers(1, 3),
       eps=EPS, fast=st.booleans(), scale=st.booleans(), bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_linen_layer_norm_hypothesis(shape, k, eps, fast, scale, bias, seed):
    k = min(k, len(shape) - 1)
    axes = tuple(range(-k, 0))
    m = nn.LayerNorm(epsilon=eps, use_fast_variance=fast, use_scale=scale, use_bias=bias,
                     reduction_axes=axes, feature_axes=axes)
    rng = np.random.default_rng(seed)
    _linen(m, _rand(rng, *shape), rng, centred_oracle=True,
           expect=lambda f: sum(f.values()) == 1 and set(f) <= {"layer_norm", "group_norm"})


@settings(max_examples=examples(6), deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=2, max_size=4), eps=EPS,
       seed=st.integers(0, 2**16))
def test_linen_rms_norm_hypothesis(shape, eps, seed):
    rng = np.random.default_rng(seed)
    _linen(nn.RMSNorm(epsilon=eps), _rand(rng, *shape), rng, expect={"rms_norm": 1})


@settings(max_examples=examples(6), deadline=None)
@given(n=st.integers(1, 3), spatial=st.lists(st.integers(1, 4), max_size=2),
       groups=st.integers(1, 4), per_group=st.integers(1, 3), eps=EPS,
       fast=st.booleans(), seed=st.integers(0, 2**16))
def test_linen_group_norm_hypothesis(n, spatial, groups, per_group, eps, fast, seed):
    rng = np.random.default_rng(seed)
    x = _rand(rng, n, *spatial, groups * per_group)
    m = nn.GroupNorm(num_groups=groups, epsilon=eps, use_fast_variance=fast)
    # One group over (N, C) is also a layer_norm over the last axis; which one is chosen
    # does not matter as long as there is exactly one.
    _linen(m, x, rng, centred_oracle=True,
           expect=lambda f: sum(f.values()) == 1 and set(f) <= {"group_norm", "layer_norm"})


# ~7 s: a whole flax CNN; the group-norm patterns' own tests stay in the default run
@pytest.mark.slow
def test_flax_cnn_groupnorms_are_all_recognised():
    """Issue 3's done-when: a flax CNN with GroupNorm compiles with every norm recognised."""
    from models import CNN

    x = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype(np.float32)
    model = CNN()
    params = model.init(jax.random.PRNGKey(0), x)
    lowered = rlxjax.coreml_jit(model.apply, backend="reference").lower(params, x)
    hist = lowered.graph.op_histogram()
    assert hist.get("group_norm") == 2 and "rsqrt" not in hist, hist
    compiled = lowered.compile()
    compiled.validate()
    # flax computes E[x²]-E[x]² where the fused op centres first: rounding-level differences
    np.testing.assert_allclose(compiled(params, x), np.asarray(jax.jit(model.apply)(params, x)),
                               rtol=1e-5, atol=1e-5)


class _NormChain(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = nn.LayerNorm()(nn.LayerNorm()(x))  # one norm's output is the next one's input
        x = nn.BatchNorm(use_running_average=False)(nn.RMSNorm()(x))
        return nn.LayerNorm()(x + nn.Dense(8)(x))


def test_batched_edits_give_the_graph_edits_one_by_one_give(monkeypatch):
    """recognize_norms keeps its edits cheap (``_Edits``: readers through a map, the new
    nodes placed in one pass at the end): the graph must be the one that placing the new
    nodes and substituting after each match, one by one, gives."""
    import sys

    from rlxjax.frontend import trace
    from rlxjax.transforms.rewrite import insert_before, substitute

    rn = sys.modules["rlxjax.transforms.recognize_norms"]  # the package exports the function

    class OneByOne(rn._Edits):
        def place_before(self, anchor, nodes):
            insert_before(self.graph, anchor, nodes)

        def substitute(self, mapping):
            substitute(self.graph, mapping)

        def place(self):
            pass

    rng = np.random.default_rng(14)
    m, x = _NormChain(), _rand(rng, 4, 3, 8)
    v = m.init(jax.random.PRNGKey(0), x)

    def rewritten():
        traced = trace(lambda v, x: m.apply(v, x, mutable=["batch_stats"]), [v, x], ["v", "x"])
        found = recognize_norms(traced.graph)
        verify(traced.graph)
        return found, str(traced.graph)

    batched = rewritten()
    monkeypatch.setattr(rn, "_Edits", OneByOne)
    assert rewritten() == batched
    assert batched[0] == {"layer_norm": 3, "rms_norm": 1, "batch_norm_train": 1}
