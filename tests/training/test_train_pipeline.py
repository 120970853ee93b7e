"""The compile as a pipeline (rlxjax/stages.py, rlxjax/training/pipeline.py): a training
step's program is compiled from a ``StepDefinition`` alone, with no step object to call back
into, and a format's compile writes no metadata - ``metadata.describe`` writes it all, once,
after it."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

import rlxjax
from rlxjax import formats, metadata, stages
from rlxjax.frontend import arg_names
from rlxjax.training.pipeline import StepDefinition, compile_train


def _loss(params, x, y):
    return jnp.mean((jnp.tanh(x @ params["w"]) + params["b"] - y) ** 2)


def _data():
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(4, 3)).astype(np.float32),
              "b": np.zeros(3, np.float32)}
    return params, rng.normal(size=(8, 4)).astype(np.float32), \
        rng.normal(size=(8, 3)).astype(np.float32)


def test_a_step_definition_alone_compiles_a_step_that_matches_optax():
    """The pipeline needs no TrainStep: the record of what to trace is enough, and the
    program it compiles takes one step as JAX + optax do."""
    params, x, y = _data()
    opt = optax.adam(1e-2)
    fmt = formats.get()
    target, backend = stages.resolve_options("iOS17", "fp32", "reference", None, fmt.name)

    def fn(params, opt_state, x, y):
        return _loss(params, x, y)

    names = lambda n: ["params", "opt_state"] + arg_names(_loss, n - 1)[1:]  # noqa: E731
    d = StepDefinition(fn=fn, names=names,
                       optimizer=opt, has_aux=False, mode="io", codec="f16x3",
                       fmt=fmt, target=target, precision="fp32", backend=backend)
    opt_state = opt.init(params)
    program = compile_train(d, (params, opt_state, x, y))
    loss, new_params, _ = program.compiled(params, opt_state, x, y)

    want_loss, grads = jax.value_and_grad(_loss)(params, x, y)
    updates, _ = opt.update(grads, opt_state, params)
    want = optax.apply_updates(params, updates)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-6)
    for k in want:
        np.testing.assert_allclose(new_params[k], want[k], rtol=1e-5, atol=1e-6)
    roles = [f.role for f in program.layout.inputs]
    assert roles == ["param"] * 2 + ["opt_state"] * (len(roles) - 4) + ["batch"] * 2
    assert metadata.read(program.compiled.metadata, metadata.TRAIN) == program.layout.metadata()


def test_a_format_compile_writes_no_metadata_and_describe_writes_it_once():
    lowered = rlxjax.coreml_jit(lambda x: jnp.sin(x) * 2, backend="reference").lower(
        np.ones((2, 3), np.float32))
    program, executable = stages.to_format(lowered._traced, lowered.format, lowered.target,
                                           "fp32")
    assert dict(executable.metadata) == {}  # the format's compile: no rlxjax key
    metadata.describe(executable, program)
    meta = dict(executable.metadata)
    assert set(meta) == {metadata.VERSION, metadata.IO}
    ins, outs = metadata.read_io(meta)
    assert [(s.name, s.shape, s.dtype) for s in ins] == [("x", (2, 3), "float32")]
    assert [(s.shape, s.dtype) for s in outs] == [((2, 3), "float32")]
