"""``step.save(path, predict=(fn, *example_inputs))``: one package that trains and predicts.

The package is a multifunction ML Program (iOS18, coreml/multifunction.py) with two
functions, ``train_step`` (the default) and ``predict`` = ``fn(params, *inputs)``:

* ``state="mlstate"``: ``predict`` declares exactly the states ``train_step`` declares
  (same names, shapes) and only reads them. It decodes the parameters from the states with
  the train step's own codec (states/mlstate.py: each fp32 value stored exactly as three fp16
  pieces; the parameters are the first slots of the fp32 vector, so ``predict`` decodes
  that prefix only), so it computes with exactly the weights the latest step wrote - no
  re-export. Its inputs are ``fn``'s other arguments.
* ``state="io"``: there is no state to share; ``predict`` takes the parameters as inputs,
  under the very feature names ``train_step`` takes them (``params_Dense_0_kernel``...),
  so an app feeds it the ``new_param`` outputs of its latest step (the layout's ``feeds``
  names them), then ``fn``'s other arguments.
* ``trainable=`` steps: the frozen leaves are baked into ``predict`` as the same ``weight``
  nodes (compressed alike) the train step computes with; only the trained leaves come from
  the states or inputs.

Constants both functions use are stored once (the merge deduplicates the weight blobs by
content). Each function's ``rlxjax.*`` metadata (inputs, outputs, states; ``rlxjax.train``
for the step, ``rlxjax.predict`` for predict) is kept under ``rlxjax.functions``.
"""
from __future__ import annotations

from typing import Callable

import jax
import numpy as np

from .. import formats, metadata
from ..api import CoreMLFunction, Stage
from ..errors import ArgumentError, RlxError
from ..frontend import Traced, arg_names
from ..frontend.interpreter import Lowering
from ..ir import TensorType, dtype_from_numpy, verify
from ..transforms.rewrite import dce, substitute
from .frozen import bake_weights
from ..states.mlstate import Layout, role_states, unpack

TRAIN_FUNCTION, PREDICT_FUNCTION = "train_step", "predict"


class PredictStage:
    """What ``fn(params, *inputs)`` compiled as the ``predict`` function of a training
    package does between trace and finish (api.Stage): params as inputs (io) or decoded
    from the training states (mlstate); a trainable= step's frozen leaves baked as the train
    step's weights. ``function()`` is the ``CoreMLFunction`` that runs it."""

    def __init__(self, fn: Callable, layout, *, target, backend, split=None, format=None):
        self.layout = layout  # the train program's TrainLayout
        self.user_fn, self.split = fn, split
        self.target, self.backend = target, backend
        self.format_name = format or formats.DEFAULT

    def traced_fn(self) -> Callable:
        """The function traced: ``fn``, or (trainable=) ``fn`` over the frozen leaves
        merged back into the parameters."""
        user, split = self.user_fn, self.split
        if split is None:
            return user

        def fn(frozen, params, *inputs):
            return user(split.merge(params, frozen), *inputs)

        fn.__name__ = getattr(user, "__name__", PREDICT_FUNCTION)
        return fn

    def function(self) -> CoreMLFunction:
        return CoreMLFunction(self.traced_fn(), static_argnums=(), target=self.target,
                              precision="fp32", backend=self.backend, format=self.format_name,
                              stage=Stage(self.transform, names=self.names,
                                          states=self.states, state_layout=self.state_layout))

    def names(self, n_args):
        # params features are named as the train step names them ('params.Dense_0.kernel')
        lead = ["params"] if self.split is None else ["frozen", "params"]
        return lead + arg_names(self.user_fn, n_args - len(lead) + 1)[1:]

    def transform(self, traced: Traced, args) -> Traced:
        if self.split is not None:  # the same weight nodes (so the merge stores them once)
            traced = bake_weights(traced, len(self.split.values), self.split.weights, args[1:])
            args = args[1:]
        if self.layout.mode != "mlstate":
            return traced
        return _params_from_states(traced, args[0], self.layout.tensors)

    def states(self, args):
        if self.layout.mode != "mlstate":
            return None
        return {s.graph_name: None for s in self.layout.states}  # read only

    def state_layout(self, args):
        return None  # no argument of its own in state (functions.py: a cache)


def _params_from_states(traced: Traced, params, layout: Layout) -> Traced:
    """Replace the parameter inputs of ``traced`` by the training states, decoded."""
    g = traced.graph
    n_p = len(jax.tree_util.tree_leaves(params))
    slots = layout.slots[:layout.n_params]
    if len(slots) != n_p or any(s.dtype != "float32" for s in slots) or \
            any(s.offset != sum(t.size for t in slots[:i]) for i, s in enumerate(slots)):
        raise RlxError("internal: the parameters are not the fp32 prefix of the state layout")
    got = [(tuple(v.type.shape), v.dtype.np.name) for _, v in g.inputs[:n_p]]
    if got != [(s.shape, s.dtype) for s in slots]:
        raise RlxError(f"internal: predict's parameters {got} are not the train step's")
    p_vals = [v for _, v in g.inputs[:n_p]]
    pieces = [(name, g.new_value(TensorType(shape, dtype_from_numpy(np.dtype(dt)))))
              for (name, _, _, dt), shape in zip(layout.state_types(), layout.state_shapes())]
    g.inputs = pieces + list(g.inputs[n_p:])
    f32_names = set(role_states(layout, "param"))
    f32 = [v for name, v in pieces if name in f32_names]
    if not f32:
        raise RlxError("internal: the state layout has no fp32 pieces")

    def decode(*f32_pieces):  # the params, as mlstate.unpack decodes them
        return unpack(layout, *f32_pieces, role="param")

    closed = jax.make_jaxpr(decode)(
        *[jax.ShapeDtypeStruct(v.type.shape, v.type.dtype.np) for v in f32])
    n0 = len(g.nodes)
    decoded = Lowering(g).eval_jaxpr(closed.jaxpr, closed.consts, f32)
    g.nodes = g.nodes[n0:] + g.nodes[:n0]   # the decode reads only the states: run it first
    substitute(g, {v.id: d for v, d in zip(p_vals, decoded)})
    dce(g)
    verify(g)
    rest = jax.tree_util.tree_structure(tuple(
        jax.tree_util.tree_unflatten(t, [0] * t.num_leaves)
        for t in traced.in_tree.children()[1:]))
    return traced.derive(g, remove=range(n_p), in_tree=rest, in_types=traced.in_types[n_p:],
                         host=None)  # (as before: this program's draws are not carried)


def _params_structs(program):
    """The (params) ShapeDtypeStruct tree the train program was compiled for."""
    return program.args[0]


def compile_predict(step, program, fn: Callable, example_inputs):
    """The ``predict`` function's compiled program for ``program`` (a TrainProgram)."""
    if not callable(fn):
        raise ArgumentError(f"predict=(fn, *example_inputs): fn must be callable, got "
                            f"{type(fn).__name__}")
    split = getattr(step, "split", None)  # a trainable= step: its frozen leaves
    pf = PredictStage(fn, program.layout, target=step.target, backend=step.backend,
                      format=step.format_name, split=split).function()
    lead = () if split is None else (list(split.values),)
    lowered = pf.lower(*lead, _params_structs(program), *example_inputs)
    layout = program.layout
    meta = {"state": layout.mode, "params": "states" if layout.mode == "mlstate" else "inputs"}
    if layout.mode == "mlstate":  # where the params live in the states it reads
        meta.update(encoding=layout.tensors.codec.name,
                    states=[s.row() for s in layout.states],
                    tensors=[{"name": s.name, "shape": list(s.shape), "offset": s.offset,
                              "size": s.size}
                             for s in layout.tensors.slots[:layout.tensors.n_params]])
    else:
        meta["param_inputs"] = [f.feature for f in layout.inputs if f.role == "param"]
    lowered.extra_metadata[metadata.PREDICT] = meta
    return lowered.compile(keep_weight_layout=True)  # a weight shared with train_step: once


def save_train_predict(step, program, path, predict) -> str:
    """Write ``program`` (the train step) and ``predict`` = (fn, *example_inputs) as one
    multifunction package at ``path``."""
    step.target.require("iOS18",
            "a package with train_step and predict functions (a multifunction ML Program; "
            "create the step with target='iOS18')")
    if not isinstance(predict, (tuple, list)) or not predict:
        raise ArgumentError("predict=(fn, *example_inputs): a tuple of the prediction "
                            "function fn(params, *inputs) and example inputs")
    fn, *example_inputs = predict
    pred = compile_predict(step, program, fn, example_inputs)
    train = program.compiled
    return step.format.save_functions([(TRAIN_FUNCTION, train.executable),
                                       (PREDICT_FUNCTION, pred.executable)], TRAIN_FUNCTION, path)
