"""coreml_train_step(trainable=, compress=): a masked subset trained on a frozen, possibly
compressed base (rlxjax/training/trainable.py), against JAX + optax run on the same split
and the same (dequantised) base values."""
from __future__ import annotations

import os
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlxjax
from helpers import jax_masked_loop
from rlxjax.errors import ArgumentError, TargetError


def _params(seed=0):
    rng = np.random.default_rng(seed)
    return {"body": {"w": (rng.normal(size=(6, 16)) * 0.5).astype(np.float32),
                     "b": (rng.normal(size=16) * 0.1).astype(np.float32)},
            "head": {"w": (rng.normal(size=(16, 3)) * 0.5).astype(np.float32),
                     "b": np.zeros(3, np.float32)}}


def _loss(p, x, y):
    h = jnp.tanh(x @ p["body"]["w"] + p["body"]["b"])
    return jnp.mean((h @ p["head"]["w"] + p["head"]["b"] - y) ** 2)


def _batches(n=3):
    rng = np.random.default_rng(7)
    return [(rng.normal(size=(8, 6)).astype(np.float32),
             rng.normal(size=(8, 3)).astype(np.float32)) for _ in range(n)]


def _jax_losses(full, mask_tree, optimizer, batches, steps, loss_fn=_loss):
    """The same split in JAX + optax: grads of the trainable leaves only, the frozen ones
    fixed at their values in ``full``."""
    flags = jax.tree.leaves(jax.tree.broadcast(mask_tree, full))
    return jax_masked_loop(full, flags, loss_fn, optimizer, steps, batches)


@pytest.mark.parametrize("mask", [{"body": False, "head": True},    # train the head
                                  {"body": True, "head": False}],   # the inverse
                         ids=["head", "body"])
def test_a_masked_step_matches_jax_and_optax_on_the_same_split(mask):
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(_loss, opt, trainable=mask, backend="reference")
    st = step.init(_params())
    st, got = step.fit(st, _batches(), steps=20, progress=False)
    want, trained = _jax_losses(_params(), mask, opt, _batches(), 20)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
                 step.params(st), trained)
    # frozen leaves are no program inputs and no optimizer state
    frozen = "body" if not mask["body"] else "head"
    names = [s.name for s in step.last_compiled.input_specs]
    assert not any(frozen in n for n in names), names
    assert all(frozen not in str(p) for p, _ in
               jax.tree_util.tree_flatten_with_path(st.opt_state)[0])


def test_an_int8_base_in_mlstate_matches_jax_on_the_dequantised_base():
    opt = optax.sgd(0.05, momentum=0.9)
    mask = {"body": False, "head": True}
    step = rlxjax.coreml_train_step(_loss, opt, trainable=mask, compress="int8",
                                    state="mlstate", backend="reference")
    st = step.init(_params())
    base = step.params(st)  # the frozen body as the program sees it: dequantised
    assert not np.array_equal(base["body"]["w"], _params()["body"]["w"])
    np.testing.assert_array_equal(base["body"]["b"], _params()["body"]["b"])  # a vector: fp32
    st, got = step.fit(st, _batches(), steps=20, progress=False)
    want, trained = _jax_losses(jax.tree.map(np.asarray, base), mask, opt, _batches(), 20)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    np.testing.assert_allclose(step.params(st)["head"]["w"], trained["head"]["w"], rtol=1e-4,
                               atol=1e-6)
    step.last_compiled.validate()  # coremltools' MIL loader accepts it
    ops = step.last_compiled.op_histogram()
    assert ops.get("constexpr_blockwise_shift_scale") == 1, ops
    report = {r.name: r for r in step.compression.leaves}
    assert report["params.body.w"].scheme == "int8" and report["params.body.b"].scheme == "none"


def test_a_frozen_base_step_has_fewer_mil_ops_and_no_weight_gradient():
    x, y = _batches(1)[0]

    def compiled(**kw):
        step = rlxjax.coreml_train_step(_loss, optax.adam(1e-2), backend="reference", **kw)
        step(step.init(_params()), x, y)
        return step.last_compiled.op_histogram()

    full = compiled()
    head = compiled(trainable=lambda path, leaf: path[0].key == "head")
    body = compiled(trainable={"body": True, "head": False})
    assert sum(head.values()) < sum(body.values()) < sum(full.values()), (head, body, full)
    # full: 2 forward matmuls; backward d(head.w), d(h), d(body.w)
    assert full["matmul"] == 5
    # frozen body: only d(head.w) - no weight gradient, and no activation gradient either
    # (nothing below the head is trained)
    assert head["matmul"] == 3
    # frozen head: d(h) still flows through head.w to train the body; no d(head.w)
    assert body["matmul"] == 4


def test_callable_and_prefix_masks_select_the_same_leaves():
    step = rlxjax.coreml_train_step(_loss, optax.sgd(0.1), backend="reference",
                                    trainable=lambda path, leaf: leaf.ndim == 2)
    st = step.init(_params())
    assert [k for k, _ in jax.tree_util.tree_flatten_with_path(st.params)[0]] == [
        (jax.tree_util.DictKey("body"), jax.tree_util.DictKey("w")),
        (jax.tree_util.DictKey("head"), jax.tree_util.DictKey("w"))]
    st2, loss = step(st, *_batches(1)[0])
    assert np.isfinite(float(loss))
    np.testing.assert_array_equal(step.params(st2)["body"]["b"], _params()["body"]["b"])


def test_bad_masks_and_options_are_clear_errors():
    p = _params()

    def make(**kw):
        return rlxjax.coreml_train_step(_loss, optax.sgd(0.1), backend="reference", **kw)

    with pytest.raises(ArgumentError, match="does not match params"):
        make(trainable={"body": False, "tail": True}).init(p)
    with pytest.raises(ArgumentError, match=r"holds int 1 for 'params.head"):
        make(trainable={"body": False, "head": 1}).init(p)
    with pytest.raises(ArgumentError, match="freezes every parameter"):
        make(trainable=False).init(p)
    with pytest.raises(ArgumentError, match="returned str"):
        make(trainable=lambda path, leaf: "yes").init(p)
    with pytest.raises(ArgumentError, match="say which leaves are trained"):
        make(compress="int8")
    with pytest.raises(TargetError, match="needs target iOS18"):
        make(trainable={"body": False, "head": True}, compress="int4")
    with pytest.raises(ArgumentError, match="call step.init"):
        make(trainable={"body": False, "head": True}).lower(p, ())


def test_a_lora_adapter_subtree_can_be_the_only_trainable_part():
    """The use trainable= is shaped for: low-rank adapters in their own subtree, trained on
    a frozen int8 base (JAX + optax on the dequantised base as the reference)."""
    rng = np.random.default_rng(4)
    params = {"base": _params(),
              "lora": {"a": (rng.normal(size=(6, 2)) * 0.1).astype(np.float32),
                       "b": np.zeros((2, 16), np.float32)}}

    def loss(p, x, y):
        w = p["base"]["body"]["w"] + p["lora"]["a"] @ p["lora"]["b"]
        h = jnp.tanh(x @ w + p["base"]["body"]["b"])
        return jnp.mean((h @ p["base"]["head"]["w"] + p["base"]["head"]["b"] - y) ** 2)

    opt, mask = optax.adam(1e-2), {"base": False, "lora": True}
    step = rlxjax.coreml_train_step(loss, opt, trainable=mask, compress="int8",
                                    backend="reference")
    st = step.init(params)
    base = jax.tree.map(np.asarray, step.params(st))
    st, got = step.fit(st, _batches(), steps=20, progress=False)

    want, _ = _jax_losses(base, mask, opt, _batches(), 20, loss_fn=loss)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    step.last_compiled.validate()
    names = [s.name for s in step.last_compiled.input_specs]
    assert names[:2] == ["params.lora.a", "params.lora.b"]
    assert not any("base" in n for n in names), names


def test_a_frozen_weight_used_twice_is_stored_once(tmp_path):
    """A tied embedding (a gather of the table and a matmul with its transpose): the fp32
    frozen table is one blob, not also a transposed copy."""
    table = np.random.default_rng(0).standard_normal((100, 160)).astype(np.float32)
    params = {"emb": table, "bias": np.zeros((160,), np.float32)}

    def loss(p, ids, y):
        h = p["emb"][ids] + p["bias"]
        return jnp.mean((h @ p["emb"].T - y) ** 2)

    ids, y = np.array([1, 2, 3], np.int32), np.zeros((3, 100), np.float32)
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-3),
                                    trainable={"emb": False, "bias": True})
    st = step.init(params, ids, y)
    path = step.save(tmp_path / "tied.mlpackage")
    blob = open(os.path.join(path, "Data", "com.apple.CoreML", "weights", "weight.bin"),
                "rb").read()
    assert blob.count(table.tobytes()) == 1
    assert blob.count(np.ascontiguousarray(table.T).tobytes()) == 0
    assert len(blob) < table.nbytes + 4096
    st, value = step(st, ids, y)  # and it still computes JAX's loss
    np.testing.assert_allclose(float(value), float(loss(params, ids, y)), rtol=1e-6)


def test_an_equinox_module_of_bools_is_a_mask():
    """An eqx Module is callable: as ``trainable=`` it is a mask, not the (path, leaf)
    function (it used to be called, failing deep inside equinox)."""
    import equinox as eqx

    model = eqx.nn.MLP(6, 3, 8, 1, key=jax.random.key(0))
    params, static = eqx.partition(model, eqx.is_array)
    mask = eqx.tree_at(lambda m: m.layers[-1].bias, jax.tree.map(lambda _: False, params),
                       True)

    def loss(p, x, y):
        return jnp.mean((eqx.combine(p, static)(x[0]) - y[0]) ** 2)

    batches = _batches()
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), trainable=mask)
    st = step.init(params)
    got = []
    for i in range(3):
        st, v = step(st, *batches[i])
        got.append(float(v))
    flags = jax.tree.leaves(mask)
    want, _ = jax_masked_loop(params, flags, loss, optax.adam(1e-2), 3, batches)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert sum(flags) == 1 and len(jax.tree.leaves(st.params)) == 1
