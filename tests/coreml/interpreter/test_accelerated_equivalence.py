"""The reference interpreter's accelerated path (``AcceleratedProgram``, backend
"reference-fast") gives bit-identical results to its general path, the oracle
(``ReferenceProgram``), on a corpus of programs: the training workloads of tests/models.py,
gradient programs, io- and mlstate-mode training steps (states included), control flow,
indexing ops, NaN / inf / -0.0 inputs, fp16, a flexible-shape program, runtime errors and
random programs from the fuzzer's generator (forward and gradient).

Each program runs three times on both paths: the first run checks every op's outputs (the
interpreter loop), later runs take the accelerated path's generated straight-line code.
``RLXJAX_TEST_BACKEND=reference-fast`` runs the whole suite on the accelerated path."""
from __future__ import annotations

import logging
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import HealthCheck, given, settings

import rlxjax
from rlxjax.coreml.interpreter import AcceleratedProgram, ReferenceProgram, ReferenceRuntimeError

from fuzz_interp import make_inputs, run
from fuzz_programs import programs
from helpers import assert_tree_close, examples
from models import cross_entropy, workloads

pytestmark = pytest.mark.reference_backend  # about the reference interpreter itself
RUNS = 3


def _bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}")) if a.dtype.kind == "f" else a


def assert_identical(got: dict, want: dict):
    """Same names in the same order, same types, dtypes, shapes and bits (NaN positions,
    NaN payloads and the sign of zero included)."""
    assert list(got) == list(want)
    for k in want:
        g, w = got[k], want[k]
        assert type(g) is type(w) is np.ndarray, (k, type(g), type(w))
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, g.shape, w.dtype, w.shape)
        assert np.array_equal(_bits(g), _bits(w)), f"output '{k}' differs"


def _both(spec, weights_dir):
    oracle = ReferenceProgram(spec, weights_dir)
    fast = AcceleratedProgram(spec, weights_dir)
    assert not isinstance(oracle, AcceleratedProgram)
    return oracle, fast


def _feeds(compiled, args):
    leaves = jax.tree_util.tree_leaves(tuple(args))
    return {s.mil_name: s.to_feature(np.asarray(a)) for s, a in zip(compiled.input_specs, leaves)}


def same_on_both_paths(compiled, *args):
    """Runs a compiled program on both paths RUNS times; returns the accelerated program
    and the outputs as the JAX-side pytree."""
    oracle, fast = _both(compiled.spec, compiled._weights_dir)
    feeds = _feeds(compiled, args)
    for _ in range(RUNS):
        want = oracle.run(feeds)
        got = fast.run(feeds)
        assert_identical(got, want)
    outs = [s.from_feature(got[s.mil_name]) for s in compiled.output_specs]
    return fast, jax.tree_util.tree_unflatten(compiled._traced.out_tree, outs)


def _f32(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


# -- elementwise, reductions, shapes: special values, fp32 and fp16 -------------------------------

def _mixed(x, y, i):
    z = jnp.where(x > y, x * y - 1.5, jnp.maximum(x, y) / (jnp.abs(y) + 0.5))
    m = (z.reshape(4, -1) @ y.reshape(-1, 4)).T
    return (jnp.sum(z, axis=1), jnp.mean(z, axis=(0, 1), keepdims=True), jnp.max(z),
            jnp.exp(jnp.tanh(m)) ** 2, jnp.sqrt(jnp.abs(z)).transpose(2, 0, 1),
            (i * 3 - i // 2) % 5, i.astype(jnp.float32) * 0.5, x == y, jnp.minimum(m, 0.25),
            jnp.pad(z, ((0, 0), (1, 2), (0, 1))) * 2,
            jnp.pad(z, ((1, 0), (0, 0), (0, 0)), constant_values=-1.5),
            x[:, 1:3, ::2] + 1, y[1] - 1, z[:, ::-1, 2:5], jnp.log(jnp.abs(x)),
            jax.nn.gelu(y), jax.nn.softmax(x, axis=-1), jnp.argmax(z, axis=-1),
            jnp.clip(x, -0.5, 0.5), jnp.floor(x * 3), jnp.logical_and(x > 0, y < 0))


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_elementwise_reductions_and_shapes_with_special_values(precision):
    x, y = _f32(2, 4, 6, seed=0), _f32(2, 4, 6, seed=1)
    x[0, 0, :3] = [np.nan, np.inf, -0.0]
    y[0, 0, 3:] = [-np.inf, 0.0, -0.0]
    i = np.random.default_rng(2).integers(-9, 9, (3, 5)).astype(np.int32)
    c = rlxjax.coreml_jit(_mixed, precision=precision, backend="reference").lower(
        x, y, i).compile()
    fast, got = same_on_both_paths(c, x, y, i)
    assert fast.n_prepared_ops > 10 and fast._straight  # the accelerated path really ran
    if precision == "fp32":
        assert_tree_close(got, jax.jit(_mixed)(x, y, i), rtol=1e-5, atol=1e-6)


# -- gradients and training steps -----------------------------------------------------------------

def _block_loss(p, x):
    """A pre-norm attention + MLP block (hand-written: no flax init to pay for)."""
    h = (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-6)
    q, k, v = jnp.split(h @ p["qkv"], 3, axis=-1)
    att = jax.nn.softmax(jnp.einsum("btd,bsd->bts", q, k) / 4.0)
    x = x + jnp.einsum("bts,bsd->btd", att, v) @ p["o"]
    return jnp.mean((x + jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"]) ** 2)


def test_gradient_program():
    f = lambda *s: _f32(*s, seed=sum(s), scale=0.3)  # noqa: E731
    params = {"qkv": f(16, 48), "o": f(16, 16), "w1": f(16, 32), "b1": f(32), "w2": f(32, 16)}
    x = f(2, 8, 16)
    c = rlxjax.coreml_grad(_block_loss, backend="reference").lower(params, x).compile()
    fast, got = same_on_both_paths(c, params, x)
    assert fast.n_prepared_ops >= 0.8 * c.cost_analysis()["mil_ops"]
    assert_tree_close(got, jax.jit(jax.grad(_block_loss))(params, x), rtol=1e-4, atol=1e-5)


def _io_train_step(loss, opt):
    def step(params, opt_state, *batch):
        v, g = jax.value_and_grad(loss)(params, *batch)
        u, opt_state = opt.update(g, opt_state, params)
        return optax.apply_updates(params, u), opt_state, v

    return step


#: the batch-norm training model is ~18 s of the default run (its batch statistics go through
#: the same ops as the others' norms), the channel net ~17 s (its group norm is the CNN's):
#: -m slow
_SLOW_MODELS = ("batchnorm_train", "channelnet_groupnorm")


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in _SLOW_MODELS
                                  else n for n in sorted(workloads())])
def test_training_step_of_every_model(name):
    """Forward + backward + adam of each model in tests/models.py, fp32 and (one) fp16."""
    loss, params, batch = workloads()[name]
    if name == "batchnorm_train":  # returns (loss, batch_stats)
        loss = (lambda f: lambda *a: f(*a)[0])(loss)
    opt = optax.adam(1e-3)
    args = (params, opt.init(params), *batch)
    for precision in ("fp32", "fp16") if name == "mlp_layernorm" else ("fp32",):
        c = rlxjax.coreml_jit(_io_train_step(loss, opt), precision=precision,
                              backend="reference").lower(*args).compile()
        same_on_both_paths(c, *args)


def test_mlstate_training_step_with_states(tmp_path):
    """A state="mlstate" training step, saved and loaded: outputs and the state buffers
    after every run are identical."""
    loss, params, batch = workloads()["mlp_layernorm"]
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), state="mlstate", backend="reference")
    st = step.init(params, *batch)
    folder = step.export_state(st, tmp_path / "state")
    model = rlxjax.load(step.save(tmp_path / "train.mlpackage"), backend="reference", flat=True)
    oracle, fast = _both(model.spec, model.weights_dir)
    states = []
    for prog in (oracle, fast):
        s = prog.make_state()
        for name in s.names:
            raw = np.fromfile(os.path.join(folder, name + ".f16"), "<f2")
            s.write_state(name, raw.reshape(s.read_state(name).shape))
        states.append(s)
    feeds = dict(zip(model.input_names, batch))
    for _ in range(RUNS):
        assert_identical(fast.run(feeds, state=states[1]), oracle.run(feeds, state=states[0]))
        assert_identical({n: states[1].read_state(n) for n in states[1].names},
                         {n: states[0].read_state(n) for n in states[0].names})
    assert fast._straight


# -- control flow and indexing --------------------------------------------------------------------

def _rnn(w, u, h0, xs):
    def step(h, x):
        h = jnp.tanh(h @ w + x @ u)
        return h, (h.sum(), h > 0)

    return jax.lax.scan(step, h0, xs)


def _loops(x, w, n):
    y = jax.lax.fori_loop(0, n, lambda i, c: c * 0.5 + jnp.sin(c) * i, x)

    def cond(c):
        i, v, done = c
        return (i < 20) & ~done & (jnp.abs(v).sum() < 7.0)

    def body(c):
        i, v, done = c
        v = jnp.tanh(v @ w) + 1.0
        return i + 1, v, v.sum() > 100.0

    i, v, _ = jax.lax.while_loop(cond, body, (jnp.int32(0), x, jnp.bool_(False)))
    z = jax.lax.cond(n > 2, lambda a: a * 2.0 - v, lambda a: jnp.cos(a), y)
    return y, i, v, z


@pytest.mark.parametrize("n", [0, 3])
def test_control_flow(n):
    x, w = _f32(3, scale=0.5), _f32(3, 3, seed=1, scale=0.5)
    c = rlxjax.coreml_jit(_loops, backend="reference").lower(x, w, np.int32(n)).compile()
    fast, got = same_on_both_paths(c, x, w, np.int32(n))
    assert fast._straight is False and fast.n_prepared_ops > 0  # the loop, with prepared calls
    assert_tree_close(got, jax.jit(_loops)(x, w, np.int32(n)), rtol=1e-5, atol=1e-6)
    args = (_f32(4, 4, scale=0.5), _f32(3, 4), _f32(4), _f32(6, 3, seed=3))
    same_on_both_paths(rlxjax.coreml_jit(_rnn, backend="reference").lower(*args).compile(),
                       *args)
    loss = lambda w, u, h0, xs: jnp.sum(_rnn(w, u, h0, xs)[0] ** 2)  # noqa: E731
    same_on_both_paths(rlxjax.coreml_grad(loss, backend="reference").lower(*args).compile(),
                       *args)


def _indexing(x, i, u):
    return (jnp.take(x, i, axis=0), jnp.take(x, i, axis=1, mode="clip"), x[i, i % 3],
            x.at[i].add(u), x.at[i].set(u), x.at[i].max(u),
            jax.lax.dynamic_slice(x, (i[0], 1), (2, 2)),
            jax.lax.dynamic_update_slice(x, u[:2, :2], (i[1], 0)),
            jnp.sort(x, axis=-1), jnp.argsort(x[0]), jax.lax.top_k(x, 2),
            jnp.cumsum(x, axis=0), jax.nn.one_hot(i, 5), jnp.split(x, 3, axis=1))


def test_indexing_ops():
    x, u = _f32(5, 6), _f32(4, 6, seed=1)
    x[1, 2] = np.nan
    i = np.array([3, -1, 0, 3], np.int32)
    c = rlxjax.coreml_jit(_indexing, backend="reference").lower(x, i, u).compile()
    same_on_both_paths(c, x, i, u)

    def loss(p, ids, labels):
        emb = p["emb"][ids]
        return cross_entropy(emb.mean(1) @ p["w"], labels)

    p = {"emb": _f32(10, 8), "w": _f32(8, 4, seed=1)}
    ids = np.array([[1, 4, 4], [9, 0, 2]], np.int32)
    labels = np.eye(4, dtype=np.float32)[[1, 3]]
    same_on_both_paths(rlxjax.coreml_grad(loss, backend="reference").lower(p, ids, labels)
                       .compile(), p, ids, labels)


# -- programs rlxjax does not emit: flexible shapes, runtime errors -------------------------------

def _coremltools_program(shape):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    logging.getLogger("coremltools").setLevel(logging.ERROR)

    @mb.program(input_specs=[mb.TensorSpec(shape=shape),
                             mb.TensorSpec(shape=(2, 1), dtype=types.int32)],
                opset_version=ct.target.iOS17)
    def prog(x, i):
        h = mb.add(x=mb.mul(x=x, y=2.0), y=-1.0)
        s = mb.reduce_sum(x=mb.tanh(x=h), axes=[-1], keep_dims=True)
        return mb.sub(x=h, y=s), mb.gather_nd(x=h, indices=i)

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17,
                       compute_precision=ct.precision.FLOAT32, skip_model_load=True)
    return model.get_spec(), model.weights_dir


def test_flexible_shapes_check_every_run():
    from coremltools.converters.mil.mil import get_new_symbol

    # (coremltools describes an unknown dim as the range 1..2: sizes outside it are refused)
    oracle, fast = _both(*_coremltools_program((get_new_symbol(), 3)))
    assert oracle.check_always and fast.check_always
    i = np.array([[0], [0]], np.int32)
    for rows in (2, 1, 2):
        feeds = {"x": _f32(rows, 3, seed=rows), "i": i}
        assert_identical(fast.run(feeds), oracle.run(feeds))
    assert fast._straight is False
    for prog in (oracle, fast):
        with pytest.raises(ReferenceRuntimeError, match="outside the flexible shape range"):
            prog.run({"x": _f32(4, 3), "i": i})


def test_runtime_errors_are_the_same():
    """An op failing at run time: the same error, in the loop (first run) and in the
    generated code (later runs)."""
    oracle, fast = _both(*_coremltools_program((4, 3)))
    good = {"x": _f32(4, 3), "i": np.array([[0], [3]], np.int32)}
    bad = {"x": _f32(4, 3), "i": np.array([[0], [4]], np.int32)}
    for feeds in (bad, good, good, bad):
        errors = []
        for prog in (oracle, fast):
            try:
                errors.append(prog.run(feeds))
            except ReferenceRuntimeError as e:
                errors.append(str(e))
        if feeds is bad:
            assert isinstance(errors[0], str) and errors[0] == errors[1]
            assert "gather_nd" in errors[0] and "IndexError" in errors[0]
        else:
            assert_identical(errors[1], errors[0])
    assert fast._straight


# -- random programs (the fuzzer's generator) ------------------------------------------------------

@settings(max_examples=examples(12), deadline=None, suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_programs_and_their_gradients(case):
    prog = case[0]
    args = make_inputs(prog)
    try:
        c = rlxjax.coreml_jit(lambda *a: run(prog, a), backend="reference").lower(*args).compile()
        same_on_both_paths(c, *args)
        floats = tuple(k for k, (_, kind) in enumerate(prog.inputs) if kind == "f")
        if floats:
            def loss(*a):
                return sum(jnp.sum(o) for o in run(prog, a)
                           if jnp.issubdtype(o.dtype, jnp.floating)) + jnp.float32(0)

            c = rlxjax.coreml_grad(loss, argnums=floats, backend="reference").lower(
                *args).compile()
            same_on_both_paths(c, *args)
    finally:
        jax.clear_caches()  # every example jits fresh closures (see tests/frontend/test_fuzz.py)
