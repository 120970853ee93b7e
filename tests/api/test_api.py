"""coreml_jit's API contract: caching, pytrees and names, saving, errors."""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
from rlxjax.formats.backends import is_macos
from helpers import assert_tree_close, check_against_jax


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_flax_mlp_with_layernorm_and_gelu_matches_jax(tmp_path):
    flax = pytest.importorskip("flax.linen")

    class MLP(flax.Module):
        @flax.compact
        def __call__(self, x):
            x = flax.LayerNorm()(x)
            x = flax.Dense(32)(x)
            x = flax.gelu(x)
            return flax.Dense(4)(x)

    model = MLP()
    x = _x(5, 8)
    params = model.init(jax.random.PRNGKey(0), x)
    compiled = check_against_jax(model.apply, params, x)
    names = [s.name for s in compiled.input_specs]
    assert "variables.params.Dense_0.kernel" in names and "variables.params.LayerNorm_0.scale" in names
    path = compiled.save(tmp_path / "mlp.mlpackage")
    assert os.path.isfile(os.path.join(path, "Manifest.json"))


def test_closed_over_weights_go_to_the_blob_file(tmp_path):
    w = _x(8, 4)
    compiled = check_against_jax(lambda x: x @ w + np.float32(0.5), _x(3, 8))
    path = compiled.save(tmp_path / "c.mlpackage")
    weights = os.path.join(path, "Data", "com.apple.CoreML", "weights", "weight.bin")
    assert os.path.getsize(weights) >= w.nbytes  # the 32-element kernel is not inlined


def test_equinox_mlp_matches_jax():
    eqx = pytest.importorskip("equinox")
    mlp = eqx.nn.MLP(6, 3, width_size=16, depth=2, activation=jax.nn.gelu,
                     key=jax.random.PRNGKey(0))
    params, static = eqx.partition(mlp, eqx.is_array)

    def f(params, x):
        return jax.vmap(eqx.combine(params, static))(x)

    check_against_jax(f, params, _x(4, 6))


def test_pytree_outputs_and_cache():
    calls = []

    def f(d, y):
        calls.append(1)
        return {"sum": d["a"] + d["b"], "prod": (d["a"] * y, y.sum())}

    cf = rlxjax.coreml_jit(f, backend="reference")
    args = ({"a": _x(2, 3), "b": _x(2, 3, seed=1)}, _x(2, 3, seed=2))
    assert_tree_close(cf(*args), jax.jit(f)(*args))
    cf(*args)
    assert len(calls) == 2  # jax.jit traced once, coreml_jit traced once: cached
    cf({"a": _x(4), "b": _x(4)}, _x(4))
    assert len(calls) == 3  # a new signature compiles again


def test_static_argnums_and_scalar_io():
    def f(x, n, s):
        return (x ** n).sum() * s, s > 0

    got = rlxjax.coreml_jit(f, static_argnums=1, backend="reference")(_x(3), 3, 2.0)
    assert_tree_close(got, jax.jit(f, static_argnums=1)(_x(3), 3, 2.0))


def test_names_sanitised_for_core_ml_but_kept_in_description():
    def f(params, x):
        return params["layer.0"]["w"] @ x

    compiled = rlxjax.coreml_jit(f).lower({"layer.0": {"w": _x(2, 3)}}, _x(3)).compile()
    (w, x) = compiled.input_specs
    assert w.name == "params.layer.0.w" and w.mil_name == "params_layer_0_w"
    feats = {f.name: f.shortDescription for f in compiled.spec.description.input}
    assert feats == {"params_layer_0_w": "params.layer.0.w", "x": "x"}


def test_output_that_is_an_input_or_a_constant():
    def f(x):
        return x, jnp.ones((3,)), x

    check_against_jax(f, _x(3))


def test_bool_and_int_io():
    def f(m, i):
        return jnp.logical_not(m), i * 2, m & (i > 0)

    check_against_jax(f, np.array([True, False, True]), np.array([1, -2, 3], np.int32))


def test_wrong_call_arguments_are_clear():
    compiled = rlxjax.coreml_jit(lambda x, y: x + y).lower(_x(2, 3), _x(2, 3)).compile()
    with pytest.raises(rlxjax.ArgumentError, match=r"argument 'y' is float32\[3, 2\].*float32\[2, 3\]"):
        compiled(_x(2, 3), _x(3, 2))
    with pytest.raises(rlxjax.ArgumentError, match="int32"):
        compiled(_x(2, 3), np.ones((2, 3), np.int32))
    with pytest.raises(rlxjax.ArgumentError, match="structure"):
        compiled(_x(2, 3))
    with pytest.raises(rlxjax.ArgumentError, match="positional"):
        rlxjax.coreml_jit(lambda x: x)(x=_x(2))


def test_unsupported_primitive_names_primitive_and_line():
    def f(x):
        return jnp.linalg.eigh(x)  # noqa: the line the error must point at

    with pytest.raises(rlxjax.UnsupportedPrimitiveError) as e:
        rlxjax.coreml_jit(f).lower(np.eye(3, dtype=np.float32))
    assert "eigh" in str(e.value)
    assert "test_api.py" in str(e.value)


def test_int64_in_x64_mode_is_clear():
    with jax.enable_x64(True):
        with pytest.raises(rlxjax.UnsupportedDTypeError, match="int64.*x64"):
            rlxjax.coreml_jit(lambda x: x + 1).lower(np.arange(3, dtype=np.int64))


def test_dynamic_shape_is_clear():
    """Symbolic dims make flexible inputs (docs/flexible.md, tests/api/test_flexible.py); an op
    that cannot take one is refused naming the op, the dim and the user's line."""
    (b,) = jax.export.symbolic_shape("b")
    spec = jax.ShapeDtypeStruct((b, 3), jnp.float32)
    for fn, op in ((lambda x: jnp.concatenate([x, x]), "concatenate"),
                   (lambda x: jnp.pad(x, 1), "pad")):
        with pytest.raises(rlxjax.DynamicShapeError,
                           match=rf"^{op} at .*test_api.py.* flexible dimension 'b'"):
            rlxjax.coreml_jit(fn).lower(spec)
    for fn in (lambda x: x * 2, lambda x: x.reshape(-1), lambda x: jnp.sum(x, 0) + x.shape[0]):
        c = rlxjax.coreml_jit(fn, backend="reference").lower(spec).compile()
        for n in (1, 5):
            x = np.arange(3 * n, dtype=np.float32).reshape(n, 3)
            np.testing.assert_allclose(c(x), jax.jit(fn)(x), rtol=1e-6)


def test_target_and_backend_errors():
    with pytest.raises(rlxjax.TargetError, match="iOS17"):
        rlxjax.coreml_jit(lambda x: x, target="iOS14")
    if not is_macos():
        with pytest.raises(rlxjax.BackendUnavailableError, match="macOS"):
            rlxjax.coreml_jit(lambda x: x, backend="coreml")


def test_lowered_text_and_histogram():
    lowered = rlxjax.coreml_jit(lambda x: jnp.tanh(x) @ x.T).lower(_x(2, 3))
    text = lowered.as_text()
    assert "tanh" in text and "dot_general" in text
    compiled = lowered.compile()
    hist = compiled.op_histogram()
    assert hist["matmul"] == 1 and hist["tanh"] == 1 and "const" not in hist
    assert "matmul" in compiled.as_text()


def test_save_replaces_atomically_and_failure_keeps_previous(tmp_path, monkeypatch):
    path = tmp_path / "m.mlpackage"
    first = rlxjax.coreml_jit(lambda x: x + 1).lower(_x(2)).compile()
    second = rlxjax.coreml_jit(lambda x: x * 3).lower(_x(20)).compile()
    first.save(path)
    manifest = (path / "Manifest.json").read_text()
    model_file = path / "Data" / "com.apple.CoreML" / "model.mlmodel"
    before = model_file.read_bytes()

    import rlxjax.coreml.package as package

    def broken(model, weights, staged):
        os.makedirs(staged)
        (open(os.path.join(staged, "partial"), "w")).write("half")
        raise OSError("disk full")

    monkeypatch.setattr(package, "create_mlpackage", broken)
    with pytest.raises(OSError, match="disk full"):
        second.save(path)
    assert model_file.read_bytes() == before and (path / "Manifest.json").read_text() == manifest
    assert sorted(os.listdir(tmp_path)) == ["m.mlpackage"]  # no staging leftovers
    monkeypatch.undo()

    second.save(path)
    assert model_file.read_bytes() != before
    assert sorted(os.listdir(tmp_path)) == ["m.mlpackage"]
    with pytest.raises(rlxjax.RlxError, match=".mlpackage"):
        second.save(tmp_path / "m.zip")


@pytest.mark.coreml_runtime
def test_coreml_backend_matches_jax():  # runs on macOS only
    f = lambda x: jnp.tanh(x) * 2  # noqa: E731
    got = rlxjax.coreml_jit(f, backend="coreml")(_x(3, 4))
    np.testing.assert_allclose(got, np.asarray(f(_x(3, 4))), rtol=1e-5, atol=1e-6)


def test_validation_error_names_the_op():
    compiled = rlxjax.coreml_jit(lambda x: jnp.tanh(x)).lower(_x(3)).compile()
    block = compiled.spec.mlProgram.functions["main"].block_specializations["CoreML7"]
    tanh = next(op for op in block.operations if op.type == "tanh")
    tanh.outputs[0].type.tensorType.dimensions[0].constant.size = 4  # declare a wrong shape
    with pytest.raises(rlxjax.ValidationError, match="at op tanh -> out"):
        compiled.validate()


def test_save_removes_staging_left_by_killed_writers(tmp_path):
    dead = tmp_path / ".rlxjax-999999999-abc"  # no such process
    dead.mkdir()
    (dead / "staged.mlpackage").mkdir()
    dead_ckpt = tmp_path / ".rlxjax-ckpt-999999999-xyz"
    dead_ckpt.write_bytes(b"half")
    live = tmp_path / f".rlxjax-{os.getppid()}-busy"  # a running process: left alone
    live.mkdir()
    rlxjax.coreml_jit(lambda x: x + 1).lower(_x(2)).compile().save(tmp_path / "m.mlpackage")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.mlpackage", live.name])


def test_grad_with_static_arguments_and_its_argnums_errors():
    """coreml_grad's stage (grad_api.GradTransform) counts leaves past a static argument, and
    refuses argnums it cannot honour before anything is traced."""
    def f(scale, w, x):
        return jnp.sum(jnp.tanh(w * x) * scale)

    w, x = np.linspace(-1, 1, 6).astype(np.float32), np.full(6, 0.5, np.float32)
    for argnums in (1, (1, 2)):
        got = rlxjax.coreml_value_and_grad(f, argnums=argnums, static_argnums=0)(3.0, w, x)
        want = jax.value_and_grad(f, argnums=argnums)(3.0, w, x)
        assert_tree_close(got, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(rlxjax.ArgumentError, match="overlap static_argnums"):
        rlxjax.coreml_grad(f, argnums=0, static_argnums=0)
    with pytest.raises(rlxjax.ArgumentError, match="at least one argument"):
        rlxjax.coreml_grad(f, argnums=())
