"""``memory_analysis()`` against what the reference interpreter holds while it runs
(coreml/interpreter/liveness.py: each value freed after its last reader), and its
argument / output sizes against the arrays JAX passes and returns."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import rlxjax
from models import workloads
from rlxjax.errors import DynamicShapeError
from rlxjax.coreml.interpreter.liveness import LiveBytesProgram


#: the train-step workloads of tests/models.py (named here: workloads() builds six models)
WORKLOADS = ("batchnorm_train", "channelnet_groupnorm", "cnn_groupnorm", "dit_block",
             "mlp_layernorm", "transformer_block")


def feeds_of(compiled, *args):
    leaves, treedef = jax.tree_util.tree_flatten(tuple(args))
    arrays = compiled._checked_args(leaves, treedef)
    return {s.mil_name: s.to_feature(a) for s, a in zip(compiled.input_specs, arrays)}


def measured(compiled, *args, state=None):
    prog = LiveBytesProgram(compiled.spec, compiled._weights_dir)
    st = None if state is None else prog.make_state()
    _, m = prog.measure(feeds_of(compiled, *args), state=st)
    return m


def nbytes(tree) -> int:
    return sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(tree))


def assert_agrees(stats, m):
    held = stats.argument_size_in_bytes + stats.state_size_in_bytes + stats.weight_size_in_bytes
    assert stats.temp_size_in_bytes == pytest.approx(m["peak_temp_bytes"], rel=0.01)
    assert stats.peak_memory_in_bytes - held == pytest.approx(m["peak_bytes"], rel=0.01)
    # counted as XLA counts its temp: what does not fit in the output buffers
    assert stats.temp_outside_outputs_in_bytes == pytest.approx(
        max(0, m["peak_bytes"] - stats.output_size_in_bytes), rel=0.01, abs=64)
    assert stats.temp_outside_outputs_in_bytes <= stats.temp_size_in_bytes
    assert m["peak_temp_bytes"] > 0


def _step(name):
    loss, params, batch = workloads()[name] if name != "mlp_layernorm" else _mlp()
    has_aux = name == "batchnorm_train"
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-3), has_aux=has_aux)
    st = step.init(params, *batch)
    return step, st, batch, loss, params


def _mlp():
    from models import MLP, cross_entropy, onehot, rng_data
    x, = rng_data(0, (8, 16))
    m = MLP()
    return (lambda p, x, y: cross_entropy(m.apply(p, x), y), m.init(jax.random.PRNGKey(0), x),
            (x, onehot(1, 8, 4)))


def test_train_step_analysis_equals_measured_peak_and_jax_sizes():
    step, st, batch, loss, params = _step("mlp_layernorm")
    stats = step.memory_analysis()
    assert_agrees(stats, measured(step.last_compiled, st.params, st.opt_state, *batch))
    # arguments: params + adam state + batch as JAX holds them (the step count int32)
    assert stats.argument_size_in_bytes == nbytes((st.params, st.opt_state, batch))
    loss_v, new_p, new_s = step.last_compiled(st.params, st.opt_state, *batch)
    assert stats.output_size_in_bytes == nbytes((np.float32(loss_v), new_p, new_s))
    assert stats.alias_size_in_bytes == 0 and stats.state_size_in_bytes == 0
    assert stats.weight_size_in_bytes > 0  # the program's constants


@pytest.mark.slow
@pytest.mark.parametrize("name", WORKLOADS)
def test_every_train_step_workload_agrees_within_one_percent(name):
    step, st, batch, *_ = _step(name)
    assert_agrees(step.memory_analysis(),
                  measured(step.last_compiled, st.params, st.opt_state, *batch))


def test_loops_and_branches_agree():
    def f(x, n):
        def body(i, c):
            h = jnp.tanh(c @ x) * 2.0
            return jax.lax.cond(i % 2 == 0, lambda h: h + c, lambda h: h * c, h)
        y = jax.lax.fori_loop(0, n, body, x)
        return jnp.sum(y), y * 3.0

    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    n = np.int32(3)
    c = rlxjax.coreml_jit(f).lower(x, n).compile()
    assert {op.type for op in c.mil_ops()} >= {"while_loop", "cond"}
    stats = c.memory_analysis()
    m = measured(c, x, n)
    # a cond's peak is its larger branch; both branches here make the same sizes
    assert_agrees(stats, m)
    assert stats.argument_size_in_bytes == x.nbytes + n.nbytes
    assert stats.output_size_in_bytes == 4 + x.nbytes


def test_mlstate_step_reports_states_updated_in_place():
    loss, params, batch = _mlp()
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1), state="mlstate", target="iOS18")
    st = step.init(params, *batch)
    stats = step.memory_analysis()
    assert stats.state_size_in_bytes > 0
    assert stats.alias_size_in_bytes == stats.state_size_in_bytes  # every state is written
    assert stats.argument_size_in_bytes == nbytes(batch)
    c = step.last_compiled
    prog = LiveBytesProgram(c.spec, c._weights_dir)
    _, m = prog.measure(feeds_of(c, *batch), state=prog.make_state())
    assert_agrees(stats, m)


def test_loaded_package_reports_the_same(tmp_path):
    loss, params, batch = _mlp()
    step = rlxjax.coreml_train_step(loss, optax.sgd(0.1))
    step.init(params, *batch)
    path = step.last_compiled.save(str(tmp_path / "s.mlpackage"))
    assert rlxjax.load(path, flat=True).memory_analysis() == step.memory_analysis()


def test_flexible_program_is_refused_clearly():
    f = rlxjax.coreml_jit(lambda x: jnp.tanh(x) * 2, flexible={0: {0: (1, 64)}})
    c = f.lower(np.ones((4, 3), np.float32)).compile()
    with pytest.raises(DynamicShapeError, match="fixed shapes"):
        c.memory_analysis()


def test_step_not_compiled_yet_is_refused():
    step = rlxjax.coreml_train_step(lambda p, x: jnp.sum(p * x), optax.sgd(0.1))
    with pytest.raises(rlxjax.errors.RlxError, match="nothing compiled"):
        step.memory_analysis()
