"""step.export_params / TrainState.load_params: parameters as safetensors.

Checked against safetensors' own numpy loader (names are pytree paths joined by '/', values
bit-exact), and by continuing a training run from the exported file, which must equal
continuing the run directly."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st
from safetensors.numpy import load_file

import rlxjax
from rlxjax.errors import ArgumentError
from rlxjax.training.params_io import load_params, save_params


def _params(rng, d=6):
    return {"layers": [{"w": rng.standard_normal((d, d)).astype(np.float32),
                        "b": rng.standard_normal(d).astype(np.float32)} for _ in range(2)],
            "scale": np.float32(1.5)}


def _loss(p, x, y):
    h = x
    for layer in p["layers"]:
        h = jnp.tanh(h @ layer["w"] + layer["b"])
    return jnp.mean((h * p["scale"] - y) ** 2)


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([np.float32, np.float16, np.int32]),
       st.lists(st.integers(1, 4), min_size=0, max_size=3))
def test_roundtrip_against_safetensors_numpy(tmp_path_factory, seed, dtype, shape):
    rng = np.random.default_rng(seed)
    leaf = (rng.standard_normal(shape) * 100).astype(dtype)
    tree = {"a": {"kernel": leaf}, "b": (leaf[..., None], np.arange(3, dtype=np.int32))}
    path = tmp_path_factory.mktemp("p") / "p.safetensors"
    save_params(path, tree)
    stored = load_file(str(path))   # the safetensors library's own reader
    assert sorted(stored) == ["a/kernel", "b/0", "b/1"]
    for name, want in (("a/kernel", leaf), ("b/0", leaf[..., None]),
                       ("b/1", np.arange(3, dtype=np.int32))):
        assert stored[name].dtype == want.dtype and stored[name].shape == want.shape
        assert stored[name].tobytes() == np.asarray(want).tobytes()
    back = load_params(path, tree)
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(tree)
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(tree)):
        assert a.dtype == np.asarray(b).dtype and a.tobytes() == np.asarray(b).tobytes()


def test_mismatches_name_the_leaf(tmp_path):
    p = _params(np.random.default_rng(0))
    path = save_params(tmp_path / "p.safetensors", p)
    other = dict(p, layers=[dict(p["layers"][0], w=np.zeros((6, 5), np.float32)),
                            p["layers"][1]])
    with pytest.raises(ArgumentError, match=r"'layers/0/w'.*float32\[6, 6\].*float32\[6, 5\]"):
        load_params(path, other)
    with pytest.raises(ArgumentError, match=r"'layers/1/b'.*float32.*int32"):
        load_params(path, dict(p, layers=[p["layers"][0], dict(p["layers"][1],
                                                               b=np.zeros(6, np.int32))]))
    with pytest.raises(ArgumentError, match=r"no tensor 'extra'"):
        load_params(path, dict(p, extra=np.zeros(2, np.float32)))
    with pytest.raises(ArgumentError, match=r"holds tensor 'scale'.*strict=False"):
        load_params(path, {"layers": p["layers"]})
    sub = load_params(path, {"layers": p["layers"]}, strict=False)
    np.testing.assert_array_equal(sub["layers"][1]["w"], p["layers"][1]["w"])
    with pytest.raises(ArgumentError, match="contains '/'"):
        save_params(tmp_path / "q.safetensors", {"a/b": np.zeros(2, np.float32)})
    (tmp_path / "bad.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ArgumentError, match="not a safetensors file"):
        load_params(tmp_path / "bad.safetensors", p)


@pytest.mark.parametrize("mode", ["io", "mlstate"])
def test_export_reload_continue_equals_continuing(tmp_path, mode):
    rng = np.random.default_rng(1)
    params = _params(rng)
    batches = [(rng.standard_normal((4, 6)).astype(np.float32),
                rng.standard_normal((4, 6)).astype(np.float32)) for _ in range(3)]
    step = rlxjax.coreml_train_step(_loss, optax.adam(1e-2), state=mode)
    st = step.init(params)
    st, _ = step.fit(st, batches, 3, progress=False)
    path = step.export_params(st, tmp_path / "adapters.safetensors")
    stored = load_file(path)
    trained = step.params(st)
    np.testing.assert_array_equal(stored["layers/1/w"], np.asarray(trained["layers"][1]["w"]))
    np.testing.assert_array_equal(stored["scale"], np.asarray(trained["scale"]))

    reloaded = step.load_params(path, like=st)
    assert reloaded.step == st.step == 3
    direct, h1 = step.fit(st, batches, 3, progress=False)
    again, h2 = step.fit(reloaded, batches, 3, progress=False)
    assert h1 == h2
    for a, b in zip(jax.tree_util.tree_leaves(step.params(direct)),
                    jax.tree_util.tree_leaves(step.params(again))):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    fresh = step.load_params(path, like=direct, reset_optimizer=True)
    assert fresh.step == 0
    assert all(np.all(np.asarray(m) == 0) for m in
               jax.tree_util.tree_leaves(fresh.opt_state[0].mu))
