"""``step.save(path, functions={"prefill": (fn, cache, *inputs), ...})``: a training step
and stateful inference functions (a KV cache in state) in one package.

Each function is ``fn(params, cache, *inputs) -> (out, new_cache)`` over the step's
parameters (the whole tree, as ``predict=`` takes it: training/multifunction.py), with
``cache`` in device state (rlxjax/stateful.py). The package is one multifunction program
(iOS18) over one set of weights:

* ``state="mlstate"``: the functions read the parameters from the training states (the
  latest step's weights, decoded with the step's own codec, never written), and every
  function - ``train_step`` included - declares the same states, the training states and
  the cache states, so that one state serves them all: a train step, then ``prefill`` and
  ``decode`` with the weights it wrote. ``train_step`` declares the cache states and leaves
  them alone.
* ``state="io"``: the functions take the parameters as inputs under the step's feature
  names (feed them the ``new_param`` outputs); only they have states (the cache).
* ``trainable=`` steps: the frozen leaves are the same weights (compressed alike) in every
  function, stored once.
"""
from __future__ import annotations

from typing import Callable, Dict

import numpy as np

from .. import metadata, stateful
from ..errors import ArgumentError
from ..ir import TensorType, dtype_from_numpy
from .multifunction import TRAIN_FUNCTION, PredictStage, _params_structs


class StatefulStage(PredictStage):
    """``fn(params, cache, *inputs)`` of a training package, its cache in state: the
    predict stage, then the cache argument's leaves made states after the training ones."""

    def __init__(self, fn: Callable, layout, *, state, state_precision: str, **kwargs):
        super().__init__(fn, layout, **kwargs)
        stateful.check_precision(state_precision)
        self.state, self.state_precision = state, state_precision

    def state_layout(self, args):
        names = self.names(len(args))
        lead = 1 if self.split is None else 2
        if isinstance(self.state, int) and not isinstance(self.state, bool):
            pos = self.state + lead - 1  # a position among fn's own arguments
            if not lead <= pos < len(args):
                raise ArgumentError(f"state={self.state}: fn(params, cache, *inputs) takes "
                                    f"{len(args) - lead + 1} arguments")
        else:
            pos = stateful.state_position(None, self.state, len(args), names)
        if pos < lead:
            raise ArgumentError(f"state={self.state!r} names the parameters: the cache is "
                                "another argument of fn(params, cache, *inputs)")
        return stateful.StateLayout.of(names[pos], pos, args[pos],
                                       stateful.codec_name(self.format_name,
                                                           self.state_precision))

    def transform(self, traced, args):
        traced = super().transform(traced, args)
        layout = self.state_layout(args)
        removed = (0 if self.split is None else 1) + (self.layout.mode == "mlstate")
        train = super().states(args) or {}
        traced = stateful.to_states(traced, layout, layout.position - removed, set(train))
        order = list(self.states(args))  # the training states first, as train_step has them
        g = traced.graph
        rank = {name: i for i, name in enumerate(order)}
        g.inputs = sorted((x for x in g.inputs if x[0] in rank), key=lambda x: rank[x[0]]) + \
            [x for x in g.inputs if x[0] not in rank]
        return traced

    def states(self, args):
        train = super().states(args) or {}
        return {**train, **self.state_layout(args).bindings()}


def _train_with_cache_states(step, program, cache: stateful.StateLayout):
    """The training step's program again, declaring the cache states too (read only and
    unused), after its own states: every function of the package declares the same."""
    lowered = step.lower(*program.args)
    g = lowered.graph
    n_train = len(lowered.states or {})
    extra = []
    for (name, _, _, dt), shape in zip(cache.tensors.state_types(),
                                       cache.tensors.state_shapes()):
        extra.append((name, g.new_value(TensorType(shape, dtype_from_numpy(np.dtype(dt))))))
    g.inputs = g.inputs[:n_train] + extra + g.inputs[n_train:]
    lowered.states = {**(lowered.states or {}), **{name: None for name, _ in extra}}
    lowered.extra_metadata[metadata.TRAIN] = program.layout.metadata()
    return lowered.compile(keep_weight_layout=True)


def save_train_functions(step, program, path, functions: Dict, state, state_precision,
                         default=None) -> str:
    """Write ``program`` (the training step) and ``functions`` (name -> (fn, cache,
    *inputs)) as one package at ``path``."""
    step.target.require("iOS18", "a package with train_step and inference functions (a "
                        "multifunction ML Program; create the step with target='iOS18')")
    if not isinstance(functions, dict) or not functions:
        raise ArgumentError("functions={name: (fn, cache, *example_inputs)}: a non-empty dict")
    if TRAIN_FUNCTION in functions:
        raise ArgumentError(f"'{TRAIN_FUNCTION}' is the training step's own function name")
    split = getattr(step, "split", None)
    lead = () if split is None else (list(split.values),)
    compiled, layouts = {}, []
    for name, spec in functions.items():
        if not isinstance(spec, (tuple, list)) or len(spec) < 2 or not callable(spec[0]):
            raise ArgumentError(f"functions['{name}']: (fn, cache, *example_inputs) with "
                                "fn(params, cache, *inputs) -> (out, new_cache)")
        fn, *example = spec
        sf = StatefulStage(fn, program.layout, target=step.target, backend=step.backend,
                           format=step.format_name, split=split, state=state,
                           state_precision=state_precision)
        args = (*lead, _params_structs(program), *example)
        layouts.append(sf.state_layout(args))
        compiled[name] = sf.function().lower(*args).compile(keep_weight_layout=True)
    if any(lay.tensors != layouts[0].tensors for lay in layouts):
        raise ArgumentError("the functions' caches differ: the functions of one package "
                            "share one state, so each takes the same cache")
    train = program.compiled
    if program.layout.mode == "mlstate":
        train = _train_with_cache_states(step, program, layouts[0])
    return stateful.save_functions(path, {TRAIN_FUNCTION: train, **compiled},
                                   default=default or TRAIN_FUNCTION)

