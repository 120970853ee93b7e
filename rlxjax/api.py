"""Public API: ``coreml_jit`` with JAX's conventions (``jit(f).lower(*args).compile()``)."""
from __future__ import annotations

import functools
import gc
import json
import tempfile
from collections import Counter
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import jax
import numpy as np

from .coreml.lower import IOSpec, lower_graph, sanitize
from .coreml.package import save_mlpackage
from .coreml.targets import get_target
from .coreml.validate import validate_model
from . import flexible
from .errors import ArgumentError, ZeroSizeError
from .frontend import Traced, arg_names, nan_sign, trace
from .frontend.zerosize import EMPTY_IO_KEY, interleave
from .ir import Graph
from .runtime import make_backend, resolve_backend
from .coreml.mil_cse import mil_cse
from .coreml.mil_linear_bias import fuse_linear_bias
from .transforms import pipeline
from .frontend.rules.random import reject_prng_key
from .frontend.random.inputs import check_mode as check_random_mode

#: package metadata key of a random="inputs" program: one row per host-computed input
RANDOM_METADATA_KEY = "rlxjax.random"


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


_CANONICAL = frozenset(np.dtype(t) for t in (
    np.float32, np.float16, np.int32, np.bool_, np.int8, np.uint8, np.int16, np.uint16,
    np.uint32))


def _canonical(x) -> np.ndarray:
    """A call argument as the array JAX would see (python scalars weakly typed, 64-bit
    types narrowed unless x64 mode is on, in which case the dtype check rejects them)."""
    if type(x) is np.ndarray and x.dtype in _CANONICAL:
        return x  # the common case, already what JAX would see (and never a PRNG key)
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        dt = {bool: np.bool_, int: np.int32, float: np.float32}[type(x)]
        return np.asarray(x, dtype=dt)
    reject_prng_key(x, "an argument")
    arr = np.asarray(x)
    return arr.astype(jax.dtypes.canonicalize_dtype(arr.dtype), copy=False)


def _is_key(x) -> bool:
    dtype = getattr(x, "dtype", None)
    return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)


def _leaf_sig(x):
    """(shape, dtype) of a call argument leaf as JAX sees it: a typed PRNG key keeps its
    key dtype (it is no program input; only a dead one compiles, frontend/randomness.py)."""
    if _is_key(x):
        return tuple(x.shape), x.dtype
    arr = _canonical(x)
    return arr.shape, arr.dtype


def _u32_as_i32(spec, leaf, shape, dtype) -> np.ndarray:
    """A uint32 argument the program carries as int32: its values must be < 2**31."""
    if shape != spec.shape or dtype != np.uint32:
        raise ArgumentError(
            f"argument '{spec.name}' is {dtype}{list(shape)}, but the program was compiled "
            f"for uint32{list(spec.shape)}; pass that shape and dtype, or call the "
            "coreml_jit function itself (it compiles once per signature)")
    arr = _canonical(leaf)
    if arr.size and int(arr.max()) > np.iinfo(np.int32).max:
        raise ArgumentError(
            f"argument '{spec.name}' holds {int(arr.max())} >= 2**31: Core ML has no uint32, "
            "and the program carries this uint32 argument as int32, which holds values "
            "below 2**31 only")
    return arr.astype(np.int32)


class Compiled:
    """An ML Program ready to run and to save."""

    def __init__(self, traced: Traced, model, weights_dir, in_specs, out_specs, backend,
                 keep_alive):
        self._traced = traced
        self.spec = model
        self._weights_dir = weights_dir
        self.input_specs: Tuple[IOSpec, ...] = tuple(in_specs)
        self.output_specs: Tuple[IOSpec, ...] = tuple(out_specs)
        self._backend_name = backend
        self._backend = None
        self._keep_alive = keep_alive  # owns the temporary weights folder

    # -- running -------------------------------------------------------------------
    def _checked_args(self, leaves, treedef) -> list:
        """The leaves as canonical arrays, checked against the compiled signature."""
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
                got_shape, got_dtype = _leaf_sig(leaf)
                if tuple(got_shape) != shape or got_dtype != dtype:
                    raise ArgumentError(
                        f"argument '{name}' is {got_dtype}{list(got_shape)}, but the program "
                        f"was compiled for {dtype}{list(shape)} (an argument it does not "
                        "read); pass that shape and dtype, or call the coreml_jit function "
                        "itself (it compiles once per signature)")
                continue
            got_shape, got_dtype = _leaf_sig(leaf)
            if i in empty:  # a zero-size leaf: checked, not fed (zerosize.py)
                e = empty[i]
                if tuple(got_shape) != e.shape or got_dtype != np.dtype(e.dtype):
                    raise ArgumentError(
                        f"argument '{e.name}' is {got_dtype}{list(got_shape)}, but the program "
                        f"was compiled for {e.dtype}{list(e.shape)}; pass that shape and "
                        "dtype, or call the coreml_jit function itself (it compiles once per "
                        "signature)")
                continue
            spec = next(specs)
            if i in self._traced.u32_leaves:  # a counter / index: carried as int32
                arrays.append(_u32_as_i32(spec, leaf, got_shape, got_dtype))
                continue
            if got_dtype != spec.dtype or (got_shape != spec.shape and not (
                    spec.flexible and flexible.fits(spec, got_shape))):
                raise ArgumentError(
                    f"argument '{spec.name}' is {got_dtype}{list(got_shape)}, but the program "
                    f"was compiled for {spec.dtype}{list(spec.shape)}; pass that shape and dtype, "
                    "or call the coreml_jit function itself (it compiles once per signature)")
            arr = _canonical(leaf)
            if i in self._traced.nan_sign:  # reaches a top_k: no -NaN (nan_sign.py)
                nan_sign.check(spec.name, self._traced.nan_sign[i], arr)
            arrays.append(arr)
        if any(s.flexible for s in self.input_specs):  # sizes in range, one per symbol
            flexible.check_sizes(self.input_specs, [a.shape for a in arrays])
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
                "this program has no Core ML states: call it without state=")
        if backend is None:  # every output is zero-size: nothing to run
            res = {}
        else:
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
            self._backend = make_backend(self._backend_name, self.spec, self._weights_dir)
        return self._backend

    @property
    def state_names(self) -> Tuple[str, ...]:
        """Names of the program's Core ML states (empty for a stateless program)."""
        return tuple(f.name for f in self.spec.description.state)

    def make_state(self):
        """Fresh state buffers for this program (``MLModel.make_state()`` on Core ML; a
        zero-filled ``ReferenceState`` on the reference backend), with ``read_state(name)``
        and ``write_state(name, fp16 array)``."""
        if not self.state_names:
            raise ArgumentError("this program has no Core ML states")
        return self._get_backend().make_state()

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
        return save_mlpackage(self.spec, self._weights_dir, path)

    def validate(self):
        """Load the program back through coremltools' milproto frontend (type inference,
        const checks, declared output types). Returns coremltools' pymil Program."""
        return validate_model(self.spec, self._weights_dir)

    def mil_ops(self):
        """Every MIL operation of the program in program order, an op before those in its
        nested (cond / loop) blocks (coreml/mil.py ``walk``)."""
        from .coreml.mil import function_block, operations

        return list(operations(function_block(self.spec, "main")))

    def op_histogram(self, include_const: bool = False) -> Dict[str, int]:
        c = Counter(op.type for op in self.mil_ops() if include_const or op.type != "const")
        return dict(sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))

    def cost_analysis(self) -> dict:
        """A static cost model (coreml/cost.py): totals ``mil_ops``, ``mil_consts``,
        ``flops``, ``bytes_read``, ``bytes_written``, ``weight_bytes``, ``rlx_nodes`` and
        ``ops``, one row per MIL op (type, name, flops, bytes read/written, block depth)."""
        from .coreml.cost import analyse

        return dict(analyse(self.spec), rlx_nodes=len(self.graph.nodes))

    def as_text(self) -> str:
        """The MIL program as text (via coremltools' loader)."""
        return str(self.validate())


def describe_empty_io(model, traced: Traced, in_specs, out_specs) -> None:
    """Record the zero-size leaves of ``traced`` (not Core ML features) in ``model``'s
    metadata, ``rlxjax.empty``: per leaf its position among the function's input / output
    leaves, name, feature-style name (unique among the model's features), shape and
    dtype. rlxjax.load reads it back to take and return them."""
    if not traced.empty_in and not traced.empty_out:
        return
    taken = {s.mil_name for s in tuple(in_specs) + tuple(out_specs)}

    def rows(empties):
        out = []
        for k in sorted(empties):
            e = empties[k]
            mil_name, n = sanitize(e.name), 1
            while mil_name in taken:
                mil_name, n = f"{sanitize(e.name)}_{n}", n + 1
            taken.add(mil_name)
            out.append({"position": k, "name": e.name, "mil_name": mil_name,
                        "shape": list(e.shape), "dtype": e.dtype})
        return out

    model.description.metadata.userDefined[EMPTY_IO_KEY] = json.dumps(
        {"inputs": rows(traced.empty_in), "outputs": rows(traced.empty_out)})


class Lowered:
    """A traced function as an RLX graph, not yet lowered to Core ML."""

    def __init__(self, traced: Traced, target: str, precision: str, backend: str,
                 states=None):
        self._traced = traced
        self.target = get_target(target)
        self.precision = precision
        self.backend = backend
        self.states = states  # graph input name -> output written back (Core ML states)

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
        tmp = tempfile.TemporaryDirectory(prefix="rlxjax-weights-")
        pipeline.run_passes(self.graph, pipeline.BEFORE_LOWERING, precision=self.precision)
        model, ins, outs = lower_graph(self.graph, self.target, self.precision, tmp.name,
                                       states=self.states,
                                       keep_weight_layout=keep_weight_layout)
        if self._traced.host is not None:  # random="inputs": what the host feeds, per input
            rows = self._traced.host.metadata()
            for row, spec in zip(rows, ins[len(ins) - len(rows):]):
                row["feature"] = spec.mil_name
            if hasattr(self._traced.host, "payload"):  # random="device": mode and draws
                rows = self._traced.host.payload(rows)
            model.description.metadata.userDefined[RANDOM_METADATA_KEY] = json.dumps(rows)
        if getattr(self, "enumerated", None):  # flexible= with listed sizes
            ins = flexible.describe_enumerated(model, ins, self.enumerated, self.target)
        describe_empty_io(model, self._traced, ins, outs)
        if self._traced.nan_sign:  # so that rlxjax.load checks them too
            where = self._traced.leaf_inputs()
            model.description.metadata.userDefined[nan_sign.METADATA_KEY] = json.dumps(
                {ins[where[i]].mil_name: w for i, w in self._traced.nan_sign.items()})
        mil_cse(model)  # exact: merges ops the rules emitted twice (e.g. norm statistics)
        fuse_linear_bias(model)  # exact: a constant bias add into the linear before it
        return Compiled(self._traced, model, tmp.name, ins, outs, self.backend, tmp)


class CoreMLFunction:
    """What ``coreml_jit`` returns: call it like the JAX function, or ``.lower(*args)``."""

    def __init__(self, fun: Callable, static_argnums: Sequence[int], target: str,
                 precision: str, backend, random: Optional[str] = None, flexible=None):
        self.fun = fun
        self.flexible = flexible  # {argument name or position: {axis: (lower, upper)}}
        self.static_argnums = tuple(sorted({int(i) for i in (
            static_argnums if isinstance(static_argnums, (tuple, list)) else (static_argnums,))}))
        get_target(target)  # fail early on an unknown target
        if precision not in ("fp32", "fp16"):
            raise ArgumentError(f"precision must be 'fp32' or 'fp16', got {precision!r}")
        self.target = target
        self.precision = precision
        self.backend = resolve_backend(backend)
        check_random_mode(random)
        self.random = random
        self._cache: Dict[Any, Compiled] = {}
        self.__wrapped__ = fun
        self.__name__ = getattr(fun, "__name__", "coreml_fn")
        self.__doc__ = getattr(fun, "__doc__", None)

    def _split(self, args):
        n = len(args)
        for i in self.static_argnums:
            if i >= n:
                raise ArgumentError(f"static_argnums contains {i} but only {n} arguments given")
        static = {i: args[i] for i in self.static_argnums}
        dyn = [a for i, a in enumerate(args) if i not in static]
        return static, dyn

    def _names(self, n_args):
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
        specs = jax.tree_util.tree_map(
            lambda x: jax.ShapeDtypeStruct(*_struct(x)) if not isinstance(x, jax.ShapeDtypeStruct)
            else x, list(dyn))
        enumerated = {}
        if self.flexible:  # named axes -> symbolic dims (rlxjax/flexible.py)
            specs, enumerated = self._flexible_structs(specs, len(args))
        traced = trace(positional, specs, self._names(len(args)), random=self.random)
        pipeline.run_passes(traced.graph, pipeline.BEFORE_AD)  # transforms/pipeline.py
        traced = self._transform(traced, args)
        pipeline.run_passes(traced.graph, pipeline.AFTER_AD)
        lowered = Lowered(traced, self.target, self.precision, self.backend,
                          states=self._states(args))
        lowered.enumerated = enumerated  # flexible= sizes listed: Core ML enumerated shapes
        return lowered

    def _flexible_structs(self, dyn, n_args):
        names = flexible.by_name(self.flexible, arg_names(self.fun, n_args))
        return flexible.symbolic_structs(dyn, self._names(n_args), names)

    def _transform(self, traced: Traced, args) -> Traced:
        """Hook for wrappers that rewrite the traced graph (coreml_grad)."""
        return traced

    def _states(self, args):
        """Hook for wrappers whose transform makes Core ML states (a train step with
        state="mlstate"): graph input name -> the graph output written back into it."""
        return None

    def _key(self, args):
        static, dyn = self._split(args)
        leaves, treedef = jax.tree_util.tree_flatten(dyn)
        if self.flexible:  # one program for every size of the flexible axes
            sig = flexible.cache_key(self._flexible_structs(jax.tree_util.tree_map(
                lambda x: x if isinstance(x, jax.ShapeDtypeStruct) else
                jax.ShapeDtypeStruct(*_struct(x)), list(dyn)), len(args))[0])
        else:
            sig = tuple(_leaf_sig(x) for x in leaves)
        try:
            hash(tuple(static.items()))
        except TypeError:
            raise ArgumentError("static arguments must be hashable") from None
        return (tuple(static.items()), treedef, sig)

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise ArgumentError("coreml_jit functions take positional arguments only; got "
                                f"keyword(s) {sorted(kwargs)}")
        key = self._key(args)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._cache[key] = self.lower(*args).compile()
        _, dyn = self._split(args)
        return compiled(*dyn)


def _struct(x):
    """(shape, dtype) to trace a leaf with: JAX's dtype (a PRNG key, uint32, ...); the
    frontend refuses those that are program inputs but no Core ML type, naming them."""
    shape, dtype = _leaf_sig(x)
    return tuple(shape), dtype


def coreml_jit(fun: Callable | None = None, *, static_argnums=(), target: str = "iOS17",
               precision: str = "fp32", backend: str | None = None,
               random: str | None = None, flexible: dict | None = None):
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
    frontend/random_device.py).

    ``flexible``: axes whose size may change between calls of one program (Core ML
    flexible inputs, docs/flexible.md): ``{argument name or position: {axis: (lower,
    upper)}}`` (upper None: unbounded), e.g. ``flexible={"x": {0: (1, 64)}}``. Axes given
    the same bounds share one size. ``.lower()`` also takes ``jax.ShapeDtypeStruct``s with
    ``jax.export.symbolic_shape`` dims for the same effect.
    """
    if fun is None:
        return lambda f: coreml_jit(f, static_argnums=static_argnums, target=target,
                                    precision=precision, backend=backend, random=random,
                                    flexible=flexible)
    if not callable(fun):
        raise ArgumentError(f"coreml_jit expects a callable, got {type(fun).__name__}")
    return CoreMLFunction(fun, static_argnums, target, precision, backend, random, flexible)
