"""jaxpr frontend: trace a JAX function and translate its jaxpr into an RLX graph."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax

from ..ir import Graph, TensorType, verify
from ..errors import UnsupportedDTypeError, ZeroSizeError
from . import rules  # noqa: F401  (registers the rules)
from . import random_inputs, randomness, uint32
from .custom_rules import CustomRules
from .interpreter import Lowering, aval_type
from .registry import RULES

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


@dataclass
class Traced:
    graph: Graph
    in_tree: Any          # treedef of the dynamic args tuple
    out_tree: Any         # treedef of the result
    in_types: List[TensorType]
    # the custom derivative rules the graph's custom_vjp nodes name (custom_rules.py)
    custom_rules: CustomRules = field(default_factory=CustomRules)
    # argument leaves that are not program inputs (dead PRNG keys and uint32 arrays,
    # randomness.py): leaf index in in_tree -> (name, shape, dtype); the graph's inputs
    # are the other leaves, in order
    dropped: Dict[int, Tuple[str, Tuple[int, ...], Any]] = field(default_factory=dict)
    # random="inputs": what the host computes on each call (random_inputs.HostPart); its
    # program inputs are the graph inputs after the argument leaves'
    host: Any = None
    # argument leaves that are uint32 program inputs, carried as int32 (< 2**31 per call)
    u32_leaves: frozenset = frozenset()

    def leaf_inputs(self) -> List[Optional[int]]:
        """For each argument leaf, the index of its graph input (None: dropped)."""
        out, k = [], 0
        for i in range(self.in_tree.num_leaves):
            if i in self.dropped:
                out.append(None)
            else:
                out.append(k)
                k += 1
        return out


def trace(fun: Callable, dyn_args: Sequence[Any], names: Sequence[str],
          random: Optional[str] = None) -> Traced:
    """Trace ``fun(*dyn_args)`` and translate it to a verified RLX graph.

    ``names`` gives one name per dynamic argument; leaves are named by pytree path under it.
    ``random``: None (live randomness is an error) or "inputs" (random_inputs.py).
    """
    closed, out_shape = jax.make_jaxpr(fun, return_shape=True)(*dyn_args)
    leaves_with_paths, in_tree = jax.tree_util.tree_flatten_with_path(tuple(dyn_args))
    out_paths, out_tree = jax.tree_util.tree_flatten_with_path(out_shape)
    leaf_names = [path_name(names[path[0].idx], path[1:]) for path, _ in leaves_with_paths]
    # dead code (dead randomness above all) goes before any rule can refuse it
    closed, dropped = randomness.prune(closed, leaf_names, refuse=random is None)
    host = None
    if random == "inputs":
        closed, dropped, host = random_inputs.split(closed, leaf_names, dropped)

    graph = Graph(getattr(fun, "__name__", "main"))
    ctx = Lowering(graph, CustomRules())
    inputs = []
    kept = [name for i, name in enumerate(leaf_names) if i not in dropped]
    host_ins = host.inputs if host is not None else []
    for k, (name, var) in enumerate(zip(kept + [h.name for h in host_ins],
                                        closed.jaxpr.invars)):
        # uint32 counters and indices: carried as int32, checked < 2**31 on each call
        carried = uint32.is_u32(var.aval)
        try:
            t = aval_type(var.aval, carry_u32=carried)
        except UnsupportedDTypeError as e:
            raise UnsupportedDTypeError(f"argument '{name}': {e}") from None
        if t.is_static and t.size == 0:
            raise ZeroSizeError(f"input {name} has zero size ({t}): Core ML has no zero-size "
                                "tensors; leave it out of the arguments (or close over it)")
        inputs.append(graph.add_input(name, t))
        if carried:
            ctx.u32_ranges[inputs[-1].id] = (0, uint32.LIMIT)
    u32_args = [n for n, var in zip(kept, closed.jaxpr.invars) if uint32.is_u32(var.aval)]
    try:
        outs = ctx.eval_jaxpr(closed.jaxpr, closed.consts, inputs)
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
    for (path, _), v in zip(out_paths, outs):
        if v.type.is_static and v.type.size == 0:
            raise ZeroSizeError(f"output {path_name('out', path)} has zero size ({v.type}): "
                                "Core ML has no zero-size tensors; leave it out of the "
                                "results (its value is known from its shape)")
        graph.add_output(path_name("out", path), v)
    if ctx.made_empty:
        from ..transforms.rewrite import dce

        dce(graph)
    verify(graph)
    leaf_ids = [i for i in range(len(leaf_names)) if i not in dropped]
    u32 = frozenset(i for i, var in zip(leaf_ids, closed.jaxpr.invars)
                    if uint32.is_u32(var.aval))
    return Traced(graph, in_tree, out_tree, [v.type for v in inputs], ctx.custom_rules,
                  dropped, host, u32)
