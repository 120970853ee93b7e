"""coreml_train_step(state="mlstate"): params and optimizer state in Core ML states.

Checked against JAX + optax (the same loop as tests/training/test_train_step.py), against the
io-mode program (the exact fp32 storage makes the two compute the same bits), through
coremltools' loader, and the reference backend's state semantics against a program
coremltools emits."""
from __future__ import annotations

import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

import rlxjax
from rlxjax.states import mlstate as M
from helpers import bits as _bits, jax_loop, mlp_workload

STEPS = 60
# Same bound as io mode: the state storage is exact (see test_codec_*), so mlstate training
# is the io-mode computation bit for bit, and that is within 1e-4 of JAX + optax.
RTOL, ATOL = 1e-4, 1e-5
CASES = {
    "adam": lambda: optax.adam(1e-2),
    # adamw + clipping + a schedule reading the int32 step count from the state
    "adamw_clip_schedule": lambda: optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(optax.warmup_cosine_decay_schedule(0.0, 1e-2, 10, STEPS), weight_decay=1e-2)),
}


@functools.lru_cache(maxsize=None)
def _workload(name):
    """(loss, params, batch) as models.workloads() builds them (only the MLP here)."""
    assert name == "mlp_layernorm"
    return mlp_workload()


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=24,
                max_size=24),
       st.lists(st.integers(-2**31, 2**31 - 1), min_size=6, max_size=6))
def test_codec_roundtrip_is_exact(xs, ns):
    x = np.asarray(xs, np.float32)
    pieces = M.encode_f32_np(x)
    for p in pieces:  # every piece is an integer fp16 holds exactly
        q = p.astype(np.float64)
        assert np.all(np.abs(q) <= 2048) and np.all(q == np.round(q))
    np.testing.assert_array_equal(_bits(M.decode_f32_np(*pieces)), _bits(x))
    n = np.asarray(ns, np.int32)
    np.testing.assert_array_equal(M.decode_i32_np(*M.encode_i32_np(n)), n)
    # The traced (in-program) codec computes the same pieces as the host one. XLA on CPU
    # flushes fp32 subnormals, so compare on normal numbers here; the program itself runs
    # on the reference backend, which keeps subnormals (test_program_codec_*).
    normal = np.where(np.abs(x) < np.finfo(np.float32).tiny, np.float32(0), x)
    for a, b in zip(jax.jit(M.encode_f32)(normal), M.encode_f32_np(normal)):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    for a, b in zip(jax.jit(M.encode_i32)(n), M.encode_i32_np(n)):
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_program_codec_keeps_every_bit():
    """A step whose update is the identity: the state the program writes back decodes to
    exactly what was written in, subnormals, -0.0 and extremes included."""
    special = np.array([0.0, -0.0, 1e-45, -3e-39, 1.1754944e-38, 3.4028235e38, -2.5, 65504.0,
                        6e-8, 1e-30, 123456.789], np.float32)
    rng = np.random.default_rng(0)
    w = np.concatenate([special, (rng.standard_normal(53) * 10.0 ** rng.integers(
        -30, 30, 53)).astype(np.float32)])
    step = rlxjax.coreml_train_step(lambda p, x: (p["w"] * 0).sum() * x.sum(),
                                    optax.sgd(0.0), state="mlstate", backend="reference")
    params = {"w": w, "n": np.float32(3.0)}
    state, _ = step(step.init(params), np.ones(2, np.float32))
    np.testing.assert_array_equal(_bits(step.params(state)["w"]), _bits(w))
    pieces = state.device.read_pieces()
    for a, b in zip((pieces[f"state.f32.{p}"] for p in M.F32_PIECES),
                    M.encode_f32_np(np.concatenate([[3.0], w]).astype(np.float32))):  # 'n' < 'w'
        np.testing.assert_array_equal(_bits(a), _bits(b))


def test_program_codec_keeps_every_exponent_boundary():
    """The in-program codec estimates each exponent from a log and settles it by exact
    comparisons: every power of two from the smallest subnormal to 2^127, its neighbours
    (where floor(log2) is most easily off by one) and their negatives come back bit for
    bit from a reference-backend step whose update is the identity."""
    p2 = np.ldexp(np.float32(1), np.arange(-149, 128)).astype(np.float32)
    near = np.concatenate([p2, np.nextafter(p2, np.float32(0)),
                           np.nextafter(p2, np.float32(np.inf))])
    w = np.concatenate([near, -near]).astype(np.float32)
    w = w[np.isfinite(w)]
    step = rlxjax.coreml_train_step(lambda p, x: (p["w"] * 0).sum() * x.sum(),
                                    optax.sgd(0.0), state="mlstate", backend="reference")
    state, _ = step(step.init({"w": w}), np.ones(2, np.float32))
    np.testing.assert_array_equal(_bits(step.params(state)["w"]), _bits(w))
    pieces = state.device.read_pieces()
    for a, b in zip((pieces[f"state.f32.{p}"] for p in M.F32_PIECES), M.encode_f32_np(w)):
        np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_jax_optax_and_io_mode_bitwise(name):
    loss, params, batch = _workload("mlp_layernorm")
    opt = CASES[name]()
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", backend="reference")
    state, history = step.fit(step.init(params), [batch], STEPS, progress=False)
    want_params, want_losses = jax_loop(loss, opt, params, batch, STEPS)
    np.testing.assert_allclose(history, want_losses, rtol=RTOL, atol=ATOL)
    for got, want in zip(jax.tree_util.tree_leaves(step.params(state)),
                         jax.tree_util.tree_leaves(want_params)):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)
    assert state.step == STEPS and history[-1] < history[0]
    # io mode on the same backend: identical bits, losses and final state
    io = rlxjax.coreml_train_step(loss, opt, backend="reference")
    io_state, io_history = io.fit(io.init(params), [batch], 15, progress=False)
    short, short_history = step.fit(step.init(params), [batch], 15, progress=False)
    assert short_history == io_history
    for a, b in zip(jax.tree_util.tree_leaves((short.params, short.opt_state)),
                    jax.tree_util.tree_leaves((io_state.params, io_state.opt_state))):
        np.testing.assert_array_equal(_bits(np.asarray(a)), _bits(np.asarray(b)))


def test_structure_metadata_save_and_export(tmp_path):
    loss, params, batch = _workload("mlp_layernorm")
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), state="mlstate",
                                    backend="reference")
    state = step.init(params, *batch)          # compiles and initialises the device state
    assert state.live and state.step == 0
    c = step.last_compiled
    prog = c.validate()                         # coremltools' loader accepts the program
    fn = prog.functions["main"]
    n_f32 = sum(np.size(x) for x in jax.tree_util.tree_leaves((params, optax.adam(1e-2).init(
        params))) if np.asarray(x).dtype == np.float32)
    states = {f.name: f for f in c.spec.description.state}
    assert sorted(states) == sorted(f"state_{t}_{p}" for t, ps in (("f32", M.F32_PIECES),
                                                                   ("i32", M.I32_PIECES))
                                    for p in ps)
    for name, f in states.items():
        arr = f.type.stateType.arrayType
        assert list(arr.shape) == [n_f32 if "f32" in name else 1]
        assert arr.dataType == arr.FLOAT16 and name in fn.inputs
    assert [f.name for f in c.spec.description.input] == ["x", "y"]
    assert [f.name for f in c.spec.description.output] == ["out"]
    # write_state takes exactly its two inputs (coremltools' loader lets unknown ones pass)
    from rlxjax.coreml.mil import operations
    writes = [op for op in operations(c.spec) if op.type == "write_state"]
    assert writes and all(sorted(op.inputs) == ["data", "input"] for op in writes)
    # each state is read before it is written (the memory order moves a write that
    # computes from its read as early as its value exists: coreml/mil_order.py)
    ops = [op for op in c.mil_ops() if op.type in ("read_state", "write_state")]
    state_of = lambda op: op.inputs["input"].arguments[0].name  # noqa: E731
    order = [(op.type, state_of(op)) for op in ops]
    # written once, read once: a state in one chunk is decoded once per step (states/
    # mlstate_graph.py; a chunked one is read by each phase that needs its leaves:
    # tests/memory/test_mlstate_memory.py)
    assert sorted(n for t, n in order if t == "write_state") == sorted(states)
    assert {n: order.count(("read_state", n)) for n in states} == {n: 1 for n in states}
    assert all(max(i for i, o in enumerate(order) if o == ("read_state", n)) <
               order.index(("write_state", n)) for n in states)
    meta = json.loads(c.spec.description.metadata.userDefined["rlxjax.train"])
    assert meta["state"] == "mlstate" and {r["role"] for r in meta["states"]} == {
        "f32_exp", "f32_hi", "f32_lo", "i32_hi", "i32_mid", "i32_lo"}
    roles = {t["role"] for t in meta["tensors"]}
    assert roles == {"param", "opt_state"} and meta["outputs"][0]["role"] == "loss"
    path = step.save(tmp_path / "train.mlpackage")
    assert os.path.isdir(path)
    from rlxjax.inspect_package import describe

    text = describe(path)  # `rlxjax inspect` lists the states with their roles
    assert "  states (6):" in text and "[f32_exp]" in text and "[i32_lo]" in text
    assert f"float16[{n_f32}]" in text and "updated in place" in text
    loaded = rlxjax.load(path, flat=True)
    assert loaded.spec.description.state == c.spec.description.state
    assert loaded.input_names == ("x", "y")
    # coremltools' own backend, given the program its loader rebuilt, declares the same
    # states (name, fp16, shape) and features as the description rlxjax wrote
    import coremltools as ct

    theirs = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                        skip_model_load=True, compute_precision=ct.precision.FLOAT32,
                        pass_pipeline=ct.PassPipeline.EMPTY).get_spec().description
    assert [(f.name, f.type) for f in theirs.state] == [(f.name, f.type) for f in states.values()]
    assert [f.name for f in theirs.input] == ["x", "y"]
    folder = step.export_state(state, tmp_path / "init_state")
    info = json.loads(open(os.path.join(folder, "state.json")).read())
    raw = {r["name"]: np.fromfile(os.path.join(folder, r["name"] + ".f16"), "<f2")
           for r in info["states"]}
    dev = state.device.read_pieces()
    for g, mil in state.device.mil_names.items():
        np.testing.assert_array_equal(_bits(raw[mil]), _bits(dev[g]))


def test_checkpoint_resume_is_exact_across_modes(tmp_path):
    loss, params, batch = _workload("mlp_layernorm")
    opt = optax.adam(1e-2)
    step = rlxjax.coreml_train_step(loss, opt, state="mlstate", backend="reference")
    state, _ = step.fit(step.init(params), [batch], 5, progress=False)
    ckpt = state.save(tmp_path / "state.npz")
    resumed = rlxjax.TrainState.load(ckpt, like=step.init(params))
    assert resumed.step == 5
    a, la = step(state, *batch)
    b, lb = step(resumed, *batch)
    assert float(la) == float(lb)
    for x, y in zip(jax.tree_util.tree_leaves((a.params, a.opt_state)),
                    jax.tree_util.tree_leaves((b.params, b.opt_state))):
        np.testing.assert_array_equal(_bits(np.asarray(x)), _bits(np.asarray(y)))
    # the checkpoint format is shared with io mode: resuming there continues identically
    io = rlxjax.coreml_train_step(loss, opt, backend="reference")
    c, lc = io(rlxjax.TrainState.load(ckpt, like=io.init(params)), *batch)
    assert float(lc) == float(la)
    for x, y in zip(jax.tree_util.tree_leaves(c.params), jax.tree_util.tree_leaves(a.params)):
        np.testing.assert_array_equal(_bits(np.asarray(x)), _bits(np.asarray(y)))
    # the device state is updated in place: a state stepped past is consumed...
    s1, _ = step(step.init(params), *batch)
    s2, _ = step(s1, *batch)
    with pytest.raises(rlxjax.RlxError, match="consumed"):
        step(s1, *batch)
    # ...unless it was read first: then it is a host snapshot, and stepping it again
    # branches from exactly that point
    snapshot = s2.params
    s3, l3 = step(s2, *batch)
    s3b, l3b = step(s2, *batch)
    assert s2.params is snapshot and float(l3) == float(l3b)
    np.testing.assert_array_equal(_bits(jax.tree_util.tree_leaves(s3.params)[0]),
                                  _bits(jax.tree_util.tree_leaves(s3b.params)[0]))


def test_reference_state_semantics_match_a_coremltools_program():
    """read_state copies, write_state (coreml_update_state) replaces, values persist
    across calls: run a stateful program coremltools itself builds and serialises."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    from rlxjax.coreml.interpreter import ReferenceProgram

    @mb.program(input_specs=[mb.StateTensorSpec((2, 3), dtype=types.fp16),
                             mb.TensorSpec((2, 3), dtype=types.fp16)],
                opset_version=ct.target.iOS18)
    def prog(acc, x):
        before = mb.read_state(input=acc)
        total = mb.add(x=before, y=x)
        after = mb.coreml_update_state(state=acc, value=total)
        return mb.mul(x=before, y=after)     # uses both the old and the new value

    model = ct.convert(prog, minimum_deployment_target=ct.target.iOS18, skip_model_load=True,
                       compute_precision=ct.precision.FLOAT32, convert_to="mlprogram")
    spec = model.get_spec()
    assert [op.type for op in next(iter(spec.mlProgram.functions["main"].block_specializations
                                        .values())).operations].count("write_state") == 1
    rp = ReferenceProgram(spec, model.weights_dir)
    state = rp.make_state()
    x = np.arange(6, dtype=np.float16).reshape(2, 3)
    state.write_state("acc", np.full((2, 3), 1, np.float16))
    out_name = spec.description.output[0].name
    acc = np.full((2, 3), 1, np.float16)
    for _ in range(3):
        got = rp.run({"x": x}, state=state)[out_name]
        np.testing.assert_array_equal(got, acc * (acc + x))
        acc = acc + x
        np.testing.assert_array_equal(state.read_state("acc"), acc)
    with pytest.raises(rlxjax.RlxError, match="state"):
        rp.run({"x": x})
    with pytest.raises(rlxjax.RlxError, match="float16"):
        state.write_state("acc", np.zeros((2, 3), np.float32))


def test_has_aux_and_clear_errors():
    loss, params, batch = _workload("mlp_layernorm")

    def with_aux(p, x, y):
        v = loss(p, x, y)
        return v, {"double": 2 * v}

    aux_step = rlxjax.coreml_train_step(with_aux, optax.sgd(0.1), state="mlstate",
                                        has_aux=True, backend="reference")
    st_, v, aux = aux_step(aux_step.init(params), *batch)
    np.testing.assert_allclose(aux["double"], 2 * v, rtol=1e-6)
    assert [r["role"] for r in json.loads(aux_step.last_compiled.spec.description.metadata
                                          .userDefined["rlxjax.train"])["outputs"]] == \
        ["loss", "aux"]
    with pytest.raises(rlxjax.TargetError, match="target='iOS18'"):
        rlxjax.coreml_train_step(loss, optax.sgd(0.1), state="mlstate", target="iOS17")
    with pytest.raises(rlxjax.ArgumentError, match="'io' .* or 'mlstate'"):
        rlxjax.coreml_train_step(loss, optax.sgd(0.1), state="device")
    step = rlxjax.coreml_train_step(lambda p, x: (p["w"].astype(np.float32) * x).sum(),
                                    optax.sgd(0.1), state="mlstate", backend="reference")
    with pytest.raises(rlxjax.ArgumentError, match="float32 and int32"):
        step(step.init({"w": np.ones(3, np.float16)}), np.ones(3, np.float32))
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), state="mlstate",
                                    backend="reference")
    state = step.init(params, *batch)
    with pytest.raises(rlxjax.ArgumentError, match="make_state"):
        step.last_compiled(*batch)
    with pytest.raises(rlxjax.RlxError, match="compiled"):
        rlxjax.coreml_train_step(loss, optax.sgd(0.1), state="mlstate").export_state(state, "x")


@pytest.mark.coreml_runtime
def test_coreml_runtime_matches_reference():  # pragma: no cover - macOS only
    loss, params, batch = _workload("mlp_layernorm")
    out = {}
    for backend in ("coreml", "reference"):
        step = rlxjax.coreml_train_step(loss, optax.adam(1e-2), state="mlstate",
                                        backend=backend)
        state, hist = step.fit(step.init(params), [batch], 20, progress=False)
        out[backend] = (hist, step.params(state))
    np.testing.assert_allclose(out["coreml"][0], out["reference"][0], rtol=1e-3, atol=1e-4)


def test_saved_stateful_package_runs_through_rlxjax_load(tmp_path):
    loss, params, batch = _workload("mlp_layernorm")
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), state="mlstate", backend="reference")
    st = step.init(params, *batch)
    folder = step.export_state(st, tmp_path / "init_state")
    model = rlxjax.load(step.save(tmp_path / "train.mlpackage"), backend="reference", flat=True)
    with pytest.raises(rlxjax.ArgumentError, match="state=model.make_state"):
        model(*batch)
    device = model.make_state()
    for name in model.state_names:  # what an app does with export_state's files
        raw = np.fromfile(os.path.join(folder, name + ".f16"), "<f2")
        device.write_state(name, raw.reshape(device.read_state(name).shape))
    # the loss at the initial params, then after one SGD step: as JAX computes them
    want0 = float(loss(params, *batch))
    g = jax.grad(loss)(params, *batch)
    want1 = float(loss(jax.tree_util.tree_map(lambda p, d: p - 0.1 * d, params, g), *batch))
    np.testing.assert_allclose(model(*batch, state=device)["out"], want0, rtol=1e-5)
    np.testing.assert_allclose(model(*batch, state=device)["out"], want1, rtol=1e-5)


#: the train-step workloads of tests/models.py (mlp_layernorm is covered above)
BIT_WORKLOADS = [pytest.param("transformer_block")] + [
    pytest.param(n, marks=pytest.mark.slow)
    for n in ("batchnorm_train", "channelnet_groupnorm", "cnn_groupnorm", "dit_block")]


@pytest.mark.parametrize("name", BIT_WORKLOADS)
def test_every_leaf_is_the_io_step_bit_for_bit(name):
    """3 adamw steps: every parameter and optimizer-state leaf of the mlstate step has the
    bits of the io step compiled for the same target. mlstate needs iOS18 (Core ML states)
    and io defaults to iOS17, where attention is matmul + softmax instead of iOS18's fused
    scaled_dot_product_attention (which rounds differently): the same target is what makes
    the two programs the same maths."""
    if name == "transformer_block":  # workloads()["transformer_block"], built alone
        from models import TransformerBlock, rng_data

        (xt,), tb = rng_data(2, (2, 8, 32)), TransformerBlock()
        loss, params, batch = (lambda p, x: jnp.mean(tb.apply(p, x) ** 2),
                               tb.init(jax.random.PRNGKey(1), xt), (xt,))
    else:
        from models import workloads

        loss, params, batch = workloads()[name]
    has_aux = name == "batchnorm_train"
    run = {}
    for mode in ("io", "mlstate"):
        step = rlxjax.coreml_train_step(loss, optax.adamw(1e-2), state=mode, target="iOS18",
                                        backend="reference", has_aux=has_aux)
        s, losses = step.init(params, *batch), []
        for _ in range(3):
            s, lv, *_ = step(s, *batch)   # (has_aux: then the aux)
            losses.append(_bits(np.asarray(lv)))
        run[mode] = losses, jax.tree_util.tree_leaves((s.params, s.opt_state))
    (io_losses, io_leaves), (ml_losses, ml_leaves) = run["io"], run["mlstate"]
    np.testing.assert_array_equal(ml_losses, io_losses)
    assert len(ml_leaves) == len(io_leaves) > 0
    for a, b in zip(ml_leaves, io_leaves):
        np.testing.assert_array_equal(_bits(a), _bits(b))
