"""A function's output pytree structure as JSON, so that a loaded package returns what JAX does.

A package's outputs are flat features named after their pytree paths (``out``, ``out.0``,
``out.logits``: rlxjax/frontend/). ``from_names`` rebuilds a structure from those names
alone: one output named ``out`` is the array itself, ``out.<key>`` nests dicts, and a dict
whose keys are 0..n-1 is a tuple. That covers most functions and every package written
before the structure was saved. Where it would give a different structure (a list, a
namedtuple, ``None`` leaves, dict keys holding dots or digits), ``Compiled.save`` writes the
structure itself under ``rlxjax.tree`` (``describe``), and ``rebuild`` reads it back.
Custom pytree nodes (flax / equinox classes) are not described: their packages come back in
the name-built structure, as old packages do.
"""
from __future__ import annotations

import collections
import functools
from typing import Any, List, Optional, Sequence

import jax

LEAF = "*"


def describe(treedef) -> Optional[Any]:
    """JSON for ``treedef`` (None when it holds a node this module cannot describe)."""
    data = treedef.node_data()
    if data is None:
        return LEAF if treedef.num_leaves == 1 else None
    kind, aux = data
    kids = [describe(c) for c in treedef.children()]
    if any(k is None and c.num_nodes != 1 for k, c in zip(kids, treedef.children())):
        return None
    if kind is type(None):
        return {"none": True}
    if kind is dict:
        return {"dict": [str(k) for k in aux], "c": kids} if all(
            isinstance(k, str) for k in aux) else None
    if kind is tuple:
        return {"tuple": kids}
    if kind is list:
        return {"list": kids}
    if issubclass(kind, tuple) and hasattr(kind, "_fields"):
        return {"namedtuple": kind.__name__, "fields": list(kind._fields), "c": kids}
    return None


@functools.lru_cache(maxsize=None)
def _namedtuple(name: str, fields: tuple):  # one class per (name, fields): they compare
    return collections.namedtuple(name, fields)


def _build(desc, leaves):
    if desc == LEAF:
        return next(leaves)
    if "none" in desc:
        return None
    if "dict" in desc:
        return {k: _build(c, leaves) for k, c in zip(desc["dict"], desc["c"])}
    if "tuple" in desc:
        return tuple(_build(c, leaves) for c in desc["tuple"])
    if "list" in desc:
        return [_build(c, leaves) for c in desc["list"]]
    cls = _namedtuple(desc["namedtuple"], tuple(desc["fields"]))
    return cls(*(_build(c, leaves) for c in desc["c"]))


def rebuild(desc, leaves: Sequence) -> Any:
    """The pytree ``desc`` (from ``describe``) with ``leaves`` in order; a namedtuple comes
    back as a namedtuple of the same name and fields."""
    it = iter(leaves)
    out = _build(desc, it)
    if next(it, None) is not None:
        raise ValueError("more leaves than the structure holds")
    return out


def from_names(names: Sequence[str], leaves: Sequence, prefix: str = "out") -> Any:
    """The structure the leaf ``names`` spell (module doc), holding ``leaves``."""
    if list(names) == [prefix]:
        return leaves[0]
    root: dict = {}
    for name, leaf in zip(names, leaves):
        parts = name[len(prefix) + 1:].split(".") if name.startswith(prefix + ".") else [name]
        node = root
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = leaf

    def tupled(node):
        if not isinstance(node, dict):
            return node
        kids = {k: tupled(v) for k, v in node.items()}
        if list(kids) == [str(i) for i in range(len(kids))]:
            return tuple(kids.values())
        return kids

    return tupled(root)


def needs_saving(treedef) -> Optional[Any]:
    """``describe(treedef)`` when ``from_names`` would not give that structure back, else
    None (nothing to save: the names say it)."""
    desc = describe(treedef)
    if desc is None:
        return None
    from .frontend import path_name

    paths = [p for p, _ in jax.tree_util.tree_flatten_with_path(
        jax.tree_util.tree_unflatten(treedef, range(treedef.num_leaves)))[0]]
    names: List[str] = [path_name("out", p) for p in paths]
    if len(set(names)) != len(names):
        return desc
    again = from_names(names, list(range(len(names))))
    return None if describe(jax.tree_util.tree_structure(again)) == desc else desc


def record_tree(compiled) -> None:
    """Write ``compiled``'s output structure into its metadata (``rlxjax.tree``) where its
    output names do not spell it (``needs_saving``); not for a training step (its TrainState
    gives the structure) nor a program whose outputs the host completes (random draws)."""
    from . import metadata

    traced = compiled._traced  # noqa: SLF001 - the program's own pytree structures
    if metadata.TRAIN in compiled.metadata or traced.out_tree.num_leaves != len(
            compiled.output_specs) + len(traced.empty_out):
        return
    desc = needs_saving(traced.out_tree)
    if desc is not None:
        metadata.write(compiled.metadata, metadata.TREE, desc)
