"""``rlxjax.load`` gives back what saved it (rlxjax/loaded_step.py): a saved training step,
reloaded, continues training from the in-memory step's TrainState exactly as the in-memory
step does (bit for bit: the same program on the same runtime) and as JAX + optax does
(within float tolerance), on both formats and both state modes; a loaded function returns
JAX's pytree; the flat form stays available."""
from __future__ import annotations

import collections
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlxjax
from rlxjax import metadata

RNG = np.random.default_rng(3)
P = {"w": (RNG.standard_normal((5, 4)) * 0.5).astype(np.float32),
     "b": np.zeros(4, np.float32)}
BATCHES = [(RNG.standard_normal((8, 5)).astype(np.float32),
            RNG.integers(0, 4, 8).astype(np.int32)) for _ in range(3)]
OPT = optax.adam(1e-2)


def loss(p, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(x @ p["w"] + p["b"], y).mean()


def _formats(slow_aimodel: bool = True):
    """Both formats; the Core AI case -m slow unless ``slow_aimodel`` is False (one Core AI
    case of each kind runs by default: its worker compiles take ~10 s each)."""
    try:
        import coreai.authoring  # noqa: F401
        marks = [pytest.mark.slow] if slow_aimodel else []
    except ImportError:
        marks = [pytest.mark.skip(reason="format='aimodel' needs coreai-core (rlxjax[coreai])")]
    return ["mlpackage", pytest.param("aimodel", marks=marks)]


def _jax_steps(params, batches):
    """The same training in JAX + optax: (params, opt_state, losses)."""
    s, losses = OPT.init(params), []
    for x, y in batches:
        v, g = jax.value_and_grad(loss)(params, x, y)
        upd, s = OPT.update(g, s, params)
        params = optax.apply_updates(params, upd)
        losses.append(float(v))
    return params, s, losses


def _equal(a, b):
    la, lb = a.leaves(), b.leaves()
    assert len(la) == len(lb)
    for u, v in zip(la, lb):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


@pytest.mark.parametrize("fmt,mode", [("mlpackage", "io"), ("mlpackage", "mlstate"),
                                      *[pytest.param("aimodel", m, marks=p.marks) for m, p in
                                        (("io", _formats()[1]),
                                         ("mlstate", _formats(slow_aimodel=False)[1]))]])
def test_a_reloaded_step_continues_training_as_the_step_and_jax(tmp_path, fmt, mode):
    step = rlxjax.coreml_train_step(loss, OPT, state=mode, format=fmt)
    st = step.init(P, *BATCHES[0])
    st, _ = step(st, *BATCHES[0])
    loaded = rlxjax.load(step.save(tmp_path / f"step.{fmt}"))
    assert isinstance(loaded, rlxjax.loaded_step.LoadedTrainStep)
    assert loaded.state_mode == mode and loaded.flat.input_names[-2:] == ("x", "y")
    mine, theirs = st, st
    for batch in BATCHES[1:]:
        mine, l_loaded = loaded(mine, *batch)     # first: it reads st before the step does
        theirs, l_step = step(theirs, *batch)
        assert np.asarray(l_loaded).tobytes() == np.asarray(l_step).tobytes()
        _equal(mine, theirs)
    assert mine.step == theirs.step == 3
    want_p, want_s, want_l = _jax_steps(P, BATCHES)
    np.testing.assert_allclose(float(l_loaded), want_l[-1], rtol=1e-5, atol=1e-6)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6),
                 (mine.params, mine.opt_state), (want_p, want_s))
    assert type(mine.opt_state[0]) is type(want_s[0])   # the optax namedtuple, as given


@pytest.mark.parametrize("fmt", _formats())
def test_init_fit_and_exports_of_a_loaded_step(tmp_path, fmt):
    step = rlxjax.coreml_train_step(loss, OPT, state="mlstate", format=fmt)
    step.init(P, *BATCHES[0])
    loaded = rlxjax.load(step.save(tmp_path / f"s.{fmt}"))
    st, hist = loaded.fit(loaded.init(P, OPT), BATCHES, steps=3, progress=False)
    want_p, _, want_l = _jax_steps(P, BATCHES)
    np.testing.assert_allclose(hist, want_l, rtol=1e-5, atol=1e-6)
    jax.tree.map(lambda g, w: np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6),
                 loaded.params(st), want_p)
    from safetensors.numpy import load_file
    got = load_file(loaded.export_params(st, tmp_path / "p.safetensors"))
    np.testing.assert_array_equal(got["w"], np.asarray(st.params["w"]))
    folder = loaded.export_state(st, tmp_path / "state")
    again = loaded.flat.make_state(folder)   # what an app loads: the same states
    for name in loaded.flat.state_names:
        np.testing.assert_array_equal(np.asarray(again.read_state(name)),
                                      np.asarray(st.device.handle.read_state(name)))
    with pytest.raises(rlxjax.ArgumentError, match="does not fit"):
        loaded(loaded.init({"w": P["w"]}, OPT), *BATCHES[0])


def test_the_flat_form_is_what_an_app_sees(tmp_path):
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1))
    st = step.init(P, *BATCHES[0])
    loaded = rlxjax.load(step.save(tmp_path / "io.mlpackage"))
    flat = rlxjax.load(tmp_path / "io.mlpackage", flat=True)
    assert loaded.flat.input_names == flat.input_names == ("params_b", "params_w", "x", "y")
    assert flat.output_names == ("out", "new_params_b", "new_params_w")
    roles = [(r["feature"], r["role"]) for r in loaded.train["outputs"]]
    assert roles == [("out", "loss"), ("new_params_b", "new_param"),
                     ("new_params_w", "new_param")]
    out = flat(P["b"], P["w"], *BATCHES[0])
    new, v = loaded(st, *BATCHES[0])
    assert float(out["out"]) == float(v)
    np.testing.assert_array_equal(out["new_params_w"], new.params["w"])


Pair = collections.namedtuple("Pair", "first second")


@pytest.mark.parametrize("fmt", _formats())
def test_a_loaded_function_returns_jaxs_pytree(tmp_path, fmt):
    x = BATCHES[0][0]

    def fn(p, x):
        return {"y": x @ p["w"], "z": [jnp.sum(x), Pair(x * 2, None)]}

    c = rlxjax.coreml_jit(fn, format=fmt).lower(P, x).compile()
    loaded = rlxjax.load(c.save(tmp_path / f"f.{fmt}"))
    got, want = loaded(P, x), jax.jit(fn)(P, x)
    assert jax.tree.structure(got).num_leaves == 3
    assert isinstance(got["z"], list) and type(got["z"][1]).__name__ == "Pair"
    assert got["z"][1].second is None
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):  # Pair: a namedtuple
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)      # of the same fields
    one = rlxjax.coreml_jit(jnp.tanh, format=fmt).lower(x).compile()
    path = one.save(tmp_path / f"one.{fmt}")
    np.testing.assert_allclose(rlxjax.load(path)(x), np.tanh(x), rtol=1e-5, atol=1e-6)
    assert metadata.TREE not in one.metadata      # the names say it: nothing more written
    assert set(rlxjax.load(path, flat=True)(x)) == {"out"}


def test_an_old_package_comes_back_in_the_structure_its_names_spell(tmp_path):
    x = BATCHES[0][0]
    c = rlxjax.coreml_jit(lambda x: (x, {"a": x + 1})).lower(x).compile()
    path = c.save(tmp_path / "t.mlpackage")
    assert metadata.TREE not in c.metadata
    got = rlxjax.load(path)(x)
    assert isinstance(got, tuple) and set(got[1]) == {"a"}
    np.testing.assert_array_equal(got[1]["a"], x + 1)


@pytest.mark.parametrize("mode", ["io", "mlstate"])
def test_a_train_and_predict_package(tmp_path, mode):
    def predict(p, x):
        return jax.nn.softmax(x @ p["w"] + p["b"])

    step = rlxjax.coreml_train_step(loss, OPT, state=mode, target="iOS18")
    step.init(P, *BATCHES[0])
    path = step.save(tmp_path / "tp.mlpackage", predict=(predict, BATCHES[0][0]))
    loaded = rlxjax.load(path)
    st, _ = loaded(loaded.init(P, OPT), *BATCHES[0])
    pf = loaded.function("predict")
    x = BATCHES[1][0]
    got = pf(st.params, x) if mode == "io" else pf(x)  # mlstate: the step's device state
    want_p, _, _ = _jax_steps(P, BATCHES[:1])
    np.testing.assert_allclose(got, predict(want_p, x), rtol=1e-5, atol=1e-6)


def test_generate_over_prefill_and_decode(tmp_path):
    """A bigram table as the model, its last token as the cache: greedy tokens as JAX's."""
    table = jnp.asarray(RNG.standard_normal((7, 7)).astype(np.float32))
    cache = {"last": np.zeros((1,), np.int32)}

    def prefill(cache, prompt):
        return table[prompt[:, -1]], {"last": prompt[:, -1]}

    def decode(cache, tok):
        return table[tok[:, 0]] + 0.1 * table[cache["last"]], {"last": tok[:, 0]}

    prompt, tok = np.array([[3, 1, 4]], np.int32), np.zeros((1, 1), np.int32)
    pc = rlxjax.coreml_jit(prefill, state=0).lower(cache, prompt).compile()
    dc = rlxjax.coreml_jit(decode, state=0).lower(cache, tok).compile()
    got = rlxjax.load(rlxjax.save_functions(tmp_path / "bigram.mlpackage",
                                            {"prefill": pc, "decode": dc})).generate(prompt, 8)
    logits, c = jax.jit(prefill)(cache, prompt)
    want = []
    for _ in range(8):
        t = jnp.argmax(logits, -1).astype(jnp.int32)
        want.append(int(t[0]))
        logits, c = jax.jit(decode)(c, t[:, None])
    assert got == want and len(set(want)) > 1


@pytest.mark.slow
def test_generate_over_a_kv_cache_lm(tmp_path):
    from models import KVLM, kv_lm_decode, kv_lm_init, kv_lm_prefill

    model, dec = KVLM(), KVLM(decode=True)
    params, cache = kv_lm_init(model, dec)
    tok, prompt = np.zeros((1, 1), np.int32), np.array([[3, 7, 1, 4]], np.int32)
    pc = rlxjax.coreml_jit(lambda c, q: kv_lm_prefill(dec, params, c, q), state=0)
    dc = rlxjax.coreml_jit(lambda c, t: kv_lm_decode(dec, params, c, t), state=0)
    path = rlxjax.save_functions(tmp_path / "lm.mlpackage", {
        "prefill": pc.lower(cache, prompt).compile(), "decode": dc.lower(cache, tok).compile()})
    got = rlxjax.load(path).generate(prompt, 6)
    logits, c = jax.jit(lambda c, q: kv_lm_prefill(dec, params, c, q))(cache, prompt)
    want = []
    for _ in range(6):
        t = jnp.argmax(logits, -1).astype(jnp.int32)
        want.append(int(t[0]))
        logits, c = jax.jit(lambda c, t: kv_lm_decode(dec, params, c, t))(c, t[:, None])
    assert got == want


def test_aux_comes_back_in_its_structure_and_host_randomness_is_named(tmp_path):
    def aux_loss(p, x, y):
        logits = x @ p["w"] + p["b"]
        return loss(p, x, y), {"max": jnp.max(logits), "pair": (jnp.sum(logits), logits[0])}

    step = rlxjax.coreml_train_step(aux_loss, optax.sgd(0.1), has_aux=True)
    st = step.init(P, *BATCHES[0])
    loaded = rlxjax.load(step.save(tmp_path / "aux.mlpackage"))
    got, want = loaded(st, *BATCHES[0]), step(st, *BATCHES[0])
    assert jax.tree.structure(got[2]) == jax.tree.structure(want[2])
    for g, w in zip(jax.tree.leaves(got[1:]), jax.tree.leaves(want[1:])):
        np.testing.assert_array_equal(g, w)

    def noisy(p, x, y, key):
        x = x + 0.1 * jax.random.normal(key, x.shape)
        return loss(p, x, y)

    step = rlxjax.coreml_train_step(noisy, optax.sgd(0.1), random="inputs")
    st = step.init(P, *BATCHES[0], jax.random.key(0))
    loaded = rlxjax.load(step.save(tmp_path / "noisy.mlpackage"))
    with pytest.raises(rlxjax.ArgumentError, match="random='inputs'"):
        loaded(st, *BATCHES[0], jax.random.key(1))


def test_packages_of_an_earlier_main_load_as_what_saved_them():
    """tests/fixtures/packages_*/ (written before rlxjax.tree existed): the function comes
    back as the tuple JAX returns, the io step trains as JAX + optax, predict predicts."""
    import glob
    import importlib.util

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        "make_compat_packages", os.path.join(here, "fixtures", "make_compat_packages.py"))
    mk = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mk)
    folders = sorted(glob.glob(os.path.join(here, "fixtures", "packages_*")))
    assert folders
    p, (x, y) = mk.params(), mk.batch()
    for folder in folders:
        fn = rlxjax.load(os.path.join(folder, "fn.mlpackage"), backend="reference")
        got, want = fn(p, x, np.float32(0.5)), jax.jit(mk.fn)(p, x, np.float32(0.5))
        assert isinstance(got, tuple) and len(got) == 4
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(w, np.float64),
                                       rtol=2e-5, atol=2e-6)
        step = rlxjax.load(os.path.join(folder, "train_predict.mlpackage"), backend="reference")
        st, v = step(step.init(p, optax.adam(1e-2)), x, y)
        opt = optax.adam(1e-2)
        wl, g = jax.value_and_grad(mk.loss)(p, x, y)
        upd, _ = opt.update(g, opt.init(p), p)
        wp = optax.apply_updates(p, upd)
        np.testing.assert_allclose(v, wl, rtol=2e-5, atol=2e-6)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6),
                     st.params, wp)
        np.testing.assert_allclose(step.function("predict")(st.params, x),
                                   mk.predict(wp, x), rtol=2e-5, atol=2e-6)
