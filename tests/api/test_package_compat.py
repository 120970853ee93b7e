"""Packages written by an earlier rlxjax are read by this one (rlxjax/metadata.py's promise).

tests/fixtures/packages_<commit>/ holds what tests/fixtures/make_compat_packages.py wrote
at that commit of main (before the format seam of issue 24). Each is loaded with today's
``rlxjax.load`` and run on the reference backend; every expected value is computed here
with JAX and optax, not by rlxjax.
"""
import glob
import os

import jax
import numpy as np
import optax
import pytest

import rlxjax

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
FIXTURES = sorted(glob.glob(os.path.join(HERE, "fixtures", "packages_*")))
MAKER = os.path.join(HERE, "fixtures", "make_compat_packages.py")


def _maker():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_compat_packages", MAKER)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mk = _maker()


def test_there_is_a_package_set_from_an_earlier_main():
    assert FIXTURES, "tests/fixtures/packages_* is missing"


@pytest.fixture(params=FIXTURES, ids=os.path.basename)
def folder(request):
    return request.param


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64),
                               rtol=2e-5, atol=2e-6)


def test_a_function_package(folder):
    m = rlxjax.load(os.path.join(folder, "fn.mlpackage"), backend="reference", flat=True)
    p, (x, _) = mk.params(), mk.batch()
    assert m.input_names == ("p_b", "p_w", "x", "t")
    out = m(p["b"], p["w"], x, np.float32(0.5))
    want = jax.jit(mk.fn)(p, x, np.float32(0.5))
    assert len(out) == 4
    for got, w in zip(out.values(), want):
        assert got.shape == w.shape and got.dtype == w.dtype  # rank-0, bool, zero-size too
        _close(got, w)


def _adam_step(p, x, y):
    opt = optax.adam(1e-2)
    s = opt.init(p)
    loss, g = jax.value_and_grad(mk.loss)(p, x, y)
    upd, s = opt.update(g, s, p)
    return loss, optax.apply_updates(p, upd), s


def test_an_io_train_and_predict_package(folder):
    m = rlxjax.load(os.path.join(folder, "train_predict.mlpackage"), backend="reference", flat=True)
    assert m.functions == ("train_step", "predict") and m.function_name == "train_step"
    p, (x, y) = mk.params(), mk.batch()
    s0 = optax.adam(1e-2).init(p)
    count, mu, nu = s0[0].count, s0[0].mu, s0[0].nu
    out = m(p["b"], p["w"], count, mu["b"], mu["w"], nu["b"], nu["w"], x, y)
    loss, p1, s1 = _adam_step(p, x, y)
    _close(out["out"], loss)
    _close(out["new_params_w"], p1["w"])
    _close(out["new_opt_state_0_nu_b"], s1[0].nu["b"])
    assert int(out["new_opt_state_0_count"]) == 1
    pred = m.function("predict")(out["new_params_b"], out["new_params_w"], x)
    _close(pred["out"], mk.predict(p1, x))


def test_an_mlstate_train_and_predict_package(folder):
    m = rlxjax.load(os.path.join(folder, "mlstate_predict.mlpackage"), backend="reference", flat=True)
    st = m.make_state(os.path.join(folder, "mlstate_predict.state"))
    p, (x, y) = mk.params(), mk.batch()
    loss, p1, _ = _adam_step(p, x, y)
    _close(m(x, y, state=st)["out"], loss)
    _close(m.function("predict")(x, state=st)["out"], mk.predict(p1, x))
