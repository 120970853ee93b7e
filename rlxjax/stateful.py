"""Stateful functions for inference: ``coreml_jit(fn, state="cache")`` (docs/stateful.md).

``fn(..., cache, ...)`` returns ``(out, new_cache)``, as flax's ``apply(..., mutable=
["cache"])`` does. The leaves of the state argument (a KV cache, a decode index) become the
program's *states*: the device keeps them between calls and each call updates them in
place, so the program takes the other arguments only and returns ``out`` only.

How the leaves are stored is the format's state codec (its registry entry's
``state_codec``, states/mlstate.py ``CODECS``), as for training states: Core ML states are
fp16, so the fp32 leaves go through the exact codec (three fp16 states holding small
integers; a float32 cache round-trips bit for bit) unless ``state_precision="fp16"`` opts in
to one rounded fp16 state (codec ``"f16"``: a third of the exact codec's memory; its error is
measured in docs/stateful.md); int32 leaves are three base-2048 digits. Core AI's states
hold fp32 and int32 as they are (``"plain"``), one state per leaf (``<argument>.f32.0.value``
...: a call writes the leaves it updates, no packed vector); with the other codecs all
leaves of one dtype share one packed vector per piece, named ``<argument>.f32.exp`` ...
(``StateLayout``).

What the format-neutral ``Program`` carries: ``Program.states`` maps each piece's graph
input name to the graph output written back into it (``new.<argument>.f32.exp``); the graph
decodes the pieces first and encodes the new values last. ``rlxjax.stateful`` (metadata.py)
records the layout for an app and for ``rlxjax.load``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional

import jax
import numpy as np

from . import metadata
from .errors import ArgumentError, RlxError
from .states import mlstate as _mls
from .states.mlstate import Layout
from .states.mlstate_graph import rewrite_to_states

PRECISIONS = ("exact", "fp16")


def state_position(fun, state, n_args: int, names) -> int:
    """The position of the state argument ``state`` (a name or a position) of ``fun``."""
    if isinstance(state, bool) or not isinstance(state, (int, str)):
        raise ArgumentError(f"state= names the argument that lives in device state, by name "
                            f"or position; got {state!r}")
    if isinstance(state, int):
        if not -n_args <= state < n_args:
            raise ArgumentError(f"state={state}, but the function is called with {n_args} "
                                "arguments")
        return state % n_args
    if state not in names:
        raise ArgumentError(f"state={state!r} is none of the function's arguments {names}")
    return names.index(state)


def check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise ArgumentError(f"state_precision must be one of {PRECISIONS}, got {precision!r}")


def codec_name(format_name: str, precision: str) -> str:
    """The codec (states/mlstate.py ``CODECS``) format ``format_name`` stores a state with
    at ``precision``: its own (exact), or "f16" for fp16 pieces rounded on request."""
    from . import formats

    check_precision(precision)
    own = formats.REGISTRY[format_name].state_codec
    return "f16" if own == "f16x3" and precision == "fp16" else own


@dataclass(frozen=True)
class StateLayout:
    """Where the leaves of the state argument live in the program's states."""

    argument: str        # the state argument's name ('cache')
    position: int        # its position among the function's arguments (static ones too)
    tree: Any            # its tree structure
    tensors: Layout      # states/mlstate.py: packed vectors and each leaf's slot

    @classmethod
    def of(cls, argument: str, position: int, value, codec: str) -> "StateLayout":
        paths, tree = jax.tree_util.tree_flatten_with_path(value)
        from .frontend import path_name

        names = [path_name(argument, p) for p, _ in paths]
        structs = [_struct(x, n) for (_, x), n in zip(paths, names)]
        mls = _mls
        # a codec storing the values as they are (Core AI's plain) keeps one state per leaf:
        # a decode step writes its KV cache leaves, not a packed vector concatenated anew
        tensors = mls.make_layout(names, ["state"] * len(names), structs, mls.CODECS[codec],
                                  prefix=argument, what="state=",
                                  instead="keep it out of the state argument",
                                  per_leaf=mls.CODECS[codec].name == mls.CODECS["plain"].name)
        if not tensors.slots:
            raise ArgumentError(f"state={argument!r}: the argument has no array leaves")
        return cls(argument, position, tree, tensors)

    def structs(self):
        """The state argument as a tree of ``jax.ShapeDtypeStruct``."""
        return jax.tree_util.tree_unflatten(self.tree, [
            jax.ShapeDtypeStruct(s.shape, np.dtype(s.dtype)) for s in self.tensors.slots])

    def bindings(self) -> Dict[str, str]:
        """``Program.states``: each piece's graph input -> the graph output written back."""
        return _mls.state_bindings(self.tensors)

    def pack(self, value) -> Dict[str, np.ndarray]:
        """Host: the state argument's value -> graph name -> the piece stored."""
        leaves, tree = jax.tree_util.tree_flatten(value)
        if tree != self.tree:
            raise ArgumentError(f"state '{self.argument}' has structure {self.tree}; got {tree}")
        for s, x in zip(self.tensors.slots, leaves):
            shape, dtype = np.shape(x), jax.dtypes.canonicalize_dtype(np.asarray(x).dtype)
            if tuple(shape) != s.shape or np.dtype(dtype).name != s.dtype:
                raise ArgumentError(f"state leaf '{s.name}' is {s.dtype}{list(s.shape)}; got "
                                    f"{np.dtype(dtype).name}{list(shape)}")
        return _mls.host_pack(self.tensors, leaves)

    def unpack(self, pieces: Dict[str, np.ndarray]):
        """Host: graph name -> piece -> the state argument's value (numpy leaves)."""
        return jax.tree_util.tree_unflatten(self.tree, _mls.host_unpack(self.tensors, pieces))

    def metadata(self, mil_names: Dict[str, str]) -> dict:
        """``rlxjax.stateful``: what an app needs to fill, keep and read the states."""
        t = self.tensors
        per_leaf = {"state_per_leaf": True} if t.per_leaf else {}
        return {"argument": self.argument, **t.codec.metadata(), **per_leaf,
                "states": [{"name": mil_names[g], "graph_name": g, "shape": list(shape),
                            "dtype": dt, "role": role}
                           for (g, role, _, dt), shape in zip(t.state_types(),
                                                              t.state_shapes())],
                "tensors": [{"name": s.name, "dtype": s.dtype, "shape": list(s.shape),
                             "offset": s.offset, "size": s.size} for s in t.slots]}


def _struct(x, name):
    if isinstance(x, jax.ShapeDtypeStruct):
        return jax.ShapeDtypeStruct(x.shape, jax.dtypes.canonicalize_dtype(x.dtype))
    try:
        arr = np.asarray(x)
    except TypeError:
        raise ArgumentError(f"state leaf '{name}' is {type(x).__name__}, not an array") from None
    return jax.ShapeDtypeStruct(arr.shape, jax.dtypes.canonicalize_dtype(arr.dtype))


def layout_from_metadata(row: dict) -> StateLayout:
    """The layout an ``rlxjax.stateful`` row describes (for rlxjax.load: its tree is the
    flat dict of leaf names)."""
    mls = _mls
    codec = {c.name: c for c in mls.CODECS.values()}.get(row.get("encoding"))
    if codec is None:
        from .errors import PackageError

        raise PackageError(f"rlxjax.stateful: unknown encoding {row.get('encoding')!r}")
    slots = tuple(mls.Slot(t["name"], "state", t["dtype"], tuple(t["shape"]), t["offset"], t["size"])
                  for t in row["tensors"])
    names = [s.name for s in slots]
    tree = jax.tree_util.tree_structure(dict.fromkeys(names, 0))
    # a dict flattens in sorted key order: keep the slots in that order
    order = sorted(range(len(slots)), key=lambda i: names[i])
    tensors = mls.Layout(tuple(slots[i] for i in order), 0, codec, row["argument"],
                         per_leaf=bool(row.get("state_per_leaf")))
    return StateLayout(row["argument"], -1, tree, tensors)


# -- the graph rewrite ----------------------------------------------------------------------
def to_states(traced, layout: StateLayout, dyn_index: int, other_states=()):
    """``traced`` of ``fn`` (returning ``(out, new_state)``) with the leaves of the state
    argument (the ``dyn_index``-th traced argument) made states: the program takes the
    other arguments and returns ``out``. ``other_states``: graph inputs that are states
    already (no argument leaves)."""
    from .ir import verify
    from .transforms.rewrite import dce

    n = len(layout.tensors.slots)
    args = traced.in_tree.children()
    if args[dyn_index] != layout.tree:
        raise RlxError(f"internal: state argument {args[dyn_index]} is not {layout.tree}")
    lo = sum(a.num_leaves for a in args[:dyn_index])
    hi = lo + n
    if traced.host is not None:
        raise ArgumentError(f"state={layout.argument!r} with random=: a stateful function "
                            "draws no random numbers yet (pass the draws as an argument)")
    kids = traced.out_tree.children()
    if len(kids) != 2 or kids[1] != layout.tree:
        raise ArgumentError(
            f"a function with state={layout.argument!r} returns (out, new_{layout.argument}), "
            f"new_{layout.argument} with the structure of '{layout.argument}' "
            f"({layout.tree}); it returned {traced.out_tree}")
    n_out = kids[0].num_leaves
    for i in range(lo, hi):
        if i in traced.dropped or i in traced.empty_in:
            name = layout.tensors.slots[i - lo].name
            raise ArgumentError(f"state leaf '{name}' is zero-size or never read: leave it "
                                "out of the state argument")
    if any(k >= n_out for k in traced.empty_out):
        raise ArgumentError(f"new_{layout.argument} has a zero-size leaf: Core ML has no "
                            "zero-size tensors; leave it out of the state argument")
    g = traced.graph
    where = traced.leaf_inputs()
    leaf_ins = [v for name, v in g.inputs if name not in other_states]
    in_vals = [leaf_ins[where[i]] for i in range(lo, hi)]
    out_vals = [v for _, v in g.outputs[len(g.outputs) - n:]]
    for s, v in zip(layout.tensors.slots, out_vals):
        if (tuple(v.type.shape), v.dtype.np.name) != (s.shape, s.dtype):
            raise ArgumentError(f"new state leaf '{s.name}' is {v.type}; the state holds "
                                f"{s.dtype}{list(s.shape)}")
    keep = len(g.outputs) - n
    g.outputs = [(_out_name(name), v) for name, v in g.outputs[:keep]] + g.outputs[keep:]
    rewrite_to_states(g, layout.tensors, in_vals, out_vals, keep)
    dce(g)
    verify(g)

    kept = [t for i, t in enumerate(traced.in_types) if not lo <= i < hi] \
        if len(traced.in_types) == traced.in_tree.num_leaves else traced.in_types
    rest = jax.tree_util.tree_structure(tuple(
        jax.tree_util.tree_unflatten(a, [0] * a.num_leaves)
        for i, a in enumerate(args) if i != dyn_index))
    return traced.derive(g, remove=range(lo, hi), in_tree=rest, out_tree=kids[0],
                         in_types=kept,
                         empty_out={k: e for k, e in traced.empty_out.items() if k < n_out})


def _out_name(name: str) -> str:
    """'out.0.logits' (the first of (out, new_state)) -> 'out.logits'."""
    return "out" + name[len("out.0"):] if name == "out.0" or name.startswith("out.0.") else name


# -- the host side ---------------------------------------------------------------------------
class StateValues:
    """The device state of a stateful function (``make_state``): the format's state handle
    and its layout. ``read()`` gives the state argument's current value (exactly what the
    device holds, decoded), ``write(value)`` sets it. Each call updates it in place."""

    def __init__(self, handle, layout: StateLayout, mil_names: Dict[str, str]):
        self.handle = handle
        self.layout = layout
        self._mil = mil_names  # graph name ('cache.f32.exp') -> state name

    def read(self):
        pieces = {g: np.asarray(self.handle.read_state(m)) for g, m in self._mil.items()}
        return self.layout.unpack(pieces)

    def write(self, value) -> None:
        for g, arr in self.layout.pack(value).items():
            self.handle.write_state(self._mil[g], arr)

    # the format's own handle API, for code that fills states by name
    def read_state(self, name):
        return self.handle.read_state(name)

    def write_state(self, name, value) -> None:
        self.handle.write_state(name, value)

    def __repr__(self):
        return f"StateValues({self.layout.argument!r}, states={list(self._mil.values())})"




def unwrap(state) -> Optional[object]:
    """The format's handle of ``state`` (a ``StateValues`` or a handle already)."""
    return state.handle if isinstance(state, StateValues) else state


def share(handle, backend) -> None:
    """Let ``backend`` run with ``handle``, a state made by another program that declares
    the same states (the reference interpreter checks that; Core ML's runtime binds a state
    only to the package it was made from: share states through one package,
    ``save_functions``)."""
    program = getattr(backend, "program", None)
    owner = getattr(handle, "owner", None)
    if program is not None and owner is not None and owner is not program and \
            hasattr(handle, "share_with"):
        handle.share_with(program)


# -- several functions, one package ----------------------------------------------------------
def save_functions(path, functions: Dict[str, Any], default: Optional[str] = None) -> str:
    """Write compiled functions (``{"prefill": compiled, "decode": compiled}``) as one
    package (Core ML: a multifunction ML Program, iOS18) with ``default`` (the first name
    when None) as its default function. The functions that have states must declare the
    same ones (the same state argument), so that one state serves them all; a constant the
    functions share (a weight) is stored once. ``rlxjax.load(path).function(name)`` runs
    each; ``make_state()`` of any of them is shared by all."""
    if not isinstance(functions, dict) or not functions:
        raise ArgumentError("save_functions(path, {name: compiled, ...}): a non-empty dict "
                            "of compiled functions (f.lower(*args).compile())")
    names = list(functions)
    for name, c in functions.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ArgumentError(f"function name {name!r} is not an identifier")
        if not hasattr(c, "executable"):
            raise ArgumentError(f"function '{name}' is {type(c).__name__}, not a compiled "
                                "function (f.lower(*args).compile())")
    default = names[0] if default is None else default
    if default not in functions:
        raise ArgumentError(f"default={default!r} is none of the functions {names}")
    fmts = {c.format.name for c in functions.values()}
    if len(fmts) != 1:
        raise ArgumentError(f"the functions are compiled to different formats {sorted(fmts)}")
    for name, c in functions.items():
        if c.target is not None:
            c.target.require("iOS18", f"a package of several functions ('{name}')")
    declared = {}
    for name, c in functions.items():
        if c.state_names:
            declared[name] = _declared_states(c)
    if len({tuple(v) for v in declared.values()}) > 1:
        a, b = list(declared)[:2]
        raise ArgumentError(
            f"functions '{a}' and '{b}' declare different states ({declared[a]} and "
            f"{declared[b]}): the functions of one package share one state, so each "
            "stateful function takes the same state argument")
    fmt = next(iter(functions.values())).format
    return fmt.save_functions([(n, c.executable) for n, c in functions.items()], default, path)


def wrap_loaded(handle, meta):
    """A loaded function's state: a ``StateValues`` when the function is stateful
    (``rlxjax.stateful``; ``read()`` gives a dict of leaf name -> array), else ``handle``."""
    row = metadata.read(meta, metadata.STATEFUL, None)
    if row is None:
        return handle
    return StateValues(handle, layout_from_metadata(row),
                       {r["graph_name"]: r["name"] for r in row["states"]})


def _declared_states(compiled):
    """(name, shape, dtype) of each state ``compiled`` declares (its ``rlxjax.io`` rows when
    the format writes them, else the names)."""
    rows = metadata.read(compiled.metadata, metadata.IO, {}).get("states", [])
    if rows:
        return sorted((r["mil_name"], tuple(r["shape"]), r["dtype"]) for r in rows)
    return sorted((n, None, None) for n in compiled.state_names)
