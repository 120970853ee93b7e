"""A training step's compile, as a pipeline: each stage a function of the one before.

::

    StepDefinition     what the step hands in (TrainStep._definition)
      ─► trace         stages.trace: the traced fn(*lead, params, opt_state, *batch)
      ─► prepare       the kind of step's own: frozen leaves baked (trainable=), the
                       scaled loss split off (precision="mixed")
      ─► train graph   program.py build_train_graph: backward + optax update
      ─► states        mlstate: parameters and optimizer state become states
                       (program.py _to_states, rlxjax/states/)
      ─► format        stages.to_format: the Program, the format's compile
      ─► layout        TrainLayout of the executable (layout.py)
      ─► metadata      metadata.describe: every key, rlxjax.train included, once

``lower_train`` runs the stages up to the RLX graph (``step.lower(...)``: a ``Lowered``);
``compile_train`` all of them (``TrainProgram``). A kind of step (trainable.py,
mixed_precision.py) changes only the ``StepDefinition`` it hands in; no stage calls back
into the step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

import jax

from .. import metadata, stages
from ..api import Compiled, Lowered, _without_gc
from ..frontend import Traced
from .layout import TrainLayout, state_layout
from ..states.mlstate import state_bindings
from .program import TrainProgram, build_train_graph


@dataclass(frozen=True)
class StepDefinition:
    """What a training step's program is compiled from (``TrainStep._definition``)."""

    fn: Callable                      # traced as fn(*lead, params, opt_state, *batch)
    names: Callable[[int], List[str]]  # the names of fn's first n arguments (features)
    optimizer: Any
    has_aux: bool
    mode: str                         # 'io' | 'mlstate' (training/layout.py MODES)
    codec: str                        # how the format stores the states (states/mlstate.py)
    fmt: Any                          # the Format (rlxjax/formats/)
    target: Any
    precision: str                    # 'fp32' | 'mixed'
    backend: str
    random: Optional[str] = None
    flexible: Optional[dict] = None
    #: arguments traced before (params, opt_state, *batch): trainable='s frozen leaves
    lead: tuple = ()
    #: (traced, lead + args) -> (traced, the value the backward pass starts from or None):
    #: what a kind of step does to the traced graph before the train graph is built
    prepare: Optional[Callable[[Traced, tuple], Tuple[Traced, Any]]] = None
    #: fn returns (loss, gradients) (microbatch.py): no backward pass is made
    grads_given: bool = False


def _traced_train_graph(d: StepDefinition, args):
    """(the training graph's Traced, its states, the enumerated flexible sizes) for
    ``args`` = (params, opt_state, *batch)."""
    full = d.lead + tuple(args)
    names = d.names(len(full))
    specs, enumerated = stages.structs(full, names, d.flexible, d.fn, len(full))
    traced = stages.trace(d.fn, specs, names, random=d.random, fmt=d.fmt)
    differentiate = None
    if d.prepare is not None:
        traced, differentiate = d.prepare(traced, full)
    traced = build_train_graph(traced, args, d.optimizer, has_aux=d.has_aux, mode=d.mode,
                               codec=d.codec, differentiate=differentiate,
                               grads_given=d.grads_given)
    traced = stages.finish(traced)
    states = None
    if d.mode == "mlstate":  # parameters and optimizer state in the format's states
        states = state_bindings(state_layout(args[0], args[1], d.codec))
    return traced, states, enumerated


@_without_gc
def lower_train(d: StepDefinition, args) -> Lowered:
    """``step.lower(params, opt_state, *batch)``: the training graph, not yet compiled."""
    traced, states, enumerated = _traced_train_graph(d, args)
    return Lowered(traced, d.target, d.precision, d.backend, states=states,
                   enumerated=enumerated, fmt=d.fmt)


@_without_gc
def compile_train(d: StepDefinition, args) -> TrainProgram:
    """The compiled training step for ``args`` = (params, opt_state, *batch) (mlstate:
    params and opt_state as ShapeDtypeStruct trees), with its layout in its metadata."""
    traced, states, enumerated = _traced_train_graph(d, args)
    program, executable = stages.to_format(traced, d.fmt, d.target, d.precision,
                                           states=states, enumerated=enumerated,
                                           keep_weight_layout=True)  # shared with predict
    n_p = len(jax.tree_util.tree_leaves(args[0]))
    n_s = len(jax.tree_util.tree_leaves(args[1]))
    tensors = state_layout(args[0], args[1], d.codec) if d.mode == "mlstate" else None
    layout = TrainLayout.of_program(executable, d.mode, n_p, n_s, d.has_aux, tensors,
                                    n_random=0 if traced.host is None else
                                    len(traced.host.inputs))
    metadata.describe(executable, program, {metadata.TRAIN: layout.metadata()})
    compiled = Compiled(traced, executable, d.backend, d.fmt, None, d.target)
    structs = (args[0], args[1]) if d.mode == "mlstate" else None
    return TrainProgram(compiled, layout, structs, _shapes(args))


def _shapes(args):
    """``args`` as ShapeDtypeStructs (a PRNG key keeps its key dtype)."""
    return jax.tree_util.tree_map(stages.leaf_struct, tuple(args))
