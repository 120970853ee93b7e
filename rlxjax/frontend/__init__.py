"""jaxpr frontend: trace a JAX function and translate its jaxpr into an RLX graph."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Sequence

import jax
import numpy as np

from ..ir import Graph, TensorType, verify
from ..errors import DynamicShapeError, UnsupportedDTypeError
from . import rules  # noqa: F401  (registers the rules)
from . import uint32
from .custom_rules import CustomRules
from .interpreter import Lowering, aval_type
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


@dataclass
class Traced:
    graph: Graph
    in_tree: Any          # treedef of the dynamic args tuple
    out_tree: Any         # treedef of the result
    in_types: List[TensorType]
    # the custom derivative rules the graph's custom_vjp nodes name (custom_rules.py)
    custom_rules: CustomRules = field(default_factory=CustomRules)
    # zero-size leaves, not graph inputs / outputs: leaf index -> EmptyIO (zerosize.py)
    empty_in: Dict[int, EmptyIO] = field(default_factory=dict)
    empty_out: Dict[int, EmptyIO] = field(default_factory=dict)


def _refuse_symbolic_dims(dyn_args, names) -> None:
    """Symbolic dimensions (``jax.export.symbolic_shape``, shape polymorphism) enter
    through the inputs; a Core ML program here has static shapes, so refuse them there,
    naming the input, before any op meets one."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tuple(dyn_args))[0]:
        shape = getattr(leaf, "shape", None)
        if shape is None:
            continue
        dyn = [str(d) for d in shape if not isinstance(d, (int, np.integer))]
        if dyn:
            name = path_name(names[path[0].idx], path[1:])
            dtype = getattr(leaf, "dtype", "?")
            raise DynamicShapeError(
                f"input '{name}' has dynamic dimension(s) {', '.join(dyn)} ({dtype}"
                f"{list(map(str, shape))}): Core ML programs here need static shapes. Call "
                "the function with concrete arrays (coreml_jit compiles and caches one "
                "program per input shape), or lower one program per shape you need.")


def trace(fun: Callable, dyn_args: Sequence[Any], names: Sequence[str]) -> Traced:
    """Trace ``fun(*dyn_args)`` and translate it to a verified RLX graph.

    ``names`` gives one name per dynamic argument; leaves are named by pytree path under it.
    """
    _refuse_symbolic_dims(dyn_args, names)
    closed, out_shape = jax.make_jaxpr(fun, return_shape=True)(*dyn_args)
    leaves_with_paths, in_tree = jax.tree_util.tree_flatten_with_path(tuple(dyn_args))
    out_paths, out_tree = jax.tree_util.tree_flatten_with_path(out_shape)

    graph = Graph(getattr(fun, "__name__", "main"))
    ctx = Lowering(graph, CustomRules())
    inputs, values, empty_in, empty_out = [], [], {}, {}
    for k, ((path, _), var) in enumerate(zip(leaves_with_paths, closed.jaxpr.invars)):
        top, rest = path[0], path[1:]
        name = path_name(names[top.idx], rest)
        t = aval_type(var.aval)
        if is_empty_type(t):  # no data: an empty constant, not a program input
            empty_in[k] = EmptyIO(name, tuple(t.shape), np.dtype(var.aval.dtype).name)
            ctx.made_empty = True
            values.append(ctx.constant(empty_in[k].value()))
            continue
        inputs.append(graph.add_input(name, t))
        values.append(inputs[-1])
    outs = ctx.eval_jaxpr(closed.jaxpr, closed.consts, values)
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
    return Traced(graph, in_tree, out_tree, [v.type for v in inputs], ctx.custom_rules,
                  empty_in, empty_out)
