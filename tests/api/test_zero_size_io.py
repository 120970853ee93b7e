"""Zero-size program inputs and outputs, wherever JAX allows them (issue 13).

Core ML has no zero-size tensors, but a zero-size value is known from its shape: a
zero-size input carries no data (the program reads it as an empty constant), a zero-size
output is made by the host. ``coreml_jit`` / ``coreml_grad`` / ``coreml_value_and_grad``
take and return them like ``jax.jit`` / ``jax.grad``; a saved package lists them in its
metadata (``rlxjax.empty``) and ``rlxjax.load`` takes and returns them too. Training steps
refuse them (ZeroSizeError). Everything is compared with JAX."""
from __future__ import annotations

import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from jax import lax

import rlxjax
from helpers import FP32_TOL, assert_tree_close
from rlxjax.coreml.package import PackageError

F32, I32 = np.float32, np.int32
MODEL_REL = os.path.join("Data", "com.apple.CoreML", "model.mlmodel")


@st.composite
def empty_shapes(draw):
    """A shape of rank 1-3 with at least one 0."""
    shape = list(draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=3)))
    shape[draw(st.integers(0, len(shape) - 1))] = 0
    return tuple(shape)


@settings(max_examples=4, deadline=None)
@given(shape=empty_shapes(), dtype=st.sampled_from([F32, I32, np.bool_]))
def test_zero_size_inputs_and_outputs_match_jax(shape, dtype):
    """Empty leaves anywhere among the arguments and results (pytrees, all-empty results)."""
    e = np.zeros(shape, dtype)
    x = np.arange(6, dtype=F32).reshape(2, 3) / 4

    def f(e, x, tree):
        n = jnp.asarray(e.size + e.ndim, F32)  # uses e's shape: a value known statically
        return {"e2": e[..., :0], "y": x * n + tree["b"].sum(),
                "pair": (tree["z"], jnp.concatenate([e, e], axis=0))}

    tree = {"b": np.zeros((0, 2), F32), "z": np.ones((3, 0), I32)}
    got = rlxjax.coreml_jit(f, backend="reference")(e, x, tree)
    assert_tree_close(got, jax.jit(f)(e, x, tree), **FP32_TOL)
    only_empty = lambda e, x: (e, x[:0], jnp.zeros((0,), jnp.bool_))  # noqa: E731
    c = rlxjax.coreml_jit(only_empty, backend="reference").lower(e, x).compile()
    c.validate()
    assert not c.output_specs  # nothing to compute: never run
    assert_tree_close(c(e, x), jax.jit(only_empty)(e, x))


def test_zero_size_arguments_are_checked():
    c = rlxjax.coreml_jit(lambda x, e: x + e.sum(), backend="reference").lower(
        np.ones(3, F32), np.ones((0, 2), F32)).compile()
    assert [s.name for s in c.input_specs] == ["x"]
    with pytest.raises(rlxjax.ArgumentError, match="argument 'e' is float32\\[0, 3\\]"):
        c(np.ones(3, F32), np.ones((0, 3), F32))
    with pytest.raises(rlxjax.ArgumentError, match="argument 'e' is int32"):
        c(np.ones(3, F32), np.ones((0, 2), I32))


def test_grad_with_zero_size_arguments_and_results():
    x = np.linspace(-1, 1, 6, dtype=F32).reshape(2, 3)
    e = np.zeros((0, 3), F32)

    def loss(x, e, w):
        return jnp.sum(jnp.concatenate([x, e]) ** 2 * w["a"]) + jnp.sum(e * 3), (e, x[:, :0])

    w = {"a": np.float32(1.5), "empty": np.zeros((2, 0), F32)}
    for argnums in (0, 1, (0, 1, 2)):
        for fn, jfn in ((rlxjax.coreml_grad, jax.grad),
                        (rlxjax.coreml_value_and_grad, jax.value_and_grad)):
            got = fn(loss, argnums=argnums, has_aux=True, backend="reference")(x, e, w)
            assert_tree_close(got, jfn(loss, argnums=argnums, has_aux=True)(x, e, w),
                              **FP32_TOL)
    with pytest.raises(rlxjax.ArgumentError, match="scalar float losses, got float32\\[0\\]"):
        rlxjax.coreml_grad(lambda e: e.sum(0), backend="reference")(np.zeros((3, 0), F32))


def _saved(tmp_path):
    def f(e, x, z):
        return {"a": x * 2 + e.sum(), "empty": jnp.zeros((0, 2), jnp.bool_), "z": z + 1}
    args = (np.zeros((0, 4), F32), np.arange(3, dtype=F32), np.ones((2, 0), I32))
    compiled = rlxjax.coreml_jit(f, backend="reference").lower(*args).compile()
    return compiled.save(tmp_path / "m.mlpackage"), f, args


def test_save_and_load_with_zero_size_io(tmp_path):
    path, f, args = _saved(tmp_path)
    m = rlxjax.load(path, backend="reference", flat=True)
    assert m.input_names == ("e", "x", "z")
    assert m.output_names == ("out_a", "out_empty", "out_z")
    want = jax.jit(f)(*args)
    for out in (m(*args), m(x=args[1], z=args[2], e=args[0])):
        assert_tree_close(out, {"out_a": want["a"], "out_empty": want["empty"],
                                "out_z": want["z"]})
    with pytest.raises(rlxjax.ArgumentError, match="input 'e' is float32\\[0, 5\\]"):
        m(np.zeros((0, 5), F32), *args[1:])
    with pytest.raises(rlxjax.ArgumentError, match="missing input\\(s\\) 'z'"):
        m(*args[:2])
    from rlxjax.inspect_package import describe
    text = describe(path)
    assert "zero-size inputs / outputs" in text and "out_empty  bool[0, 2]" in text


@pytest.mark.parametrize("bad", [
    "not json", {"inputs": [{"position": 9, "name": "e", "mil_name": "e", "shape": [0],
                             "dtype": "float32"}], "outputs": []},
    {"inputs": [{"position": 0, "name": "e", "mil_name": "e", "shape": [2, 3],
                 "dtype": "float32"}], "outputs": []},
    {"inputs": [], "outputs": [{"position": 1, "name": "o", "mil_name": "o", "shape": [-1, 0],
                                "dtype": "float32"}]},
    {"inputs": [], "outputs": [{"position": 1, "name": "o", "mil_name": "o", "shape": [0],
                                "dtype": "no-such-dtype"}]},
    {"inputs": []},
])
def test_malformed_zero_size_metadata(tmp_path, bad):
    path, _, args = _saved(tmp_path)
    from coremltools.proto import Model_pb2
    model = Model_pb2.Model()
    with open(os.path.join(path, MODEL_REL), "rb") as fh:
        model.ParseFromString(fh.read())
    model.description.metadata.userDefined["rlxjax.empty"] = (
        bad if isinstance(bad, str) else json.dumps(bad))
    with open(os.path.join(path, MODEL_REL), "wb") as fh:
        fh.write(model.SerializeToString())
    with pytest.raises(PackageError, match="rlxjax.empty"):
        rlxjax.load(path, backend="reference", flat=True)


def test_nothing_to_save_and_training_steps_refuse_zero_size(tmp_path):
    c = rlxjax.coreml_jit(lambda x: x[:0], backend="reference").lower(np.ones(3, F32)).compile()
    with pytest.raises(rlxjax.ZeroSizeError, match="nothing to save"):
        c.save(tmp_path / "n.mlpackage")
    assert not os.path.exists(tmp_path / "n.mlpackage")
    optax = pytest.importorskip("optax")
    step = rlxjax.coreml_train_step(lambda p, x: jnp.sum(p["w"] * x) + jnp.sum(p["e"]),
                                    optax.sgd(0.1), backend="reference")
    params = {"w": np.ones(3, F32), "e": np.zeros((0,), F32)}
    with pytest.raises(rlxjax.ZeroSizeError, match="'params.e' is zero-size"):
        step(step.init(params), np.ones(3, F32))
    shutil.rmtree(tmp_path, ignore_errors=True)


# -- zero-size operands, carries and results of control flow ----------------------------------
LOOPS = {
    "fori_carry": lambda x, e: lax.fori_loop(0, 3, lambda i, c: (c[0] * 1.5, c[1] * 2), (x, e)),
    "while_carry": lambda x, e: lax.while_loop(lambda c: c[0].sum() < 40,
                                               lambda c: (c[0] * 2, c[1] + 1), (x + 1, e)),
    "cond_operand": lambda x, e: lax.cond(x.sum() > 0, lambda a, b: (a * 3, b, a[:0]),
                                          lambda a, b: (a - 1, b * 2, a[:0] + 1), x, e),
    "scan_xs_ys": lambda x, e: lax.scan(lambda c, r: (c * 2 + r.sum(), (r, c[:0])), x,
                                        jnp.zeros((4, 0), F32)),
    "scan_length_0": lambda x, e: lax.scan(lambda c, r: (c + r.sum(), r * 2), x, e),
    "scan_empty_const": lambda x, e: lax.scan(lambda c, r: (c + r + e.sum(), c), x[0],
                                              x),
}


@pytest.mark.parametrize("name", sorted(LOOPS))
def test_control_flow_with_zero_size_values(name):
    """Zero-size values never enter a region op (Core ML has none): compared with JAX,
    forward and gradient, and no value of the program (regions included) is zero-size."""
    from rlxjax.transforms.regions import all_regions
    x = np.linspace(-1, 1, 6, dtype=F32).reshape(2, 3)
    e = np.zeros((0, 3), F32)
    f = LOOPS[name]
    c = rlxjax.coreml_jit(f, backend="reference").lower(x, e).compile()
    c.validate()
    assert_tree_close(c(x, e), jax.jit(f)(x, e), **FP32_TOL)
    for g in [c.graph] + all_regions(c.graph):
        assert all(v.type.size > 0 for _, v in g.inputs)
        assert all(v.type.size > 0 for n in g.nodes for v in n.outputs), g
    if name == "while_carry":
        return  # no reverse mode through while_loop (JAX refuses it too)
    loss = lambda x, e: sum(jnp.sum(leaf * 0.5) for leaf in jax.tree_util.tree_leaves(  # noqa
        f(x, e)) if leaf.dtype == F32)
    assert_tree_close(rlxjax.coreml_grad(loss, argnums=(0, 1), backend="reference")(x, e),
                      jax.grad(loss, (0, 1))(x, e), **FP32_TOL)
