"""compress=: frozen weights stored with Core ML's constexpr ops (the payloads of
rlxjax/compression/schemes.py, the targets of rlxjax/coreml/compress.py,
rlxjax/coreml/rules/constexpr.py).

Per scheme and target: the program passes coremltools' MIL loader, coremltools' own
decompression of the op it loaded gives exactly the values the RLX weight node carries
(which are coremltools.optimize's dequantisation of the payload), and the reference backend
runs the program with those values. export_inference(compress=) matches JAX run on the
dequantised parameters; int8 packages store <= 0.3x the fp32 weight bytes."""
from __future__ import annotations

import os
import tempfile

import jax.numpy as jnp
import numpy as np
import pytest

import rlxjax
from rlxjax.compression import compressible
from rlxjax.compression.schemes import compress_leaf
from rlxjax.coreml.compress import SCHEMES
from rlxjax.coreml.lower import lower_graph
from rlxjax.coreml.targets import TARGETS, get_target
from rlxjax.coreml.validate import validate_model
from rlxjax.errors import ArgumentError, TargetError
from rlxjax.ir import DType, Graph, TensorType
from rlxjax.ir.builder import Builder
from rlxjax.coreml.backends import make_backend

_CASES = [(s, t) for s in SCHEMES for t in TARGETS
          if get_target(t).at_least(SCHEMES[s])]


def _weight_graph(c, shape):
    g = Graph()
    b = Builder(g)
    x = g.add_input("x", TensorType(shape, DType.f32))
    w = g.add_node("weight", [], dict(value=c.value, name="w", **c.params())).output
    g.add_output("y", b.add("add", x, w))
    return g


@pytest.mark.parametrize("scheme,target", _CASES)
def test_each_scheme_loads_in_coremltools_and_decompresses_to_the_node_value(scheme, target):
    rng = np.random.default_rng(len(scheme) + TARGETS[target].order)
    # 64 rows: int4 blocks of 32; 3 x 5 x 6: per channel only (32 does not divide 5)
    for shape in ((64, 8), (3, 5, 6)):
        w = rng.normal(size=shape).astype(np.float32)
        c = compress_leaf(w, scheme)
        with tempfile.TemporaryDirectory() as tmp:
            model, _, _ = lower_graph(_weight_graph(c, shape), get_target(target), "fp32", tmp)
            prog = validate_model(model, tmp)
            (op,) = [o for o in prog.functions["main"].operations
                     if o.op_type.startswith("constexpr_")]
            theirs = np.asarray(op.materialized_val_inference())
            np.testing.assert_array_equal(theirs, c.value, strict=True)
            for backend in ("reference", "reference-fast"):
                got = make_backend(backend, model, tmp).run({"x": np.zeros(shape, np.float32)})
                np.testing.assert_array_equal(got["y"], c.value, strict=True)


def test_dequantised_values_are_close_to_the_original():
    w = np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32)
    bound = {"fp16": 1e-3, "int8": 1e-2, "int4": 0.2, "palettize8": 2e-2, "palettize4": 0.5}
    for scheme in SCHEMES:
        c = compress_leaf(w, scheme)
        peak = np.abs(w).max()
        assert np.abs(c.value - w).max() <= bound[scheme] * peak, scheme
        assert c.value.dtype == np.float32 and c.value.shape == w.shape
    assert np.array_equal(compress_leaf(w, "fp16").value, w.astype(np.float16).astype(np.float32))


def test_only_float_arrays_of_rank_2_or_more_are_compressed():
    assert compressible(np.ones((2, 3), np.float32))
    assert not compressible(np.ones(7, np.float32))
    assert not compressible(np.ones((2, 3), np.int32))
    assert compress_leaf(np.ones(300, np.float32), "int8") is None
    w = np.zeros((4, 32), np.float32)  # all-zero channels: scale 1, data 0
    c = compress_leaf(w, "int8")
    assert np.all(c.value == 0) and np.all(np.isfinite(c.scale))


def _mlp(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def _params(n=256):
    rng = np.random.default_rng(1)
    return {"w1": (rng.normal(size=(64, n)) * 0.2).astype(np.float32),
            "b1": (rng.normal(size=n) * 0.1).astype(np.float32),
            "w2": (rng.normal(size=(n, 8)) * 0.2).astype(np.float32),
            "b2": np.zeros(8, np.float32)}


def _weight_bytes(path):
    return os.path.getsize(os.path.join(path, "Data", "com.apple.CoreML", "weights",
                                        "weight.bin"))


def test_export_inference_compressed_matches_jax_on_the_dequantised_params(tmp_path):
    params = _params()
    x = np.random.default_rng(2).normal(size=(4, 64)).astype(np.float32)
    rlxjax.export_inference(_mlp, params, x, path=tmp_path / "fp32.mlpackage")
    fp32 = _weight_bytes(tmp_path / "fp32.mlpackage")
    for scheme, target in (("int8", "iOS17"), ("int8", "iOS18"), ("int4", "iOS18"),
                           ("palettize4", "iOS16"), ("fp16", "iOS17")):
        path = tmp_path / f"{scheme}_{target}.mlpackage"
        c = rlxjax.export_inference(_mlp, params, x, path=path, target=target,
                                    compress=scheme, backend="reference")
        c.validate()
        deq = {k: (v if compress_leaf(v, scheme) is None else compress_leaf(v, scheme).value)
               for k, v in params.items()}
        np.testing.assert_allclose(np.asarray(c(x)), np.asarray(_mlp(deq, x)),
                                   rtol=1e-5, atol=1e-5)
        rows = {r.name: r for r in c.compression.leaves}
        assert rows["params.b1"].scheme == "none" and rows["params.w1"].scheme == scheme
        assert rows["params.w1"].max_abs_error == float(np.abs(deq["w1"] - params["w1"]).max())
        if scheme == "int8":
            assert _weight_bytes(path) <= 0.3 * fp32, (_weight_bytes(path), fp32)
        assert _weight_bytes(path) < fp32


def test_a_scheme_the_target_lacks_is_a_target_error():
    p, x = _params(8), np.zeros((1, 64), np.float32)
    with pytest.raises(TargetError, match="needs target iOS18"):
        rlxjax.export_inference(_mlp, p, x, compress="int4", target="iOS17")
    with pytest.raises(TargetError, match="needs target iOS16"):
        rlxjax.export_inference(_mlp, p, x, compress="int8", target="iOS15")
    with pytest.raises(ArgumentError, match="choose one of fp16, int8"):
        rlxjax.export_inference(_mlp, p, x, compress="int3")


def test_weights_are_never_folded_or_merged_and_fp16_programs_cast_them():
    """A transpose of a weight stays an op on it (no unmarked fp32 copy in the weight file);
    the cost model counts the compressed payload as the program's weight bytes."""
    rng = np.random.default_rng(3)
    p = {"w": rng.normal(size=(64, 32)).astype(np.float32)}
    x = rng.normal(size=(2, 64)).astype(np.float32)

    def f(p, x):
        return x @ p["w"] + jnp.sum(p["w"].T, axis=1)[:32] * 2.0

    c32 = rlxjax.export_inference(f, p, x)
    for precision in ("fp32", "fp16"):
        c = rlxjax.export_inference(f, p, x, compress="int8", precision=precision,
                                    target="iOS18", backend="reference")
        c.validate()
        ops = c.op_histogram()
        assert ops["constexpr_blockwise_shift_scale"] == 1 and "transpose" in ops, ops
        plain = rlxjax.export_inference(f, p, x, precision=precision).op_histogram()
        assert ops.get("cast", 0) == plain.get("cast", 0) + (precision == "fp16"), ops
        deq = {"w": compress_leaf(p["w"], "int8").value}
        tol = 1e-5 if precision == "fp32" else 3e-2
        np.testing.assert_allclose(np.asarray(c(x)), np.asarray(f(deq, x)), rtol=tol, atol=tol)
        cost = c.cost_analysis()["weight_bytes"]
        assert 64 * 32 <= cost < 64 * 32 + 1024 < c32.cost_analysis()["weight_bytes"]
