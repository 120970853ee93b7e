"""Models a new user brings (flax linen / nnx, equinox examples at small sizes) through the
features as the README shows them: flexible batch, coreml_grad, train steps with
random="inputs" / "device", a trainable head on an int8 base, one package that trains and
predicts. Everything is compared with JAX. A few representative cases run by default, the
rest are marked slow."""
from __future__ import annotations

import os

import equinox as eqx
import flax.linen as nn
import jax
import numpy as np
import optax
import pytest
from flax import nnx

import rlxjax

RNG = np.random.default_rng(0)
Y = np.array([1, 0, 3, 2], np.int32)
KEY = jax.random.key(1)


def close(a, b, tol=1e-4):
    jax.tree.map(lambda u, v: np.testing.assert_allclose(np.asarray(u), np.asarray(v),
                                                         rtol=tol, atol=tol), a, b)


def xent(logits, y):
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


# -- the models --------------------------------------------------------------------------
class LinenCNN(nn.Module):                    # flax examples/mnist, with dropout, tiny
    @nn.compact
    def __call__(self, x, train=False):
        x = nn.relu(nn.Conv(4, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2)).reshape((x.shape[0], -1))
        x = nn.Dropout(0.5, deterministic=not train)(nn.relu(nn.Dense(8)(x)))
        return nn.Dense(10)(x)


def linen_cnn():
    m = LinenCNN()
    x = RNG.standard_normal((4, 8, 8, 1)).astype(np.float32)
    p = m.init(jax.random.key(0), x)

    def predict(params, x):
        return m.apply(params, x)

    def loss(params, x, y, key):
        return xent(m.apply(params, x, train=True, rngs={"dropout": key}), y)
    head = {"params": {"Conv_0": False, "Dense_0": False, "Dense_1": True}}
    return predict, loss, p, x, head


class EqxCNN(eqx.Module):                     # eqx.nn.Conv2d + eqx.nn.Dropout + Linear
    c: eqx.nn.Conv2d
    d: eqx.nn.Dropout
    l: eqx.nn.Linear

    def __init__(self, key):
        k1, k2 = jax.random.split(key)
        self.c = eqx.nn.Conv2d(1, 4, 3, padding=1, key=k1)
        self.d = eqx.nn.Dropout(0.5)
        self.l = eqx.nn.Linear(4 * 8 * 8, 10, key=k2)

    def __call__(self, x, key=None, inference=False):
        h = jax.nn.relu(self.c(x)).reshape(-1)
        return self.l(self.d(h, key=key, inference=inference))


def eqx_cnn():
    p, static = eqx.partition(EqxCNN(jax.random.key(3)), eqx.is_array)
    x = RNG.standard_normal((4, 1, 8, 8)).astype(np.float32)

    def predict(params, x):
        return jax.vmap(lambda xi: eqx.combine(params, static)(xi, inference=True))(x)

    def loss(params, x, y, key):
        keys = jax.random.split(key, x.shape[0])
        model = eqx.combine(params, static)
        return xent(jax.vmap(lambda xi, ki: model(xi, key=ki))(x, keys), y)
    # the mask is an equinox Module too (callable through its __call__): still a mask
    head = jax.tree.map(lambda _: False, p)
    head = eqx.tree_at(lambda t: t.l, head, replace=jax.tree.map(lambda _: True, p.l))
    return predict, loss, p, x, head


MODELS = {"linen_cnn": linen_cnn, "eqx_cnn": eqx_cnn}
FAST = set()   # (an equinox Module mask: tests/training/test_finetune.py; nnx RNG state: below)


def _cases():
    for model in MODELS:
        for feature in ("jit_flexible", "grad_inputs", "train_inputs", "train_device",
                        "trainable_int8", "save_predict_load"):
            marks = () if (model, feature) in FAST else (pytest.mark.slow,)
            yield pytest.param(model, feature, marks=marks, id=f"{model}-{feature}")


@pytest.mark.parametrize("model,feature", list(_cases()))
def test_model_feature(model, feature, tmp_path):
    predict, loss, p, x, head = MODELS[model]()
    if feature == "jit_flexible":
        f = rlxjax.coreml_jit(predict, flexible={"x": {0: (1, 16)}})
        for xx in (x, np.concatenate([x, x, x[:1]])):
            close(f(p, xx), predict(p, xx))
    elif feature == "grad_inputs":
        close(rlxjax.coreml_grad(loss, random="inputs")(p, x, Y, KEY),
              jax.grad(loss)(p, x, Y, KEY))
    elif feature == "train_inputs":       # JAX's dropout masks: JAX + optax's losses
        opt = optax.adam(1e-2)
        step = rlxjax.coreml_train_step(loss, opt, random="inputs")
        st, ref, o = step.init(p), p, opt.init(p)
        for i in range(2):
            k = jax.random.fold_in(KEY, i)
            st, got = step(st, x, Y, k)
            want, g = jax.value_and_grad(loss)(ref, x, Y, k)
            u, o = opt.update(g, o, ref)
            ref = optax.apply_updates(ref, u)
            np.testing.assert_allclose(got, want, rtol=1e-4)
        close(step.params(st), ref, 1e-3)
    elif feature == "train_device":       # device masks: same distribution, other numbers
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), random="device")
        st = step.init(p)
        first = float(loss(p, x, Y, KEY))
        st, got = step(st, x, Y, KEY)
        assert np.isfinite(got) and abs(float(got) - first) < 1.0
    elif feature == "trainable_int8":     # JAX on the dequantised base is the reference
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), random="inputs",
                                        trainable=head, compress="int8")
        st = step.init(p)
        full = step.params(st)
        st, got = step(st, x, Y, KEY)
        np.testing.assert_allclose(got, loss(full, x, Y, KEY), rtol=1e-4)
        assert step.compression.scheme == "int8" and step.compression.leaves
    else:                                 # one package: train, then predict from the state
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), random="inputs",
                                        state="mlstate")
        st = step.init(p, x, Y, KEY)
        st, _ = step(st, x, Y, KEY)
        path = os.fspath(tmp_path / "app.mlpackage")
        step.save(path, predict=(predict, x))
        m = rlxjax.load(path, function="predict", flat=True)
        s = m.make_state(step.export_state(st, tmp_path / "init_state"))
        close(m(x, state=s)["out"], predict(step.params(st), x))


def test_nnx_rng_state_from_the_step_goes_back_into_jax():
    """random="inputs" returns nnx's RNG state (counter + 1) from the host; feeding it back
    into plain JAX / nnx must work: nnx bumps the counter in place (count[...] += 1), which
    failed on the read-only numpy view rlxjax used to return."""
    class MLP(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(6, 16, rngs=rngs)
            self.do = nnx.Dropout(0.3, rngs=rngs)
            self.l2 = nnx.Linear(16, 10, rngs=rngs)

        def __call__(self, x):
            return self.l2(self.do(nnx.relu(self.l1(x))))
    model = MLP(nnx.Rngs(0, dropout=1))
    model.train()
    graphdef, params, rng_state = nnx.split(model, nnx.Param, nnx.RngState)
    x = RNG.standard_normal((4, 6)).astype(np.float32)

    def loss(params, rng_state, x, y):
        m = nnx.merge(graphdef, params, rng_state, copy=True)
        return xent(m(x), y), nnx.state(m, nnx.RngState)
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), has_aux=True, random="inputs")
    st = step.init(params)
    st, got, rs = step(st, rng_state, x, Y)
    (want, rs_jax), _ = jax.value_and_grad(loss, has_aux=True)(params, rng_state, x, Y)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for a, b in zip(jax.tree.leaves(nnx.state(rs, nnx.RngCount)),
                    jax.tree.leaves(nnx.state(rs_jax, nnx.RngCount))):
        np.testing.assert_array_equal(a, b)           # the counter, + 1 as in JAX
    # the state the step returned goes on in JAX (the step before failed here)
    (again, _), _ = jax.value_and_grad(loss, has_aux=True)(step.params(st), rs, x, Y)
    assert np.isfinite(again)


def test_make_state_from_a_folder_that_is_not_an_export(tmp_path):
    predict, loss, p, x, _ = linen_cnn()
    step = rlxjax.coreml_train_step(lambda p, x, y: xent(predict(p, x), y), optax.sgd(0.1),
                                    state="mlstate")
    step.init(p, x, Y)
    path = os.fspath(tmp_path / "train.mlpackage")
    step.save(path)
    m = rlxjax.load(path, flat=True)
    with pytest.raises(rlxjax.ArgumentError, match="export_state"):
        m.make_state(tmp_path)
