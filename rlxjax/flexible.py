"""Flexible shapes on the host side (docs/flexible.md).

The ``flexible=`` option of ``coreml_jit`` (axes named per argument, made symbolic with
``jax.export``) and the check of a call's sizes against a flexible program's inputs."""
from __future__ import annotations

from typing import Dict, List, Tuple

import jax

from .errors import ArgumentError


def fits(spec, shape) -> bool:
    """Whether ``shape`` has ``spec``'s rank and static dims (its flexible dims any size)."""
    return len(shape) == len(spec.shape) and all(
        isinstance(d, str) or d == s for d, s in zip(spec.shape, shape))


def check_sizes(specs, shapes) -> None:
    """The sizes a call gives the flexible dims: each within its bounds, and one size per
    symbol across the inputs; else an ArgumentError saying which."""
    seen: Dict[str, tuple] = {}
    for spec, shape in zip(specs, shapes):
        if not spec.flexible:
            continue
        for axis, (d, s) in enumerate(zip(spec.shape, shape)):
            if not isinstance(d, str):
                continue
            bd = spec.bounds[axis] if spec.bounds and spec.bounds[axis] else (1, -1)
            lo, hi = bd[0], bd[1]
            if len(bd) > 2 and s not in bd[2]:  # enumerated sizes
                raise ArgumentError(
                    f"argument '{spec.name}' axis {axis} ('{d}') is {s}, not one of the "
                    f"enumerated sizes {list(bd[2])} the program was compiled for; pass one "
                    "of those, or compile again with it added")
            if s < lo or (hi != -1 and s > hi):
                raise ArgumentError(
                    f"argument '{spec.name}' axis {axis} ('{d}') is {s}, outside the flexible "
                    f"range [{lo}, {'unbounded' if hi == -1 else hi}] the program was lowered "
                    "for; pass a size in range, or lower again with wider bounds")
            prev = seen.setdefault(d, (spec.name, axis, s))
            if prev[2] != s:
                raise ArgumentError(
                    f"the flexible size '{d}' is {prev[2]} in argument '{prev[0]}' (axis "
                    f"{prev[1]}) but {s} in '{spec.name}' (axis {axis}): one size per call")


def _axes_of(value, n_leaves: int, arg: str) -> List[dict]:
    """Per leaf of an argument, {axis: (lower, upper)} from a ``flexible=`` entry."""
    if isinstance(value, dict) and all(isinstance(k, int) for k in value):
        return [value] * n_leaves
    raise ArgumentError(f"flexible[{arg!r}] must map axis numbers to (lower, upper) bounds "
                        f"(upper None: unbounded), e.g. {{0: (1, 64)}}; got {value!r}")


def symbolic_structs(dyn, names, flexible) -> Tuple[list, Dict[str, tuple]]:
    """``dyn`` (the dynamic arguments) as ShapeDtypeStructs whose ``flexible`` axes are
    symbols: ``flexible`` maps an argument name to {axis: (lower, upper)} or {axis:
    [sizes]} (enumerated); the same bounds are one symbol, so arguments flexible alike
    share their size (a batch of inputs and labels). Also returns symbol -> enumerated
    sizes."""
    unknown = [k for k in flexible if k not in names]
    if unknown:
        raise ArgumentError(f"flexible= names {unknown}, which are not (non-static) "
                            f"arguments (they are: {list(names)})")
    by_bounds: Dict[tuple, str] = {}
    enumerated: Dict[str, tuple] = {}  # symbol -> its enumerated sizes
    constraints, dims_of = [], {}
    out = []
    for i, (name, arg) in enumerate(zip(names, dyn)):
        spec = flexible.get(name)
        leaves, tree = jax.tree_util.tree_flatten(arg)
        if spec is None:
            out.append(arg)
            continue
        per_leaf = _axes_of(spec, len(leaves), name)
        new_leaves = []
        for leaf, axes in zip(leaves, per_leaf):
            shape = list(leaf.shape)
            for axis, bd in axes.items():
                if not -len(shape) <= axis < len(shape):
                    raise ArgumentError(f"flexible[{name!r}]: axis {axis} is out of range for "
                                        f"an argument of shape {tuple(shape)}")
                if isinstance(bd, list):  # enumerated sizes
                    sizes = sorted({int(v) for v in bd})
                    if not sizes or sizes[0] < 1:
                        raise ArgumentError(f"flexible[{name!r}][{axis}]: enumerated sizes "
                                            f"must be ints >= 1, got {bd!r}")
                    lo, hi, key = sizes[0], sizes[-1], ("enum",) + tuple(sizes)
                else:
                    lo, hi = (bd if bd is not None else (1, None))
                    key = (int(lo), None if hi is None else int(hi))
                sym = by_bounds.get(key)
                if sym is None:
                    sym = by_bounds[key] = f"flex{len(by_bounds)}"
                    if key[0] == "enum":
                        enumerated[sym] = key[1:]
                    key = (int(lo), None if hi is None else int(hi))
                    if key[0] > 1:
                        constraints.append(f"{sym} >= {key[0]}")
                    if key[1] is not None:
                        constraints.append(f"{sym} <= {key[1]}")
                shape[axis % len(shape)] = sym
            new_leaves.append((shape, leaf))
        out.append(_Flex(tree, new_leaves))
    syms = sorted(by_bounds.values())
    if syms:
        values = jax.export.symbolic_shape(", ".join(syms), constraints=constraints)
        dims_of = dict(zip(syms, values))
    result = []
    for item in out:
        if not isinstance(item, _Flex):
            result.append(item)
            continue
        tree, new_leaves = item.tree, item.leaves
        structs = [jax.ShapeDtypeStruct(tuple(dims_of.get(d, d) for d in shape),
                                        _dtype(leaf)) for shape, leaf in new_leaves]
        result.append(jax.tree_util.tree_unflatten(tree, structs))
    return result, enumerated


class _Flex:
    """An argument with flexible axes, between the two passes of ``symbolic_structs``."""

    def __init__(self, tree, leaves):
        self.tree, self.leaves = tree, leaves


def _dtype(leaf):
    return leaf.dtype


def by_name(flexible, all_names) -> dict:
    """``flexible=`` with positions (ints) turned into argument names."""
    if not isinstance(flexible, dict):
        raise ArgumentError("flexible= must be a dict: argument name (or position) -> "
                            f"{{axis: (lower, upper)}}; got {type(flexible).__name__}")
    out = {}
    for k, v in flexible.items():
        if isinstance(k, int):
            if not 0 <= k < len(all_names):
                raise ArgumentError(f"flexible= position {k}: there are {len(all_names)} "
                                    "arguments")
            k = all_names[k]
        out[k] = v
    return out


def cache_key(structs) -> tuple:
    """What a call's program depends on when axes are flexible: each leaf's dtype and its
    dims, the flexible ones by symbol (not by the call's size)."""
    return tuple((tuple(str(d) for d in s.shape), str(s.dtype))
                 for s in jax.tree_util.tree_leaves(structs))
