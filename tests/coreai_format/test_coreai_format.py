"""The Core AI format's first slice (format="aimodel"): programs compiled to the coreai
dialect and run on Apple's Core AI runtime (coreai-core's Linux wheel), each run in a worker
process, compared with JAX. Sums and matmuls: Core AI accumulates f32 sequentially, so they
are checked against float64 within the bound of a sequential sum (K terms: K·eps·Σ|terms|).
"""
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import rlxjax
from helpers import examples

pytest.importorskip("coreai.authoring", reason="format='aimodel' needs coreai-core (rlxjax[coreai])")

EPS = np.finfo(np.float32).eps
rng = np.random.default_rng(0)


def _f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def _close(got, want, rtol=1e-6, atol=1e-6):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def _within_sum_bound(got, exact, abs_terms, k):
    """|got - exact| <= (k + 1) eps * sum |terms|, elementwise (a sequential f32 sum)."""
    err = np.abs(np.asarray(got, np.float64) - exact)
    assert np.all(err <= (k + 1) * EPS * abs_terms + 1e-30), float(np.max(err))


def test_a_dense_layer_matches_jax():
    def f(p, x):
        return jnp.tanh(x @ p["w"] + p["b"])

    p, x = {"w": _f32(4, 3), "b": _f32(3)}, _f32(5, 4)
    c = rlxjax.coreml_jit(f, format="aimodel").lower(p, x).compile()
    assert c.validate() is c.spec  # the coreai dialect's verifier accepts it
    got = c(p, x)
    exact = np.tanh(x.astype(np.float64) @ p["w"] + p["b"])
    np.testing.assert_allclose(got, exact, atol=4 * 5 * EPS)  # tanh is 1-Lipschitz
    _close(got, jax.jit(f)(p, x), atol=2e-6)
    assert {"broadcasting_batch_matmul", "tanh"} <= set(c.op_histogram())


def test_the_gradient_of_a_loss_matches_jax_grad():
    def loss(p, x, y):
        h = jax.nn.relu(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    p = {"w1": _f32(6, 8), "b1": _f32(8), "w2": _f32(8, 2)}
    x, y = _f32(4, 6), _f32(4, 2)
    got = rlxjax.coreml_value_and_grad(loss, format="aimodel")(p, x, y)
    want = jax.value_and_grad(loss)(p, x, y)
    _close(got[0], want[0], rtol=2e-6)
    for k in p:
        _close(got[1][k], want[1][k], rtol=1e-5, atol=1e-6)


def test_scalars_bools_comparisons_and_selects_cross_the_boundary():
    def f(x, t, n):
        y = jnp.where(x > t, x * t, -x) + jnp.where(x <= t, x ** 3, 0.0)
        return y, jnp.sum(y), x >= t, (n * 2 + 1).astype(jnp.float32)

    x, t, n = _f32(3, 4), np.float32(0.25), np.asarray(3, np.int32)
    got = rlxjax.coreml_jit(f, format="aimodel")(x, t, n)
    want = jax.jit(f)(x, t, n)
    _close(got[0], want[0])
    _within_sum_bound(got[1], np.sum(np.asarray(want[0], np.float64)),
                      np.sum(np.abs(np.asarray(want[0], np.float64))), 12)
    assert got[2].dtype == np.bool_ and np.array_equal(got[2], want[2])
    _close(got[3], want[3])


def test_batched_dot_general_reductions_and_shapes():
    def f(a, b):
        c = jnp.einsum("bij,bkj->bik", a, b)           # contract the last dims, batch 0
        return jnp.max(c, axis=(0, 2)), jnp.transpose(c, (2, 0, 1)).reshape(4, -1)

    a, b = _f32(2, 3, 5), _f32(2, 4, 5)
    got = rlxjax.coreml_jit(f, format="aimodel")(a, b)
    c64 = np.einsum("bij,bkj->bik", a.astype(np.float64), b)
    terms = np.einsum("bij,bkj->bik", np.abs(a.astype(np.float64)), np.abs(b))
    _within_sum_bound(got[1], np.transpose(c64, (2, 0, 1)).reshape(4, -1),
                      np.transpose(terms, (2, 0, 1)).reshape(4, -1), 5)
    np.testing.assert_allclose(got[0], c64.max(axis=(0, 2)), atol=6 * EPS * terms.max())


@settings(max_examples=examples(4), deadline=None, derandomize=True)
@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=3),
       st.sampled_from(["add", "sub", "mul", "max", "min"]))
def test_broadcasting_binary_ops_are_exact(shapes, name):
    fn = getattr(jnp, {"max": "maximum", "min": "minimum", "sub": "subtract"}.get(name, name))
    x, y = (_f32(*s) for s in shapes.input_shapes)
    got = rlxjax.coreml_jit(fn, format="aimodel")(x, y)
    assert np.array_equal(got, np.asarray(jax.jit(fn)(x, y)))  # one rounding each: exact


def test_an_op_it_cannot_lower_names_the_primitive_and_the_line():
    def f(x):
        return jax.lax.reduce_precision(x, exponent_bits=5, mantissa_bits=0)  # refused

    with pytest.raises(rlxjax.UnsupportedPrimitiveError,
                       match=r"'reduce_precision' at .*test_coreai_format"):
        rlxjax.coreml_jit(f, format="aimodel").lower(_f32(4)).compile()


def test_a_saved_aimodel_is_a_complete_asset_with_rlxjax_metadata(tmp_path):
    from rlxjax.coreai import ca_private

    c = rlxjax.coreml_jit(lambda x: x * 2, format="aimodel").lower(_f32(3)).compile()
    path = c.save(tmp_path / "double.aimodel")
    assert sorted(os.listdir(path)) == ["main.hash", "main.mlirb", "metadata.json"]
    meta = ca_private.read_metadata(path)
    assert set(meta) >= {"rlxjax.version", "rlxjax.io"}
    with pytest.raises(rlxjax.PackageError, match="must end in .aimodel"):
        c.save(tmp_path / "double.mlpackage")
    assert not os.path.exists(tmp_path / "double.mlpackage")


def test_formats_and_backends_must_agree():
    with pytest.raises(rlxjax.RlxError, match="runs format='mlpackage' programs, not "
                                              "format='aimodel'"):
        rlxjax.coreml_jit(lambda x: x, format="aimodel", backend="reference")
    with pytest.raises(rlxjax.RlxError, match="compile with format='aimodel'"):
        rlxjax.coreml_jit(lambda x: x, backend="coreai")
    with pytest.raises(rlxjax.TargetError, match="Core AI needs iOS 27"):
        rlxjax.coreml_jit(lambda x: x, format="aimodel", target="iOS18")


def test_a_missing_coreai_core_says_which_extra_to_install(monkeypatch):
    import importlib.metadata

    from rlxjax.coreai import ca_private

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    monkeypatch.setattr(ca_private, "_AUTHORING", [])  # as in a process that checked none
    with pytest.raises(rlxjax.BackendUnavailableError, match=r'rlxjax\[coreai\]'):
        ca_private.coreai()


def test_transcendentals_within_2_ulp_and_special_values_as_jax():
    """Against float64 on a grid and the special values: Core AI's error is at most 2 ulp
    (measured here: 0.5-1.9 ulp; XLA:CPU's on the same points 0.5-4.7), and NaN, ±inf, ±0
    give what JAX gives; max / min propagate NaN and comparisons of NaN are false, as in JAX."""
    import scipy.special as sp

    x = np.concatenate([np.linspace(-6, 6, 801), [np.nan, np.inf, -np.inf, 0, -0.0]])
    xp = np.concatenate([np.linspace(1e-3, 50, 801), [np.nan, np.inf, 0.0, 1e-30, -1.0]])
    x, xp = x.astype(np.float32), xp.astype(np.float32)

    def f(x, xp):
        return (jnp.exp(x), jnp.tanh(x), jax.nn.sigmoid(x), jnp.sin(x), jnp.cos(x),
                jax.lax.erf(x), jnp.log(xp), jnp.sqrt(xp), jax.lax.rsqrt(xp),
                jnp.maximum(x, x[::-1]), jnp.minimum(x, x[::-1]), x >= x[::-1], x < x[::-1])

    got = rlxjax.coreml_jit(f, format="aimodel")(x, xp)
    want = jax.jit(f)(x, xp)
    x64, xp64 = x.astype(np.float64), xp.astype(np.float64)
    with np.errstate(all="ignore"):
        exact = [np.exp(x64), np.tanh(x64), sp.expit(x64), np.sin(x64), np.cos(x64),
                 sp.erf(x64), np.log(xp64), np.sqrt(xp64), 1 / np.sqrt(xp64)]
    for i, e in enumerate(exact):
        g, w = np.asarray(got[i], np.float64), np.asarray(want[i], np.float64)
        fin = np.isfinite(e)
        ulp = np.maximum(np.spacing(np.abs(e[fin]).astype(np.float32)).astype(np.float64),
                         np.finfo(np.float32).tiny)
        assert np.max(np.abs(g[fin] - e[fin]) / ulp) <= 2.0, i
        assert np.array_equal(g[~fin], w[~fin], equal_nan=True), i
    for g, w in zip(got[9:], want[9:]):
        assert np.array_equal(np.asarray(g), np.asarray(w), equal_nan=True)


def test_rlxjax_load_runs_a_saved_aimodel_as_the_compiled_program_does(tmp_path):
    def f(p, x, t):
        return jnp.tanh(x @ p["w"]) * t, jnp.sum(x) > 0

    p, x, t = {"w": _f32(4, 3)}, _f32(2, 4), np.float32(0.5)
    c = rlxjax.coreml_jit(f, format="aimodel").lower(p, x, t).compile()
    m = rlxjax.load(c.save(tmp_path / "f.aimodel"), flat=True)
    assert m.input_names == ("p_w", "x", "t") and m.output_names == ("out_0", "out_1")
    got = m(p["w"], x, t)
    want = jax.jit(f)(p, x, t)
    _close(got["out_0"], want[0], atol=2e-6)
    assert got["out_1"].shape == () and got["out_1"] == want[1]  # rank-0 bool, as JAX
    with pytest.raises(rlxjax.ArgumentError, match="input 'x' is float32\\[3, 4\\]"):
        m(p["w"], _f32(3, 4), t)


def test_a_tampered_or_partial_aimodel_is_a_package_error_not_a_crash(tmp_path):
    c = rlxjax.coreml_jit(lambda x: x + 1, format="aimodel").lower(_f32(2)).compile()
    path = c.save(tmp_path / "g.aimodel")
    with open(os.path.join(path, "main.mlirb"), "r+b") as f:
        f.seek(40)
        f.write(b"\xff\xfe")
    with pytest.raises(rlxjax.PackageError, match="does not match main.hash"):
        rlxjax.load(path, flat=True)
    os.remove(os.path.join(path, "main.hash"))
    with pytest.raises(rlxjax.PackageError, match=r"lacks \['main.hash'\]"):
        rlxjax.load(path, flat=True)
    with pytest.raises(rlxjax.PackageError, match="no such Core AI package"):
        rlxjax.load(tmp_path / "missing.aimodel", flat=True)


def test_an_adam_training_step_trains_as_jax_and_optax_do():
    import optax

    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    p = {"w1": _f32(6, 8) * 0.5, "b1": np.zeros(8, np.float32), "w2": _f32(8, 2) * 0.5}
    x, y = _f32(16, 6), _f32(16, 2)
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, format="aimodel")
    st, got = step.init(p), []
    for _ in range(25):
        st, value = step(st, x, y)
        got.append(float(value))
    s, q, want = opt.init(p), p, []
    for _ in range(25):
        value, g = jax.value_and_grad(loss)(q, x, y)
        u, s = opt.update(g, s, q)
        q = optax.apply_updates(q, u)
        want.append(float(value))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert got[-1] < 0.8 * got[0]
    for k in p:
        np.testing.assert_allclose(st.params[k], q[k], rtol=1e-4, atol=1e-5)


def test_a_persistent_worker_that_dies_is_an_error(tmp_path):
    from rlxjax.coreai.worker import CoreAIRuntimeError, Session

    s = Session(str(tmp_path / "missing.aimodel"))
    with pytest.raises(CoreAIRuntimeError, match="the Core AI runtime (died|failed)"):
        s("main", {"x": np.ones(2, np.float32)})


def test_rlxjax_compile_writes_an_aimodel_that_loads_and_runs(tmp_path, monkeypatch):
    from rlxjax.compile_cli import compile_to_package

    (tmp_path / "mymodel.py").write_text(
        "import jax.numpy as jnp\n\ndef predict(x, w):\n    return jnp.tanh(x @ w)\n")
    monkeypatch.chdir(tmp_path)
    out = str(tmp_path / "predict.aimodel")
    report = compile_to_package("mymodel:predict", ["f32[2,4]", "f32[4,3]"], out,
                                format="aimodel")
    assert report.startswith(f"wrote {out}") and "iOS27" in report and "Core AI ops" in report
    x, w = _f32(2, 4), _f32(4, 3)
    got = rlxjax.load(out, flat=True)(x, w)["out"]
    _close(got, np.tanh(x.astype(np.float64) @ w).astype(np.float32), atol=4 * 4 * EPS)
