"""Frozen weights through the compiler: stored on disk while a step compiles (rlxjax/
weightstore.py), and ``memory_analysis()``'s stored / materialised weights on both formats
against what the parameters' numpy arrays and the package files on disk say."""
from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlxjax
from rlxjax.errors import ArgumentError
from rlxjax.ir.graph import Params, param_key
from rlxjax.weightstore import WeightStore, is_mapped, release

try:
    import coreai.authoring  # noqa: F401
    HAS_COREAI = True
except ImportError:  # CI's oldest-JAX run: numpy below coreai-core's floor
    HAS_COREAI = False
needs_coreai = pytest.mark.skipif(not HAS_COREAI,
                                  reason="format='aimodel' needs coreai-core (rlxjax[coreai])")
FORMATS = ("mlpackage", pytest.param("aimodel", marks=needs_coreai))
AVAILABLE = ("mlpackage", "aimodel") if HAS_COREAI else ("mlpackage",)


def _params(seed=0):
    rng = np.random.default_rng(seed)
    # w1 and w2 are large enough to go to the store (weightstore.MIN_BYTES), b1 is not
    return {"base": {"w1": rng.standard_normal((64, 512)).astype(np.float32),
                     "b1": rng.standard_normal(512).astype(np.float32),
                     "w2": rng.standard_normal((512, 32)).astype(np.float32)},
            "head": {"w": rng.standard_normal((32, 4)).astype(np.float32)}}


def _loss(p, x, y):
    h = jnp.tanh(x @ p["base"]["w1"] + p["base"]["b1"]) @ p["base"]["w2"]
    return ((h @ p["head"]["w"] - y) ** 2).mean()


def _batch(seed=1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((8, 64)).astype(np.float32),
            rng.standard_normal((8, 4)).astype(np.float32))


def _step(fmt, compress="int8"):
    kw = dict(target="iOS18") if fmt == "mlpackage" else {}
    return rlxjax.coreml_train_step(_loss, optax.adam(1e-3), format=fmt, compress=compress,
                                    trainable={"base": False, "head": True}, **kw)


def _files(path):
    return {os.path.relpath(os.path.join(d, f), path): os.path.getsize(os.path.join(d, f))
            for d, _, fs in os.walk(path) for f in fs}


# -- the store ------------------------------------------------------------------------------

def test_store_views_equal_what_was_written_and_survive_release():
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((300, 70)).astype(np.float32),
              rng.integers(-128, 127, (5, 9000)).astype(np.int8),
              rng.standard_normal((4, 4)).astype(np.float16)]
    store = WeightStore()
    handles = [store.put(a) for a in arrays[:2]]
    handles.append(store.put_chunks(arrays[2].shape, np.float16,
                                    [arrays[2][:1], arrays[2][1:]]))
    store.seal()
    views = [store.view(h) for h in handles]
    for a, v in zip(arrays, views):
        assert is_mapped(v) and not v.flags.writeable
        np.testing.assert_array_equal(v, a, strict=True)
        release(v)  # the pages leave the process; the values are read again on use
        np.testing.assert_array_equal(v, a, strict=True)
    with pytest.raises(ValueError):
        views[0][0, 0] = 1.0
    assert not is_mapped(arrays[0])
    release(arrays[0])  # an ordinary array: nothing happens


def test_graph_params_keep_a_stored_array_uncopied_and_key_it_by_place():
    store = WeightStore()
    a = np.arange(40000, dtype=np.float32).reshape(200, 200)
    h1, h2 = store.put(a), store.put(a)
    store.seal()
    v1, v2 = store.view(h1), store.view(h2)
    p = Params({"value": v1})
    assert p["value"] is v1  # no copy of a frozen weight on disk
    assert param_key(v1) == param_key(store.view(h1))
    assert param_key(v1) != param_key(v2)  # two leaves of the store: two places
    assert param_key(v1) != param_key(a)


@pytest.mark.parametrize("fmt", FORMATS)
def test_frozen_leaves_are_held_on_disk_and_the_step_equals_jax(fmt):
    params, (x, y) = _params(), _batch()
    step = _step(fmt)
    st = step.init(params, x, y)
    mapped = {n.rpartition(".")[2]: is_mapped(v)
              for n, v in zip(step.split.names, step.split.values)}
    assert mapped == {"w1": True, "b1": False, "w2": True}, mapped
    base = step.frozen_params()
    want_loss, g = jax.value_and_grad(
        lambda h: _loss({"base": base["base"], "head": h}, x, y))(params["head"])
    _, loss = step(st, x, y)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)


def test_a_big_frozen_leaf_is_baked_into_the_store_exactly():
    """A leaf larger than the store's minimum and than one piece of the chunked quantiser:
    its dequantised values, read back from the file, are coremltools' own dequantisation
    of its own quantisation of the whole leaf, and the report's error is theirs."""
    from coremltools.optimize import _utils
    from coremltools.optimize.coreml._quantization_passes import linear_quantize_weights

    from rlxjax.training.frozen import FrozenSplit

    params = _params()
    w = np.random.default_rng(3).standard_normal((4096, 300)).astype(np.float32)
    params["base"]["w1"] = w
    split = FrozenSplit.of(params, {"base": False, "head": True}, "int8",
                           _step("mlpackage").format)
    i = [k for k, n in enumerate(split.names) if n.endswith("w1")][0]
    value = split.values[i]
    assert is_mapped(value) and is_mapped(split.weights[i]["data"])
    q = linear_quantize_weights.blockwise_compress(w, nbits=8, mode="LINEAR_SYMMETRIC",
                                                   signed=True, block_sizes=[0, 1])
    want = _utils.dequantize_by_scale_and_zp(q.data, q.scale, None).astype(np.float32)
    np.testing.assert_array_equal(value, want, strict=True)
    np.testing.assert_array_equal(split.weights[i]["data"], q.data.astype(np.int8))
    row = split.report.leaves[i]
    assert row.max_abs_error == float(np.max(np.abs(want.astype(np.float64) - w)))
    assert row.stored_bytes == w.size + 4 * w.shape[-1]


# -- memory_analysis: stored and materialised weights -----------------------------------

def _frozen_bytes(params, fmt):
    """(bytes the payload of the frozen leaves takes, bytes of them as fp32), from the
    numpy arrays: int8 one byte per value and one fp32 scale per output channel (Core AI's
    blockwise_shift_scale also takes zero points, all zero: splat constants, one value
    each); vectors stay fp32."""
    per_channel = 4
    stored = dense = 0
    for leaf in jax.tree_util.tree_leaves(params["base"]):
        dense += leaf.nbytes
        stored += leaf.size + per_channel * leaf.shape[-1] if leaf.ndim >= 2 else leaf.nbytes
    return stored, dense


@pytest.mark.parametrize("fmt", FORMATS)
def test_memory_analysis_splits_weights_into_stored_and_materialised(fmt, tmp_path):
    params, (x, y) = _params(), _batch()
    step = _step(fmt)
    st = step.init(params, x, y)
    m = step.memory_analysis()
    payload, dense = _frozen_bytes(params, fmt)
    # every frozen value is stored once (+ the program's own small constants)
    assert payload <= m.weight_stored_in_bytes <= payload + 2048
    # and computed with as fp32
    assert dense <= m.weight_size_in_bytes <= dense + 2048
    # the program's arguments / outputs: the trained leaves, adam's state and the batch
    nbytes = lambda t: sum(np.asarray(a).nbytes for a in jax.tree_util.tree_leaves(t))  # noqa
    assert m.argument_size_in_bytes == nbytes((st.params, st.opt_state, (x, y)))
    loss, new_p, new_s = step.last_compiled(st.params, st.opt_state, x, y)
    assert m.output_size_in_bytes == nbytes((np.float32(loss), new_p, new_s))
    # the package on disk holds the stored weights
    files = _files(step.save(str(tmp_path / ("s." + fmt))))
    if fmt == "mlpackage":
        blob = files[os.path.join("Data", "com.apple.CoreML", "weights", "weight.bin")]
        assert payload <= blob <= m.weight_stored_in_bytes + 64 * 16 + 64
    else:  # the asset: the stored weights and the program around them
        assert m.weight_stored_in_bytes <= sum(files.values()) <= \
            m.weight_stored_in_bytes + 64 * 1024


@needs_coreai
def test_both_formats_agree_on_the_stored_and_materialised_weights():
    params, (x, y) = _params(), _batch()
    got = {}
    for fmt in AVAILABLE:
        step = _step(fmt)
        step.init(params, x, y)
        got[fmt] = step.memory_analysis()
    a, b = got["mlpackage"], got["aimodel"]
    assert a.argument_size_in_bytes == b.argument_size_in_bytes
    assert a.output_size_in_bytes == b.output_size_in_bytes
    assert abs(a.weight_stored_in_bytes - b.weight_stored_in_bytes) <= 1024
    assert abs(a.weight_size_in_bytes - b.weight_size_in_bytes) <= 1024


@needs_coreai
def test_memory_analysis_of_a_core_ai_jit_program():
    f = rlxjax.coreml_jit(lambda w, x: jnp.tanh(x @ w).sum(), format="aimodel")
    w, x = np.ones((40, 30), np.float32), np.ones((20, 40), np.float32)
    m = f.lower(w, x).compile().memory_analysis()
    assert m.argument_size_in_bytes == w.nbytes + x.nbytes
    assert m.output_size_in_bytes == 4
    # x @ w (20 x 30 fp32) is live before tanh writes its result
    assert m.temp_size_in_bytes >= 2 * 20 * 30 * 4
    assert m.peak_memory_in_bytes >= w.nbytes + x.nbytes + 2 * 20 * 30 * 4


def test_compress_without_trainable_is_still_refused():
    with pytest.raises(ArgumentError, match="trainable="):
        rlxjax.coreml_train_step(_loss, optax.adam(1e-3), compress="int8")


# -- a clear error before an out-of-memory ------------------------------------------------

def test_init_refuses_a_base_the_machine_cannot_bake_and_the_check_can_be_skipped(
        monkeypatch):
    from rlxjax.training import budget

    params, (x, y) = _params(), _batch()
    monkeypatch.setattr(budget, "available_bytes", lambda: 64 << 20)
    for fmt in AVAILABLE:
        with pytest.raises(budget.OutOfMemoryRisk, match="0.1 GiB available"):
            _step(fmt).init(params, x, y)
    monkeypatch.setenv(budget.ENV, "0")
    _step("mlpackage").init(params, x, y)


def test_the_estimate_counts_what_core_ai_holds_from_the_leaf_shapes():
    from rlxjax.training.budget import GRAPH_SHARE, OVERHEAD, PIECE, estimate

    leaves = [np.zeros((1000, 300), np.float32), np.zeros(300, np.float32)]
    base = OVERHEAD + 2 * PIECE + int(GRAPH_SHARE * 1_201_200)
    # Core ML: the largest leaf's payload (one byte a value with int8) at a time
    assert estimate(leaves, "int8", "mlpackage") == base + 300_000
    # Core AI: and every stored payload, read in when the asset is written (the vector
    # stays fp32)
    assert estimate(leaves, "int8", "aimodel") == base + 300_000 + (300_000 + 1200)
    assert estimate(leaves, None, "aimodel") == base + 1_200_000 + 1_201_200
    # int4: half a byte a value and a fp32 scale per 32 values
    assert estimate(leaves, "int4", "aimodel") == base + 187_500 + (187_500 + 1200)


def test_baking_progress_is_silent_when_quick_and_a_line_in_a_log_when_slow(monkeypatch):
    import io

    from rlxjax.training import progress

    log = io.StringIO()
    assert list(progress.progress_items([1, 2, 3], "baking", stream=log)) == [1, 2, 3]
    assert log.getvalue() == ""  # done before TASK_DELAY: no bar
    if os.environ.get("TQDM_DISABLE"):  # (tqdm reads it when imported: every bar is off)
        return
    monkeypatch.setattr(progress, "TASK_DELAY", 0.0)
    monkeypatch.setattr(progress, "LOG_INTERVAL", 0.0)
    assert list(progress.progress_items([1, 2, 3], "baking", stream=log)) == [1, 2, 3]
    lines = log.getvalue().splitlines()
    assert lines and all("\r" not in ln for ln in lines) and "baking" in lines[-1]
