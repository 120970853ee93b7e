"""``coreml_train_step``: forward, backward and an optax update in one ML Program.

The program's inputs are the parameters, the optimizer state and a batch; its outputs are
the loss (and aux), the new parameters and the new optimizer state (``state="io"``): an
app feeds the new values back in on the next call. With ``state="mlstate"`` parameters and
optimizer state live in Core ML states instead, updated in place by each call.

This module is the host side (options.py's ``coreml_train_step`` makes one): ``TrainStep``
compiles one program per batch signature (pipeline.py, from the ``StepDefinition`` the step
gives it), runs it, keeps the device state (state.py), fits, exports the initial state and
saves (checkpoint.py).
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Optional

import jax
import numpy as np

from .. import formats, stages
from ..api import Compiled, Lowered
from ..errors import ArgumentError, RlxError
from ..frontend import arg_names, path_name
from ..states.files import write_state_files
from .export import numpy_tree
from .layout import MODES, leaf_struct
from .microbatch import micro_step_fn
from ..states.mlstate import host_pack
from .pipeline import StepDefinition, compile_train, lower_train
from .program import TrainProgram
from .interrupt import held_interrupt
from .progress import progress_bar
from .state import DeviceState, TrainState


class TrainStep:
    """What ``coreml_train_step`` returns."""

    def __init__(self, loss: Callable, optimizer, *, state: str, has_aux: bool,
                 microbatches: int = 1, target, precision: str, backend,
                 random: Optional[str] = None, flexible=None,
                 format: str = formats.DEFAULT):
        if state not in MODES:
            raise ArgumentError(f"state={state!r}: choose 'io' (params and optimizer state as "
                                "inputs and outputs) or 'mlstate' (Core ML states, iOS18)")

        def step_fn(params, opt_state, *batch):
            return loss(params, *batch)

        step_fn.__name__ = getattr(loss, "__name__", "train_step")
        self.microbatches = microbatches
        if microbatches > 1:  # gradient accumulation in one loop (microbatch.py)
            step_fn = micro_step_fn(loss, microbatches)
        self.fun = step_fn  # what is traced: fun(params, opt_state, *batch)
        self.__name__ = step_fn.__name__
        self.target, self.backend = stages.resolve_options(target, precision, backend, random,
                                                           format)
        self.precision = precision
        self.random = random
        self.flexible = flexible  # batch arguments only (options.py)
        self.format_name = format
        self.loss = loss
        self.optimizer = optimizer
        self.has_aux = has_aux
        self.state_mode = state
        self._programs: Dict[object, TrainProgram] = {}
        self._latest: Optional[TrainProgram] = None  # the program the latest call used

    def _names(self, n_args):
        # Batch inputs are named after the loss's own parameters (loss(params, x, y) ->
        # features 'x', 'y'), which is what an app binds.
        return ["params", "opt_state"] + arg_names(self.loss, n_args - 1)[1:]

    @property
    def format(self):
        """The format this step compiles to (rlxjax/formats/), loaded on first use."""
        return formats.get(self.format_name)

    # -- the compile: pipeline.py, from what this kind of step traces --------------------
    def _definition(self) -> StepDefinition:
        """What this step's programs are compiled from; a kind of step (trainable.py,
        mixed_precision.py) changes this and nothing else of the compile."""
        return StepDefinition(
            fn=self.fun, names=self._names, optimizer=self.optimizer, has_aux=self.has_aux,
            mode=self.state_mode, codec=self.state_codec, fmt=self.format,
            target=self.target, precision=self.precision, backend=self.backend,
            random=self.random, flexible=self.flexible, grads_given=self.microbatches > 1)

    def lower(self, *args) -> Lowered:
        """``step.lower(params, opt_state, *batch)``: the training graph for these
        arguments (``Lowered``: ``.graph``, ``.as_text()``, ``.compile()``)."""
        return lower_train(self._definition(), args)

    def _key(self, args):
        """What the program for ``args`` (params, opt_state, *batch) depends on."""
        if not self.flexible:
            return stages.signature(args, ())
        d = self._definition()
        full = d.lead + tuple(args)
        return stages.signature(full, d.names(len(full)), self.flexible, d.fn, len(full))

    @property
    def state_codec(self) -> str:
        """How this step's format stores fp32 / int32 leaves in its states
        (rlxjax/states/mlstate.py)."""
        return formats.REGISTRY[self.format_name].state_codec

    # -- programs ------------------------------------------------------------------------
    @property
    def last_compiled(self) -> Optional[Compiled]:
        """The compiled program the latest call (or ``init`` with a batch) used."""
        return None if self._latest is None else self._latest.compiled

    def memory_analysis(self):
        """``memory_analysis()`` of the compiled program the latest call (or ``init`` with
        a batch) used (``Compiled.memory_analysis``, rlxjax/memory.py)."""
        if self._latest is None:
            raise RlxError("nothing compiled yet: call the step once (or "
                           "init(params, *example_batch)) so that the batch shapes are known")
        return self._latest.compiled.memory_analysis()

    def _program(self, state: TrainState, batch) -> TrainProgram:
        """The program for ``batch`` (compiled on first use for its signature)."""
        if self.state_mode == "io":
            args = (state.params, state.opt_state) + tuple(batch)
            key = self._key(args)
        else:  # the values may be on the device: key on shapes and dtypes
            structs = state.device.program.structs if state.device is not None else \
                jax.tree_util.tree_map(leaf_struct, (state.params, state.opt_state))
            args = tuple(structs) + tuple(batch)
            leaves, tree = jax.tree_util.tree_flatten(structs)
            key = (tree, tuple((x.shape, x.dtype.name) for x in leaves),
                   self._key(args) if self.flexible else self._key(batch))
        program = self._programs.get(key)
        if program is None:
            program = self._programs[key] = compile_train(self._definition(), args)
        self._latest = program
        return program

    def _device(self, state: TrainState, program: TrainProgram) -> DeviceState:
        """The device state to step ``state`` with on ``program``: its own when current,
        else a fresh one written from the host values (raises if ``state`` was consumed)."""
        if state.live and state.device.program is program:
            return state.device
        leaves = state.leaves()
        dev = DeviceState(program)
        dev.write_leaves(leaves)
        return dev

    # -- host API --------------------------------------------------------------------------
    def init(self, params, *example_batch) -> TrainState:
        """The initial TrainState. Passing an example batch also compiles the program for
        its shapes (so ``save`` works before the first step) and, in mlstate mode, writes the
        values into a fresh device state (otherwise the first step does that)."""
        _refuse_rng_state(params)
        params = numpy_tree(params)
        state = TrainState(params, numpy_tree(self.optimizer.init(params)), 0)
        if example_batch:
            program = self._program(state, example_batch)
            if self.state_mode == "mlstate":
                state = TrainState(params, state.opt_state, 0,
                                   device=self._device(state, program))
        return state

    def __call__(self, state: TrainState, *batch):
        if not isinstance(state, TrainState):
            raise ArgumentError("call a training step as step(state, *batch) with the "
                                "TrainState from step.init(params)")
        program = self._program(state, batch)
        if self.state_mode == "mlstate":
            dev = self._device(state, program)
            # the device's update and the step counter advance together (interrupt.py);
            # a step that raises leaves ``state`` current (the device unchanged), and a
            # Ctrl-C held until the step completed carries the new state and its value
            new_state = None
            try:
                with held_interrupt():
                    value = program.compiled(*batch, state=dev.handle)
                    dev.version += 1
                    new_state = TrainState(None, None, state.step + 1, device=dev,
                                           version=dev.version)
            except KeyboardInterrupt as e:
                if new_state is not None:
                    e.state, e.value = new_state, value
                    e.add_note(f"rlxjax: the step completed before the interrupt: the "
                               f"current TrainState (step {new_state.step}) is on this "
                               "exception's .state (the one passed in is consumed)")
                raise
        else:
            value, params, opt_state = program.compiled(state.params, state.opt_state, *batch)
            new_state = TrainState(params, opt_state, state.step + 1)
        return (new_state, value) if not self.has_aux else (new_state, value[0], value[1])

    def export_state(self, state: TrainState, folder) -> str:
        """mlstate: write what an app loads into its ``MLState`` before the first step - one
        raw little-endian fp16 file per state (``<state name>.f16``) and ``state.json``
        (names, shapes, step) - into ``folder``. Each file is written atomically."""
        if self.state_mode != "mlstate" or self._latest is None:
            raise RlxError("export_state needs an mlstate step that has been compiled (call "
                           "it once, or init(params, *example_batch))")
        program = self._latest
        names = program.layout.state_names
        pieces = host_pack(program.state_layout, state.leaves())
        return write_state_files(folder, state.step,
                                 {names[g]: arr for g, arr in pieces.items()})

    def params(self, state: TrainState):
        """The trained parameters as a JAX pytree."""
        return jax.tree_util.tree_map(jax.numpy.asarray, state.params)

    def export_params(self, state: TrainState, path) -> str:
        """Write the parameters (``self.params(state)``: the whole tree) to the safetensors
        file ``path`` atomically, one tensor per leaf named by its pytree path, keys joined
        by '/' (training/params_io.py); returns its absolute path."""
        from .params_io import save_params

        return save_params(path, self.params(state), {"step": str(state.step)})

    def load_params(self, path, like: TrainState, *, reset_optimizer: bool = False,
                    strict: bool = True) -> TrainState:
        """``like`` with its parameters read from the safetensors file ``path`` (as
        ``export_params`` writes it; checked leaf by leaf against ``like.params``). The
        optimizer state and step count are ``like``'s, or, with ``reset_optimizer``,
        ``optimizer.init`` of the loaded parameters and step 0."""
        state = TrainState.load_params(path, like, strict=strict)
        if reset_optimizer:
            state = TrainState(state.params, numpy_tree(self.optimizer.init(state.params)), 0)
        return state

    def fit(self, state: TrainState, batches: Iterable, steps: int, progress: bool = True):
        """Run ``steps`` steps over ``batches`` (an iterable of argument tuples, cycled);
        returns (state, loss history). When a step raises (a bad batch, a dead worker, a
        Ctrl-C), the exception carries ``.state`` (the TrainState after the last completed
        step, current on the device in mlstate mode) and ``.history``. ``progress`` shows a tqdm bar on stderr (redrawn
        on a terminal or in a notebook, a line at most every 30 s in a log)."""
        history: List[float] = []
        batches = list(batches)
        if not batches:
            raise ArgumentError("fit needs at least one batch")
        try:
            with progress_bar(steps, progress) as bar:
                for i in range(steps):
                    b = batches[i % len(batches)]
                    b = b if isinstance(b, tuple) else (b,)
                    out = self(state, *b)
                    state, loss = out[0], float(out[1])
                    history.append(loss)
                    bar.set_postfix_str(f"loss {loss:.5g}", refresh=False)
                    bar.update(1)
        except BaseException as e:  # an error or a Ctrl-C: the completed steps stay reachable
            done = getattr(e, "state", None)  # a step that completed under a held Ctrl-C
            if isinstance(done, TrainState) and done.step == state.step + 1:
                state = done
                history.append(float(np.asarray(e.value if not self.has_aux
                                                else e.value[0]).reshape(-1)[0]))
            e.state, e.history = state, history
            e.add_note(f"rlxjax: fit stopped after {len(history)} completed steps; the state "
                       "after the last one is on this exception's .state (step "
                       f"{state.step}), the losses on .history")
            raise
        return state, history

    def save(self, path, predict=None, *, functions=None, state=1,
             state_precision: str = "exact") -> str:
        """Save the training program last run (call the step once first). With
        ``predict=(fn, *example_inputs)`` the package is a multifunction ML Program (iOS18)
        with functions ``train_step`` (the default) and ``predict`` = ``fn(params,
        *inputs)``; in mlstate mode both use the same Core ML states, so predict reads the
        weights the latest step wrote (training/multifunction.py).

        ``functions={"prefill": (fn, cache, *example_inputs), "decode": ...}``: inference
        functions ``fn(params, cache, *inputs) -> (out, new_cache)`` beside ``train_step``,
        their ``cache`` (argument ``state``: a name or fn's position, default 1) in device
        state as ``coreml_jit(fn, state=...)`` keeps it (training/functions.py)."""
        if self._latest is None:
            raise RlxError("nothing to save yet: the program is compiled for a batch's shapes, "
                           "and none was given; pass an example batch to init "
                           "(st = step.init(params, x, y), which compiles) or call the step "
                           "once, then save")
        if functions is not None:
            if predict is not None:
                raise ArgumentError("pass predict= or functions=, not both")
            from .functions import save_train_functions

            return save_train_functions(self, self._latest, path, functions, state,
                                        state_precision)
        if predict is not None:
            from .multifunction import save_train_predict

            return save_train_predict(self, self._latest, path, predict)
        return self._latest.compiled.save(path)


def _refuse_rng_state(params) -> None:
    """PRNG keys and RNG counters are no trained parameters: say where they go."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        dtype = getattr(leaf, "dtype", None)
        if dtype is not None and (jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key) or
                                  dtype == np.uint32):
            raise ArgumentError(
                f"'{path_name('params', path)}' is {dtype}: params and optimizer state can "
                "hold only trained float arrays (and int32); pass PRNG keys and RNG counters "
                "in the batch (nnx: nnx.split(model, nnx.Param, nnx.RngState) and return the "
                "new RNG state as aux, docs/errors.md)")
