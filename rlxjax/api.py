"""Public API: ``coreml_jit`` with JAX's conventions (``jit(f).lower(*args).compile()``)."""
from __future__ import annotations

import functools
import gc
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np

from . import calling, formats, metadata, stages, stateful
from .errors import ArgumentError, ZeroSizeError
from .frontend import Traced, arg_names
from .frontend.zerosize import interleave
from .ir import Graph
from .pytree_json import record_tree
from .signature import IOSpec


def _without_gc(fn):
    """Run ``fn`` with the cyclic garbage collector paused. Tracing a large model keeps
    many objects alive (JAX's and flax's and the graphs'), and every full collection walks
    all of them: collections during a compile made its time grow faster than the model
    (measured: 32 residual blocks 25% slower). Garbage made meanwhile is collected after."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper


class Compiled:
    """An ML Program ready to run and to save."""

    def __init__(self, traced: Traced, executable, backend: str, fmt, state_layout=None,
                 target=None):
        self._traced = traced
        self.state_layout = state_layout  # coreml_jit(fn, state=...): stateful.StateLayout
        self.target = target
        self.executable = executable  # the format's (formats/base.py)
        self.format = fmt
        self.input_specs: Tuple[IOSpec, ...] = executable.input_specs
        self.output_specs: Tuple[IOSpec, ...] = executable.output_specs
        self._backend_name = backend
        self._backend = None

    @property
    def spec(self):
        """The format's program object (Core ML: the ``Model_pb2.Model``)."""
        return self.executable.spec

    @property
    def _weights_dir(self):
        return self.executable.weights_dir

    @property
    def metadata(self):
        """The package metadata map (keys: rlxjax/metadata.py)."""
        return self.executable.metadata

    # -- running -------------------------------------------------------------------
    def _checked_args(self, leaves, treedef) -> list:
        """The leaves as canonical arrays, checked against the compiled signature
        (rlxjax/calling.py)."""
        if treedef != self._traced.in_tree:
            raise ArgumentError(
                f"arguments have structure {treedef}, but the program was compiled for "
                f"{self._traced.in_tree}")
        arrays = []
        specs = iter(self.input_specs)
        dropped = self._traced.dropped
        empty = self._traced.empty_in
        for i, leaf in enumerate(leaves):
            if i in dropped:  # a dead key / uint32 argument: checked, not passed
                name, shape, dtype = dropped[i]
                got_shape, got_dtype = calling.leaf_sig(leaf)
                if tuple(got_shape) != shape or got_dtype != dtype:
                    raise calling.mismatch("argument", name, got_shape, got_dtype, shape, dtype,
                                           note=" (an argument it does not read)", value=leaf)
                continue
            got_shape, got_dtype = calling.leaf_sig(leaf)
            if i in empty:  # a zero-size leaf: checked, not fed (zerosize.py)
                e = empty[i]
                if tuple(got_shape) != e.shape or got_dtype != np.dtype(e.dtype):
                    raise calling.mismatch("argument", e.name, got_shape, got_dtype, e.shape,
                                           e.dtype, value=leaf)
                continue
            spec = next(specs)
            if i in self._traced.u32_leaves:  # a counter / index: carried as int32
                arrays.append(calling.u32_as_i32(spec, leaf, got_shape, got_dtype))
                continue
            if not calling.fits(spec, got_shape, got_dtype):
                raise calling.mismatch("argument", spec.name, got_shape, got_dtype, spec.shape,
                                       spec.dtype, value=leaf)
            arr = calling.canonical(leaf)
            if i in self._traced.nan_sign:  # reaches a top_k: no -NaN (nan_sign.py)
                calling.check_nan_sign(spec.name, self._traced.nan_sign[i], arr)
            arrays.append(arr)
        calling.check_sizes(self.input_specs, [a.shape for a in arrays])
        return arrays

    def __call__(self, *args, state=None):
        """Run the program. A program with Core ML states (``state_names``) also takes
        ``state=``, a handle from ``make_state()`` that the call updates in place."""
        leaves, treedef = jax.tree_util.tree_flatten(tuple(args))
        arrays = self._checked_args(leaves, treedef)
        host = self._traced.host
        if host is not None:  # random="inputs": the draws, computed by JAX on the host
            drawn, host_outs = host.run(leaves)
            arrays = arrays + drawn
        backend = self._get_backend()
        feeds = {s.mil_name: s.to_feature(a) for s, a in zip(self.input_specs, arrays)}
        if bool(self.state_names) != (state is not None):
            raise ArgumentError(
                f"this program has states {list(self.state_names)}: pass "
                "state=compiled.make_state()" if self.state_names else
                "this program has no states: call it without state=")
        state = stateful.unwrap(state)
        if backend is None:  # every output is zero-size: nothing to run
            res = {}
        else:
            if state is not None:  # a state made by another program declaring the same
                stateful.share(state, backend)
            res = backend.run(feeds) if state is None else backend.run(feeds, state=state)
        outs = interleave(self._traced.n_device_out, self._traced.empty_out,
                          [s.from_feature(res[s.mil_name]) for s in self.output_specs])
        if host is not None:
            outs = host.merge(outs, host_outs)
        return jax.tree_util.tree_unflatten(self._traced.out_tree, outs)

    def _get_backend(self):
        if not self.output_specs and not self.state_names:
            return None  # a program with no outputs (all zero-size) is never run
        if self._backend is None:
            self._backend = self.executable.runner(self._backend_name)
        return self._backend

    @property
    def state_names(self) -> Tuple[str, ...]:
        """Names of the program's states (empty for a stateless program)."""
        return self.executable.state_names

    def make_state(self, value=None):
        """Fresh state buffers for this program (``MLModel.make_state()`` on Core ML; a
        zero-filled ``ReferenceState`` on the reference backend), with ``read_state(name)``
        and ``write_state(name, fp16 array)``. A stateful function's (``coreml_jit(fn,
        state=...)``) is a ``StateValues`` holding ``value`` (the state argument; default
        all zeros), read back exactly with ``read()``."""
        if not self.state_names:
            raise ArgumentError("this program has no states")
        handle = self._get_backend().make_state()
        if self.state_layout is None:
            if value is not None:
                raise ArgumentError("make_state(value) is for a stateful function "
                                    "(coreml_jit(fn, state=...))")
            return handle
        st = stateful.StateValues(handle, self.state_layout,
                                  self.executable.state_graph_names)
        if value is not None:
            st.write(value)
        return st

    # -- inspecting ----------------------------------------------------------------
    @property
    def graph(self) -> Graph:
        return self._traced.graph

    def save(self, path) -> str:
        """Write the ``.mlpackage`` atomically; returns its absolute path. Zero-size inputs
        and outputs are not Core ML features: the package lists them in its metadata
        (``rlxjax.empty``) and ``rlxjax.load`` takes and returns them."""
        if not self.output_specs and not self.state_names:
            raise ZeroSizeError(
                "every output of this program is zero-size (known from its shape), so it "
                "computes nothing, and a Core ML package needs at least one output: there "
                "is nothing to save")
        record_tree(self)  # where the names do not spell it: rlxjax.load returns JAX's pytree
        return self.executable.save(path)

    def validate(self):
        """Load the program back through its format's own loader (Core ML: coremltools'
        milproto frontend: type inference, const checks, declared output types). Returns
        that loader's program (coremltools' pymil Program)."""
        return self.executable.validate()

    def mil_ops(self):
        """Every operation of the program in program order, an op before those in its
        nested (cond / loop) blocks (Core ML: MIL ops, coreml/mil.py ``walk``)."""
        return self.executable.operations()

    def op_histogram(self, include_const: bool = False) -> Dict[str, int]:
        const = self.executable.const_op
        c = Counter(op.type for op in self.mil_ops() if include_const or op.type != const)
        return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))

    def cost_analysis(self) -> dict:
        """A static cost model (coreml/cost.py): totals ``mil_ops``, ``mil_consts``,
        ``flops``, ``bytes_read``, ``bytes_written``, ``weight_bytes``, ``rlx_nodes`` and
        ``ops``, one row per MIL op (type, name, flops, bytes read/written, block depth)."""
        return dict(self.executable.cost(), rlx_nodes=len(self.graph.nodes))

    def memory_analysis(self):
        """What a call needs in memory (rlxjax/memory.py): JAX's ``CompiledMemoryStats``
        fields (``argument_size_in_bytes``, ``output_size_in_bytes``, ``alias_size_in_bytes``
        - states updated in place -, ``temp_size_in_bytes``, ``peak_memory_in_bytes``) plus
        ``weight_size_in_bytes`` and ``state_size_in_bytes``, from the program's values and
        their liveness in the order the program lists its operations."""
        from .memory import analyse

        values = self.executable.memory_program()
        if values is None:
            raise ArgumentError(f"the {self.format.name} format does not describe its "
                                "program's values: no memory_analysis for it yet")
        return analyse(values)

    def as_text(self) -> str:
        """The program as text (Core ML: MIL, via coremltools' loader)."""
        return self.executable.as_text()


class Lowered:
    """A traced function as an RLX graph, not yet lowered to Core ML."""

    def __init__(self, traced: Traced, target, precision: str, backend: str,
                 states=None, enumerated=None, fmt=None, state_layout=None,
                 extra_metadata=None):
        self._traced = traced
        self.state_layout = state_layout
        #: keys the compile adds to the program's metadata (``metadata.describe``): a
        #: training package's predict function (``rlxjax.predict``), ...
        self.extra_metadata = dict(extra_metadata or {})
        self.format = formats.get() if fmt is None else fmt
        self.target = self.format.target(target)
        self.precision = precision
        self.backend = backend
        self.states = states  # graph input name -> output written back (states)
        self.enumerated = enumerated or {}  # flexible= sizes listed (enumerated shapes)

    @property
    def graph(self) -> Graph:
        return self._traced.graph

    def as_text(self) -> str:
        return str(self.graph)

    @_without_gc
    def compile(self, keep_weight_layout: bool = False) -> Compiled:
        """``keep_weight_layout``: constants are read in the layout they have (no
        transposed copy of a ``[K, N]`` kernel for MIL ``linear``), so a weight shared with
        another function of a multifunction package is stored once."""
        program, executable = stages.to_format(
            self._traced, self.format, self.target, self.precision, states=self.states,
            enumerated=self.enumerated, keep_weight_layout=keep_weight_layout)
        extra = dict(self.extra_metadata)
        if self.state_layout is not None:  # coreml_jit(fn, state=...): where its leaves live
            extra[metadata.STATEFUL] = self.state_layout.metadata(
                executable.state_graph_names)
        metadata.describe(executable, program, extra)  # the one place (metadata.py)
        return Compiled(self._traced, executable, self.backend, self.format,
                        self.state_layout, self.target)


@dataclass(frozen=True)
class Stage:
    """What a kind of compiled function does between trace and finish, handed to
    ``CoreMLFunction`` rather than overridden in a subclass (``coreml_grad``: the backward
    pass; a training package's ``predict``: parameters from the training states; an
    ``export_inference(compress=)``: parameters baked as weights). ``lower`` runs the
    stages of stages.py in order - structs, trace, ``transform``, finish - and calls
    nothing back. Each field takes the function's arguments ``args`` (static ones
    included); None keeps ``coreml_jit``'s own."""

    #: (traced, args) -> the Traced the program is made of (through ``Traced.derive``)
    transform: Callable[[Traced, tuple], Traced]
    #: n_args -> the names of the dynamic arguments (features); None: the function's own
    names: Optional[Callable[[int], List[str]]] = None
    #: args -> graph input name -> the graph output written back into it (None: written
    #: back by nothing; a state read only); None: ``state=``'s, if any
    states: Optional[Callable[[tuple], Optional[dict]]] = None
    #: args -> where a ``state=`` argument's leaves live (stateful.StateLayout); None:
    #: ``state=``'s, if any
    state_layout: Optional[Callable[[tuple], Any]] = None


class CoreMLFunction:
    """What ``coreml_jit`` returns: call it like the JAX function, or ``.lower(*args)``.
    ``stage``: what a kind of function does between trace and finish (``Stage``)."""

    def __init__(self, fun: Callable, static_argnums: Sequence[int], target,
                 precision: str, backend, random: Optional[str] = None, flexible=None,
                 format: str = formats.DEFAULT, state=None, state_precision: str = "exact",
                 stage: Optional[Stage] = None):
        self.fun = fun
        self.stage = stage
        self.state = state  # the argument that lives in device state (stateful.py)
        self.state_precision = state_precision
        self.format_name = format
        self.flexible = flexible  # {argument name or position: {axis: (lower, upper)}}
        self.static_argnums = tuple(sorted({int(i) for i in (
            static_argnums if isinstance(static_argnums, (tuple, list)) else (static_argnums,))}))
        self.target, self.backend = stages.resolve_options(target, precision, backend, random,
                                                           format)
        self.precision = precision
        self.random = random
        if state is not None:
            stateful.check_precision(state_precision)
        self._cache: Dict[Any, Compiled] = {}
        self.__wrapped__ = fun
        self.__name__ = getattr(fun, "__name__", "coreml_fn")
        self.__doc__ = getattr(fun, "__doc__", None)

    @property
    def format(self):
        """The format this function compiles to (rlxjax/formats/), loaded on first use."""
        return formats.get(self.format_name)

    def _split(self, args):
        n = len(args)
        for i in self.static_argnums:
            if i >= n:
                raise ArgumentError(f"static_argnums contains {i} but only {n} arguments given")
        static = {i: args[i] for i in self.static_argnums}
        dyn = [a for i, a in enumerate(args) if i not in static]
        return static, dyn

    def _names(self, n_args):
        if self.stage is not None and self.stage.names is not None:
            return self.stage.names(n_args)
        names = arg_names(self.fun, n_args)
        return [nm for i, nm in enumerate(names) if i not in self.static_argnums]

    @_without_gc
    def lower(self, *args, **kwargs) -> Lowered:
        if kwargs:
            raise ArgumentError("coreml_jit functions take positional arguments only; got "
                                f"keyword(s) {sorted(kwargs)}")
        static, dyn = self._split(args)

        def positional(*dyn_args):
            it = iter(dyn_args)
            full = [static[i] if i in static else next(it) for i in range(len(args))]
            return self.fun(*full)

        positional.__name__ = self.__name__
        names = self._names(len(args))  # flexible= axes -> symbolic dims (rlxjax/flexible.py)
        specs, enumerated = stages.structs(dyn, names, self.flexible, self.fun, len(args))
        traced = stages.trace(positional, specs, names, random=self.random, fmt=self.format)
        transform = self._to_states if self.stage is None else self.stage.transform
        traced = stages.finish(transform(traced, args))  # stages.py
        return Lowered(traced, self.target, self.precision, self.backend,
                       states=self._states(args), enumerated=enumerated, fmt=self.format,
                       state_layout=self._state_layout(args))

    def _to_states(self, traced: Traced, args) -> Traced:
        """``coreml_jit``'s own transform: the state argument's leaves become states
        (``state=``, stateful.py); without one, none."""
        layout = self._state_layout(args)
        if layout is None:
            return traced
        dyn_index = layout.position - sum(i < layout.position for i in self.static_argnums)
        return stateful.to_states(traced, layout, dyn_index)

    def _states(self, args):
        """The program's states: graph input name -> the graph output written back into
        it (the stage's, else ``state=``'s)."""
        if self.stage is not None and self.stage.states is not None:
            return self.stage.states(args)
        layout = self._state_layout(args)
        return None if layout is None else layout.bindings()

    def _state_layout(self, args):
        """``state=``: where the state argument's leaves live (stateful.StateLayout)."""
        if self.stage is not None and self.stage.state_layout is not None:
            return self.stage.state_layout(args)
        if self.state is None:
            return None
        names = arg_names(self.fun, len(args))
        pos = stateful.state_position(self.fun, self.state, len(args), names)
        if pos in self.static_argnums:
            raise ArgumentError(f"state={self.state!r} is a static argument")
        return stateful.StateLayout.of(names[pos], pos, args[pos],
                                       stateful.codec_name(self.format_name,
                                                           self.state_precision))

    def make_state(self, *args):
        """``state=``: compile for ``args`` (the state argument included) and return a
        device state holding the state argument's value (``Compiled.make_state``)."""
        if self.state is None:
            raise ArgumentError("make_state is for a stateful function: coreml_jit(fn, "
                                "state='cache')")
        layout = self._state_layout(args)
        compiled = self._compiled(args)
        return compiled.make_state(args[layout.position])

    def _key(self, args):
        static, dyn = self._split(args)
        treedef, sig = stages.signature(dyn, self._names(len(args)), self.flexible, self.fun,
                                        len(args))
        try:
            hash(tuple(static.items()))
        except TypeError:
            raise ArgumentError("static arguments must be hashable") from None
        return (tuple(static.items()), treedef, sig)

    def _compiled(self, args) -> Compiled:
        key = self._key(args)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._cache[key] = self.lower(*args).compile()
        return compiled

    def __call__(self, *args, state=None, **kwargs):
        if kwargs:
            raise ArgumentError("coreml_jit functions take positional arguments only; got "
                                f"keyword(s) {sorted(kwargs)}")
        if self.state is None and state is not None:
            raise ArgumentError("state= is for a stateful function: coreml_jit(fn, "
                                "state='cache')")
        if self.state is None:
            _, dyn = self._split(args)
            return self._compiled(args)(*dyn)
        if not isinstance(state, stateful.StateValues):
            raise ArgumentError(
                f"a function with state={self.state!r} is called without its state "
                f"argument and with state=st, st = f.make_state(*args) (or "
                "compiled.make_state(value))")
        pos = state.layout.position
        full = args[:pos] + (state.layout.structs(),) + args[pos:]
        compiled = self._compiled(full)
        _, dyn = self._split(full)
        dpos = pos - sum(i < pos for i in self.static_argnums)
        return compiled(*(dyn[:dpos] + dyn[dpos + 1:]), state=state)


def coreml_jit(fun: Callable | None = None, *, static_argnums=(), target: str | None = None,
               precision: str = "fp32", backend: str | None = None,
               random: str | None = None, flexible: dict | None = None,
               format: str = formats.DEFAULT, state=None, state_precision: str = "exact"):
    """Compile ``fun`` into a Core ML ML Program, like ``jax.jit``.

    Returns a callable that compiles once per input signature and runs on ``backend``
    ("coreml" on macOS, "reference" elsewhere by default); outputs come back as numpy arrays
    in the pytree structure JAX returns. ``.lower(*args)`` gives the RLX graph
    (``Lowered``), ``.lower(*args).compile()`` the ML Program (``Compiled``).

    ``random``: randomness whose result reaches no output is always removed; a live
    ``jax.random`` draw is an error by default. ``random="inputs"`` makes every live draw a
    program input that each call computes on the host with ``jax.random`` from the keys
    passed (bit for bit JAX's numbers; the package metadata ``rlxjax.random`` names each).
    ``random="device"`` makes every live draw a Core ML random op instead (the same
    distribution, Core ML's numbers, fresh on each call; the key is checked and ignored;
    frontend/random/device.py).

    ``flexible``: axes whose size may change between calls of one program (Core ML
    flexible inputs, docs/flexible.md): ``{argument name or position: {axis: (lower,
    upper)}}`` (upper None: unbounded), e.g. ``flexible={"x": {0: (1, 64)}}``. Axes given
    the same bounds share one size. ``.lower()`` also takes ``jax.ShapeDtypeStruct``s with
    ``jax.export.symbolic_shape`` dims for the same effect.

    ``format``: ``"mlpackage"`` (Core ML, the default; ``target`` default iOS17) or
    ``"aimodel"`` (Core AI, first slice: docs/coreai.md; target iOS27, backend "coreai",
    Apple's runtime; needs ``rlxjax[coreai]``).

    ``state``: the argument (name or position) whose leaves live in device state - a KV
    cache, a decode index (rlxjax/stateful.py, docs/stateful.md). ``fun`` returns ``(out,
    new_state)``; the program takes the other arguments and returns ``out``, updating the
    state in place: ``st = f.make_state(*args)``, then ``f(*other_args, state=st)``,
    ``st.read()``. Core ML (target iOS18) stores fp32 leaves exactly in three fp16 states
    each (``state_precision="exact"``) or rounded to one (``"fp16"``).
    """
    if fun is None:
        return lambda f: coreml_jit(f, static_argnums=static_argnums, target=target,
                                    precision=precision, backend=backend, random=random,
                                    flexible=flexible, format=format, state=state,
                                    state_precision=state_precision)
    if not callable(fun):
        raise ArgumentError(f"coreml_jit expects a callable, got {type(fun).__name__}")
    if state is not None and format == formats.DEFAULT:  # Core ML states: iOS18
        target = formats.resolve_target("iOS18" if target is None else target)
        target.require("iOS18", f"state={state!r} (Core ML states)")
    return CoreMLFunction(fun, static_argnums, target, precision, backend, random, flexible,
                          format=format, state=state, state_precision=state_precision)
