"""jaxpr frontend: trace a JAX function and translate its jaxpr into an RLX graph."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np

from ..ir import Graph, TensorType, verify
from ..errors import UnsupportedDTypeError, ZeroSizeError
from . import rules  # noqa: F401  (registers the rules)
from . import flexible, hijax, nan_sign, uint32
from .custom_rules import CustomRules
from .interpreter import Lowering, aval_type
from .random.device import split as split_device
from .random.inputs import split as split_inputs
from .random.liveness import prune
from .registry import RULES
from .zerosize import EmptyIO, is_empty_type

__all__ = ["Traced", "trace", "path_name", "RULES"]


def _key_str(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def path_name(prefix: str, path) -> str:
    """'params' + (DictKey('Dense_0'), DictKey('kernel')) -> 'params.Dense_0.kernel'."""
    return ".".join([prefix] + [_key_str(k) for k in path])


def arg_names(fun: Callable, n: int) -> List[str]:
    """Names of the first n positional arguments of fun: the parameter names, and
    '<star>.<i>' for those that land in a ``*args`` parameter ('arg{i}' where unknown)."""
    names = [f"arg{i}" for i in range(n)]
    try:
        params = list(inspect.signature(fun).parameters.values())
    except (TypeError, ValueError):
        return names
    for i, p in enumerate(params[:n]):
        if p.kind == p.VAR_POSITIONAL:
            names[i:] = [f"{p.name}.{j}" for j in range(n - i)]
            break
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        names[i] = p.name
    return names


#: the tables of a ``Traced`` keyed by argument-leaf index, which ``Traced.derive`` moves
#: when leaves are removed: a new per-leaf fact is one more field named here
LEAF_TABLES = ("empty_in", "dropped", "u32_leaves", "nan_sign")


@dataclass
class Traced:
    graph: Graph
    in_tree: Any          # treedef of the dynamic args tuple
    out_tree: Any         # treedef of the result
    in_types: List[TensorType]
    # the custom derivative rules the graph's custom_vjp nodes name (custom_rules.py)
    custom_rules: CustomRules = field(default_factory=CustomRules)
    # zero-size leaves, not graph inputs / outputs: leaf index -> EmptyIO (zerosize.py);
    # empty_out counts the results the program gives (after the host's, random="inputs")
    empty_in: Dict[int, EmptyIO] = field(default_factory=dict)
    empty_out: Dict[int, EmptyIO] = field(default_factory=dict)
    # argument leaves that are not program inputs (dead PRNG keys and uint32 arrays,
    # random/liveness.py): leaf index in in_tree -> (name, shape, dtype); the graph's inputs
    # are the other leaves, in order
    dropped: Dict[int, Tuple[str, Tuple[int, ...], Any]] = field(default_factory=dict)
    # random="inputs": what the host computes on each call (random/inputs.py HostPart); its
    # program inputs are the graph inputs after the argument leaves'
    host: Any = None
    # argument leaves that are uint32 program inputs, carried as int32 (< 2**31 per call)
    u32_leaves: frozenset = frozenset()
    # float argument leaves whose values reach a top_k: leaf index -> where (nan_sign.py);
    # each call refuses a -NaN in them, which Core ML cannot rank as XLA does
    nan_sign: Dict[int, str] = field(default_factory=dict)

    @property
    def n_device_out(self) -> int:
        """How many result leaves the device gives (zero-size ones included): all but the
        host's (random="inputs")."""
        n = self.out_tree.num_leaves
        if self.host is None or all(k is None for k in self.host.outputs):
            return n  # (also after a transform replaced the results: none is the host's)
        return sum(1 for k in self.host.outputs if k is None)

    def derive(self, graph: Graph, *, remove: range = range(0), **fields) -> "Traced":
        """The program a transform derives from this one: ``graph``, with the argument leaves
        ``remove`` (a range of leaf indices) taken out - they are now weights, states or
        a dropped argument. Every per-leaf table (``LEAF_TABLES``) loses their entries and
        the later leaves' entries move down; ``host`` (random="inputs") moves with them when
        the leaves removed are the first ones. ``fields`` replace the others (``in_tree``,
        ``out_tree``, ``in_types``, ``empty_out``, ``host``, ...); the rest is carried.
        The one place a per-leaf fact is carried: grad_api.py, stateful.py, training/
        (program.py, frozen.py, multifunction.py) all derive through here."""
        bad = set(fields) & set(LEAF_TABLES)
        if bad:
            raise TypeError(f"internal: per-leaf tables {sorted(bad)} are carried, not given")
        n, stop = len(remove), remove.stop if remove else 0

        def move(i):
            return i - n if i >= stop else i

        new = {}
        for name in LEAF_TABLES:
            table = getattr(self, name)
            if isinstance(table, (set, frozenset)):
                new[name] = type(table)(move(i) for i in table if i not in remove)
            else:
                new[name] = {move(i): x for i, x in table.items() if i not in remove}
        if "host" not in fields and self.host is not None and remove:
            if remove.start != 0:
                raise TypeError("internal: random='inputs' host parts move only when the "
                                "first leaves are removed")
            new["host"] = self.host.shifted(n)
        kept = {f: getattr(self, f) for f in ("in_tree", "out_tree", "in_types",
                                              "custom_rules", "empty_out", "host")}
        return type(self)(graph, **{**kept, **new, **fields})

    def leaf_inputs(self) -> List[Optional[int]]:
        """For each argument leaf, the index of its graph input (None: dropped or empty)."""
        out, k = [], 0
        for i in range(self.in_tree.num_leaves):
            if i in self.dropped or i in self.empty_in:
                out.append(None)
            else:
                out.append(k)
                k += 1
        return out


def trace(fun: Callable, dyn_args: Sequence[Any], names: Sequence[str],
          random: Optional[str] = None) -> Traced:
    """Trace ``fun(*dyn_args)`` and translate it to a verified RLX graph.

    ``names`` gives one name per dynamic argument; leaves are named by pytree path under it.
    ``random``: None (live randomness is an error), "inputs" (random/inputs.py) or
    "device" (random/device.py).
    """
    sym_bounds = flexible.input_dims(dyn_args, names, path_name)  # flexible inputs
    closed, out_shape = jax.make_jaxpr(fun, return_shape=True)(*dyn_args)
    if hijax.needed(closed):  # flax nnx hijax Variables: their values (hijax.py)
        closed = hijax.lower(closed)
    leaves_with_paths, in_tree = jax.tree_util.tree_flatten_with_path(tuple(dyn_args))
    out_paths, out_tree = jax.tree_util.tree_flatten_with_path(out_shape)
    leaf_names = [path_name(names[path[0].idx], path[1:]) for path, _ in leaves_with_paths]
    # dead code (dead randomness above all) goes before any rule can refuse it
    closed, dropped = prune(closed, leaf_names, refuse=random is None)
    host = None
    if random == "inputs":
        closed, dropped, host = split_inputs(closed, leaf_names, dropped)
    elif random == "device":  # the draws made by Core ML's random ops (random/device.py)
        closed, dropped, host = split_device(closed, leaf_names, dropped)

    graph = Graph(getattr(fun, "__name__", "main"))
    ctx = Lowering(graph, CustomRules())
    inputs, values, empty_in, empty_out = [], [], {}, {}
    kept = [i for i in range(len(leaf_names)) if i not in dropped]
    host_ins = host.inputs if host is not None else []
    entries = [(i, leaf_names[i]) for i in kept] + [(None, h.name) for h in host_ins]
    for (leaf, name), var in zip(entries, closed.jaxpr.invars):
        # uint32 counters and indices: carried as int32, checked < 2**31 on each call
        carried = uint32.is_u32(var.aval)
        try:
            t = aval_type(var.aval, carry_u32=carried)
        except UnsupportedDTypeError as e:
            raise UnsupportedDTypeError(f"argument '{name}': {e}") from None
        if sym_bounds:  # a symbolic input dim carries its bounds (docs/flexible.md)
            t = t.with_shape(flexible.input_type_dims(var.aval.shape, sym_bounds))
        if is_empty_type(t):
            if leaf is None:
                raise ZeroSizeError(f"random='inputs': the host value {name} has zero size "
                                    f"({t}): Core ML has no zero-size tensors")
            # no data: an empty constant, not a program input
            empty_in[leaf] = EmptyIO(name, tuple(t.shape), np.dtype(var.aval.dtype).name)
            ctx.made_empty = True
            values.append(ctx.constant(empty_in[leaf].value()))
            continue
        inputs.append(graph.add_input(name, t))
        values.append(inputs[-1])
        if carried:
            ctx.u32_ranges[inputs[-1].id] = (0, uint32.LIMIT)
    u32_args = [leaf_names[i] for i, var in zip(kept, closed.jaxpr.invars)
                if uint32.is_u32(var.aval)]
    try:
        outs = ctx.eval_jaxpr(closed.jaxpr, closed.consts, values)
    except UnsupportedDTypeError as e:
        if not u32_args or "uint32" not in str(e):
            raise
        raise UnsupportedDTypeError(
            f"{e} The uint32 argument(s) {', '.join(repr(n) for n in u32_args)} are carried "
            "as int32 with values in [0, 2**31): arithmetic on them that may leave that "
            "range is refused; pass int32, or compile with random='inputs', which runs "
            "arithmetic on keys and uint32 arguments on the host") from None
    if host is not None:  # the results the host computes are no program outputs
        out_paths = [p for p, k in zip(out_paths, host.outputs) if k is None]
    for (path, _), var in zip(out_paths, closed.jaxpr.outvars):
        if uint32.is_u32(var.aval):
            raise UnsupportedDTypeError(
                f"output {path_name('out', path)} is uint32: Core ML has no uint32 tensors; "
                "cast it to int32 inside the function (uint32 is carried as int32 only "
                "inside a program, where its values are proven to fit)")
    for k, ((path, _), v, var) in enumerate(zip(out_paths, outs, closed.jaxpr.outvars)):
        if is_empty_type(v.type):  # known from its shape: the host makes it
            empty_out[k] = EmptyIO(path_name("out", path), tuple(v.type.shape),
                                   np.dtype(var.aval.dtype).name)
            continue
        graph.add_output(path_name("out", path), v)
    if ctx.made_empty:
        from ..transforms.rewrite import dce

        dce(graph)
    verify(graph)
    u32 = frozenset(i for i, var in zip(kept, closed.jaxpr.invars)
                    if uint32.is_u32(var.aval) and i not in empty_in)
    sign = {i: w for i, w in nan_sign.sensitive_args(closed.jaxpr, kept).items()
            if i not in empty_in}
    return Traced(graph, in_tree, out_tree, [v.type for v in inputs], ctx.custom_rules,
                  empty_in, empty_out, dropped, host, u32, sign)
