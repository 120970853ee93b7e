"""LoRA fine-tunes on a frozen int8 base through coreml_train_step(trainable=, compress=):
plain-JAX adapter subtrees, flax.nnx LoRA models with an nnx filter as trainable=, and the
rlxjax.lora helper on linen and equinox parameter trees - each against the same JAX + optax
loop run on the dequantised base the program computes with."""
from __future__ import annotations

import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlxjax
from helpers import jax_masked_loop
from rlxjax import lora
from rlxjax.errors import ArgumentError

RNG = np.random.default_rng(7)
BATCHES = [(RNG.normal(size=(8, 6)).astype(np.float32),
            RNG.normal(size=(8, 3)).astype(np.float32)) for _ in range(4)]


def _masked_jax_loop(full, flags, loss_fn, optimizer, steps, batches=BATCHES):
    """JAX + optax on the leaves of ``full`` where ``flags`` (one per leaf) is True, the
    others fixed at their values in ``full``: (losses, the whole trained tree)."""
    return jax_masked_loop(full, flags, loss_fn, optimizer, steps, batches)


def _lora_flags(tree):
    return jax.tree.leaves(jax.tree.broadcast(lora.TRAINABLE, tree))


def _plain_params():
    rng = np.random.default_rng(0)
    return {"base": {"w1": (rng.normal(size=(6, 16)) * 0.5).astype(np.float32),
                     "b1": (rng.normal(size=16) * 0.1).astype(np.float32),
                     "w2": (rng.normal(size=(16, 3)) * 0.5).astype(np.float32)},
            "lora": {"a1": (rng.normal(size=(6, 2)) * 0.3).astype(np.float32),
                     "b1": np.zeros((2, 16), np.float32),
                     "a2": (rng.normal(size=(16, 2)) * 0.3).astype(np.float32),
                     "b2": np.zeros((2, 3), np.float32)}}


def _plain_loss(p, x, y):
    b, a = p["base"], p["lora"]
    h = jnp.tanh(x @ (b["w1"] + a["a1"] @ a["b1"]) + b["b1"])
    return jnp.mean((h @ (b["w2"] + a["a2"] @ a["b2"]) - y) ** 2)


def test_plain_jax_adapters_on_an_int8_base_match_optax_for_100_steps():
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(_plain_loss, opt, trainable=lora.TRAINABLE,
                                    compress="int8", state="mlstate", backend="reference")
    st = step.init(_plain_params())
    base = jax.tree.map(np.asarray, step.params(st))  # the dequantised base + initial adapters
    assert not np.array_equal(base["base"]["w1"], _plain_params()["base"]["w1"])
    st, got = step.fit(st, BATCHES, steps=100, progress=False)
    want, trained = _masked_jax_loop(base, _lora_flags(base), _plain_loss, opt, 100)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert got[-1] < 0.8 * got[0]  # it learns
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
                 step.params(st)["lora"], trained["lora"])
    step.last_compiled.validate()


# --- flax.nnx: nnx.LoRALinear / nnx.LoRA, trainable= an nnx filter ----------------------

def _numpy_init(shapes, zero=None, seed=0):
    """numpy values for a tree of ShapeDtypeStructs (``eval_shape`` of a model's init):
    the tests skip JAX's eager init, which compiles one XLA program per random draw."""
    rng = np.random.default_rng(seed)

    def one(path, s):
        if not isinstance(s, jax.ShapeDtypeStruct):
            return s  # an equinox activation function, ...
        if zero is not None and zero in jax.tree_util.keystr(path):
            return np.zeros(s.shape, s.dtype)
        return (rng.normal(size=s.shape) * 0.4).astype(s.dtype)

    return jax.tree_util.tree_map_with_path(one, shapes)


@functools.lru_cache(maxsize=None)
def _nnx_split():
    """(graphdef, params) of a two-layer nnx.LoRALinear model (lora_b zero, as nnx inits)."""
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.LoRALinear(6, 16, lora_rank=2, rngs=rngs)
            self.l2 = nnx.LoRALinear(16, 3, lora_rank=2, rngs=rngs)

        def __call__(self, x):
            return self.l2(jnp.tanh(self.l1(x)))

    graphdef, shapes = nnx.split(nnx.eval_shape(lambda: Net(nnx.Rngs(0))))
    return graphdef, _numpy_init(shapes, zero="lora_b")


def _nnx_optax_loop(graphdef, base, opt, steps):
    """JAX + optax on the LoRAParam partition of the model over ``base`` (an nnx.State):
    (losses, the trained LoRAParam state, the trained model)."""
    from flax import nnx

    g2, lora_state, rest = nnx.split(nnx.merge(graphdef, base), nnx.LoRAParam, ...)

    @jax.jit
    def jstep(ls, opt_state, x, y):
        val, g = jax.value_and_grad(
            lambda ls: jnp.mean((nnx.merge(g2, ls, rest)(x) - y) ** 2))(ls)
        upd, opt_state = opt.update(g, opt_state, ls)
        return optax.apply_updates(ls, upd), opt_state, val

    opt_state, losses = opt.init(lora_state), []
    for i in range(steps):
        lora_state, opt_state, val = jstep(lora_state, opt_state, *BATCHES[i % len(BATCHES)])
        losses.append(float(val))
    return losses, lora_state, nnx.merge(g2, lora_state, rest)


def test_nnx_lora_with_an_nnx_filter_matches_optax_on_the_lora_partition():
    from flax import nnx

    graphdef, params = _nnx_split()

    def loss(p, x, y):
        return jnp.mean((nnx.merge(graphdef, p)(x) - y) ** 2)

    opt = optax.adam(5e-3)
    step = rlxjax.coreml_train_step(loss, opt, trainable=nnx.LoRAParam, compress="int8",
                                    backend="reference")
    st = step.init(params)
    assert isinstance(st.params, nnx.State)
    base = jax.tree.map(np.asarray, step.params(st))  # an nnx.State: the dequantised kernels
    st, got = step.fit(st, BATCHES, steps=100, progress=False)
    names = [s.name for s in step.last_compiled.input_specs]
    assert [n for n in names if n.startswith("params.")] == [
        f"params.{l}.lora.lora_{ab}.value" for l in ("l1", "l2") for ab in "ab"]

    want, lora_state, _ = _nnx_optax_loop(graphdef, base, opt, 100)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    _, got_lora, _ = nnx.split(nnx.merge(graphdef, step.params(st)), nnx.LoRAParam, ...)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
                 got_lora, lora_state)


def test_any_nnx_filter_selects_the_variables_nnx_split_would():
    from flax import nnx

    graphdef, params = _nnx_split()

    def loss(p, x, y):
        return jnp.mean((nnx.merge(graphdef, p)(x) - y) ** 2)

    def trained_inputs(trainable):
        step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), trainable=trainable,
                                        backend="reference")
        st = step.init(params)
        st, val = step(st, *BATCHES[0])
        assert np.isfinite(float(val))
        return [s.name[len("params."):-len(".value")]
                for s in step.last_compiled.input_specs if s.name.startswith("params.")]

    def by_nnx(f):  # the Variables nnx.split(model, f, ...) puts in the first partition
        _, part, _ = nnx.split(nnx.merge(graphdef, params), f, ...)
        return [".".join(str(k) for k in path) for path, _ in nnx.to_flat_state(part)]

    for f in (nnx.All(nnx.LoRAParam, nnx.PathContains("l2")),   # l2's adapters only
              (nnx.LoRAParam, nnx.PathContains("bias")),         # nnx.Any as a tuple
              nnx.Not(nnx.LoRAParam)):                           # full fine-tune, no adapters
        assert trained_inputs(f) == by_nnx(f), f
    assert trained_inputs(nnx.All(nnx.LoRAParam, nnx.PathContains("l2"))) == [
        "l2.lora.lora_a", "l2.lora.lora_b"]


# --- rlxjax.lora: adapters for linen / equinox parameter trees --------------------------

def test_add_adapters_and_merge_on_a_linen_mlp():
    import flax.linen as nn

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = jnp.tanh(nn.Dense(16)(x))
            x = nn.LayerNorm()(x)
            return nn.Dense(3)(x)

    model = MLP()
    params = _numpy_init(jax.eval_shape(model.init, jax.random.key(0), BATCHES[0][0]))["params"]
    tree = lora.add_adapters(params, rank=2, key=jax.random.key(1),
                             select=lambda path, leaf: path[-1].key == "kernel")
    assert sorted(tree["lora"]) == ["Dense_0.kernel", "Dense_1.kernel"]
    assert tree["lora"]["Dense_0.kernel"]["a"].shape == (6, 2)
    assert tree["lora"]["Dense_0.kernel"]["b"].shape == (2, 16)
    assert not np.any(tree["lora"]["Dense_1.kernel"]["b"])  # b = 0: merge starts at the base
    jax.tree.map(np.testing.assert_array_equal, lora.merge(tree), params)

    def loss(p, x, y):
        return jnp.mean((model.apply({"params": lora.merge(p, alpha=4.0)}, x) - y) ** 2)

    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, trainable=lora.TRAINABLE, compress="int8",
                                    backend="reference")
    st = step.init(tree)
    base = jax.tree.map(np.asarray, step.params(st))
    st, got = step.fit(st, BATCHES, steps=20, progress=False)
    want, trained = _masked_jax_loop(base, _lora_flags(base), loss, opt, 20)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    # the merged fine-tuned params as JAX computes them: W + (alpha / r) a @ b
    merged = lora.merge(step.params(st), alpha=4.0)
    a, b = trained["lora"]["Dense_1.kernel"]["a"], trained["lora"]["Dense_1.kernel"]["b"]
    np.testing.assert_allclose(merged["Dense_1"]["kernel"],
                               base["base"]["Dense_1"]["kernel"] + 2.0 * np.asarray(a @ b),
                               rtol=1e-4, atol=1e-6)

    # vs the full fine-tune of the same model: fewer ops (no optimizer state or update for
    # the base), but W + a @ b keeps each kernel's dense gradient x^T dy, from which a's and
    # b's come: per layer a @ b, dW, da, db on top of the full step's matmuls
    full = rlxjax.coreml_train_step(lambda p, x, y: loss({"base": p, "lora": {}}, x, y), opt,
                                    backend="reference")
    full(full.init(params), *BATCHES[0])
    full_ops, lora_ops = full.last_compiled.op_histogram(), step.last_compiled.op_histogram()
    assert sum(lora_ops.values()) < sum(full_ops.values()), (lora_ops, full_ops)
    assert (full_ops["matmul"], lora_ops["matmul"]) == (2 + 2 + 1, 2 + 2 + 1 + 2 * 3)


def test_add_adapters_on_an_equinox_mlp():
    import equinox as eqx

    mlp = _numpy_init(eqx.filter_eval_shape(eqx.nn.MLP, 6, 3, 16, 2, key=jax.random.key(0)))
    params, static = eqx.partition(mlp, eqx.is_array)
    tree = lora.add_adapters(params, rank=2, key=jax.random.key(1))  # every 2-D weight
    assert sorted(tree["lora"]) == ["layers.0.weight", "layers.1.weight", "layers.2.weight"]
    assert tree["lora"]["layers.0.weight"]["a"].shape == (16, 2)  # eqx weight: (out, in)

    def loss(p, x, y):
        model = eqx.combine(lora.merge(p), static)
        return jnp.mean((jax.vmap(model)(x) - y) ** 2)

    opt = optax.sgd(0.05, momentum=0.9)
    step = rlxjax.coreml_train_step(loss, opt, trainable=lora.TRAINABLE, compress="int8",
                                    backend="reference")
    st = step.init(tree)
    base = jax.tree.map(np.asarray, step.params(st))
    st, got = step.fit(st, BATCHES, steps=20, progress=False)
    want, _ = _masked_jax_loop(base, _lora_flags(base), loss, opt, 20)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    names = [s.name for s in step.last_compiled.input_specs if s.name.startswith("params")]
    assert names == [f"params.lora.layers.{i}.weight.{ab}" for i in range(3) for ab in "ab"]


def test_adapter_errors():
    p = {"w": np.ones((4, 3), np.float32), "conv": np.ones((3, 3, 2, 2), np.float32)}
    with pytest.raises(ArgumentError, match="positive int"):
        lora.add_adapters(p, rank=0, key=jax.random.key(0))
    with pytest.raises(ArgumentError, match="2-D float kernels only"):
        lora.add_adapters(p, rank=2, key=jax.random.key(0), select=lambda path, x: True)
    with pytest.raises(ArgumentError, match="int32 of shape"):
        lora.add_adapters({"i": np.ones((2, 2), np.int32)}, rank=1, key=jax.random.key(0),
                          select=lambda path, x: True)
    with pytest.raises(ArgumentError, match="chose no 2-D"):
        lora.add_adapters(p, rank=2, key=jax.random.key(0), select=lambda path, x: False)
    with pytest.raises(ArgumentError, match="takes the"):
        lora.merge(p)
    tree = lora.add_adapters(p, rank=2, key=jax.random.key(0))
    tree["lora"]["nope"] = tree["lora"]["w"]
    with pytest.raises(ArgumentError, match="name no base parameter"):
        lora.merge(tree)


# --- the step's program and its train + predict package ---------------------------------

def test_a_lora_only_step_has_fewer_mil_ops_than_the_full_step():
    from flax import nnx

    graphdef, params = _nnx_split()

    def loss(p, x, y):
        return jnp.mean((nnx.merge(graphdef, p)(x) - y) ** 2)

    def ops(**kw):
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), backend="reference", **kw)
        step(step.init(params), *BATCHES[0])
        return step.last_compiled.op_histogram()

    full, only = ops(), ops(trainable=nnx.LoRAParam, compress="int8")
    assert sum(only.values()) < sum(full.values()), (only, full)
    # nnx.LoRA computes x @ kernel + (x @ a) @ b: with the kernel frozen its weight
    # gradient x^T dy (one matmul per layer) is gone; everything else is needed
    assert only["matmul"] == full["matmul"] - 2, (only, full)
    assert not any(k.startswith("constexpr") for k in full)


def test_a_lora_package_trains_and_predicts_with_one_state(tmp_path):
    """step.save(predict=) for an nnx LoRA model on an int8 base: the loaded package's
    train_step follows JAX + optax, and predict - reading the same state - equals the
    JAX model with the trained adapters."""
    import coremltools as ct
    from flax import nnx

    graphdef, params = _nnx_split()

    def fn(p, x):
        return nnx.merge(graphdef, p)(x)

    def loss(p, x, y):
        return jnp.mean((fn(p, x) - y) ** 2)

    opt, xq = optax.adam(5e-3), BATCHES[1][0][:2]
    step = rlxjax.coreml_train_step(loss, opt, trainable=nnx.LoRAParam, compress="int8",
                                    state="mlstate", target="iOS18")
    st = step.init(params, *BATCHES[0])
    base = jax.tree.map(np.asarray, step.params(st))
    path = step.save(tmp_path / "lora.mlpackage", predict=(fn, xq))
    ct.models.MLModel(path, skip_model_load=True, function_name="predict")  # the loader

    m = rlxjax.load(path, backend="reference", flat=True)
    assert m.functions == ("train_step", "predict")
    folder = step.export_state(st, tmp_path / "state")
    state = m.make_state()
    for row in json.load(open(os.path.join(folder, "state.json")))["states"]:
        state.write_state(row["name"],
                          np.fromfile(os.path.join(folder, row["name"] + ".f16"), "<f2"))
    got = [float(m(*BATCHES[i], state=state)["out"]) for i in range(3)]
    pred = m.function("predict")(xq, state=state)["out"]

    want, _, trained = _nnx_optax_loop(graphdef, base, opt, 3)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    np.testing.assert_allclose(pred, np.asarray(trained(xq)), rtol=1e-5, atol=1e-6)


def test_an_nnx_filter_on_a_plain_tree_is_a_clear_error():
    from flax import nnx

    step = rlxjax.coreml_train_step(_plain_loss, optax.sgd(0.1), trainable=nnx.LoRAParam,
                                    backend="reference")
    with pytest.raises(ArgumentError, match="holds no nnx Variables"):
        step.init(_plain_params())


def test_trained_adapters_alone_go_to_safetensors_and_back(tmp_path):
    from flax import nnx
    from safetensors.numpy import load_file

    graphdef, params = _nnx_split()

    def loss(p, x, y):
        return jnp.mean((nnx.merge(graphdef, p)(x) - y) ** 2)

    step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), trainable=nnx.LoRAParam,
                                    compress="int8", backend="reference")
    st = step.init(params)
    st, _ = step(st, *BATCHES[0])
    path = step.export_params(st, tmp_path / "adapters.safetensors", trained_only=True)
    flat = load_file(path)
    assert sorted(flat) == [f"{l}/lora/lora_{ab}/value" for l in ("l1", "l2") for ab in "ab"]
    _, want, _ = nnx.split(nnx.merge(graphdef, step.params(st)), nnx.LoRAParam, ...)
    for p, v in nnx.to_flat_state(want):
        np.testing.assert_array_equal(flat["/".join(map(str, p)) + "/value"], np.asarray(v))
    back = step.load_params(path, step.init(params))  # a fresh state takes the adapters
    jax.tree.map(np.testing.assert_array_equal, back.params, st.params)
    whole = load_file(step.export_params(st, tmp_path / "all.safetensors"))
    assert "l1/kernel/value" in whole  # the whole tree, the base dequantised
    np.testing.assert_array_equal(whole["l1/kernel/value"], step.params(st)["l1"]["kernel"])
    # the whole tree reads back too (its frozen tensors are this step's base) ...
    back = step.load_params(tmp_path / "all.safetensors", step.init(params))
    jax.tree.map(np.testing.assert_array_equal, back.params, st.params)
    # ... but not into a step on another base
    other = jax.tree.map(lambda x: np.asarray(x) + 1.0, params)
    with pytest.raises(rlxjax.ArgumentError, match="frozen weight of this step"):
        step.load_params(tmp_path / "all.safetensors", step.init(other))
