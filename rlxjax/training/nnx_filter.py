"""``trainable=`` as a flax.nnx filter (``nnx.LoRAParam``, ``nnx.Param``, ``"lora"``,
``nnx.PathContains("head")``, ``nnx.Any(...)``, ``nnx.Not(...)``, ...) when ``params`` holds
nnx Variables (``graphdef, params = nnx.split(model)``).

An ``nnx.State`` flattens with ``jax.tree_util`` to the arrays inside its Variables (paths
``(..., DictKey('kernel'), GetAttrKey('value'))``), so a filter is matched per Variable -
its nnx path (``('lora', 'lora_a')``) and the Variable itself, exactly as ``nnx.split(model,
filter, ...)`` partitions - and every array leaf of a Variable takes its flag. flax is only
looked at when the caller already imported it.
"""
from __future__ import annotations

import sys
from typing import List, Optional

import jax

from ..errors import ArgumentError


def _nnx():
    if "flax" not in sys.modules:
        return None
    try:
        from flax import nnx
    except ImportError:  # pragma: no cover - a flax without nnx
        return None
    return nnx


def _variable_types(nnx):
    kinds = [nnx.Variable]
    # older flax: split gives VariableStates (newer: a deprecated alias of Variable, which
    # the module's __getattr__ warns about - so look in its namespace only)
    vs = vars(nnx).get("VariableState")
    if isinstance(vs, type) and vs not in kinds:
        kinds.append(vs)
    return tuple(kinds)


def _is_filter(nnx, f) -> bool:
    fl = nnx.filterlib
    classes = tuple(c for c in (getattr(fl, n, None) for n in (
        "OfType", "Any", "All", "Not", "Everything", "Nothing", "PathContains", "PathIn",
        "WithTag")) if isinstance(c, type))
    if isinstance(f, type):
        return issubclass(f, _variable_types(nnx))
    if isinstance(f, (str, classes)) or f is Ellipsis:
        return True
    if isinstance(f, (list, tuple)) and f:
        return all(_is_filter(nnx, g) for g in f)
    return False


def _nnx_key(k):
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return getattr(k, attr)
    return k


def nnx_filter_mask(trainable, params) -> Optional[List[bool]]:
    """One bool per array leaf of ``params`` when ``trainable`` is an nnx filter and
    ``params`` holds nnx Variables; None otherwise (the other forms of ``trainable=``)."""
    if isinstance(trainable, dict):
        # never an nnx filter (``_is_filter``): a pytree of bools (``rlxjax.lora.TRAINABLE``);
        # flax.nnx is not imported for it (~1 s of a compile)
        return None
    nnx = _nnx()
    if nnx is None or not _is_filter(nnx, trainable):
        return None
    kinds = _variable_types(nnx)
    is_var = lambda x: isinstance(x, kinds)  # noqa: E731
    nodes = jax.tree_util.tree_flatten_with_path(params, is_leaf=is_var)[0]
    if not any(is_var(v) for _, v in nodes):
        raise ArgumentError(
            f"trainable={trainable!r} is an nnx filter, but params holds no nnx Variables: "
            "pass the nnx.State of the model (graphdef, params = nnx.split(model)), or for a "
            "plain pytree a pytree of bools or a callable (path, leaf) -> bool")
    pred = nnx.filterlib.to_predicate(trainable)
    mask = []
    for path, node in nodes:
        flag = bool(pred(tuple(_nnx_key(k) for k in path), node))
        mask.extend([flag] * len(jax.tree_util.tree_leaves(node)))
    return mask


__all__ = ["nnx_filter_mask"]
