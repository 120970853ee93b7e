"""Parameters in and out as safetensors: ``step.export_params`` / ``TrainState.load_params``.

A params pytree is written as one safetensors file whose tensor names are the leaves'
pytree paths, keys joined by ``/`` (``{"Dense_0": {"kernel": k}}`` -> ``Dense_0/kernel``,
list and tuple positions as their index: ``layers/0/w``) - the names
``flax.traverse_util.flatten_dict(params, sep="/")`` gives, so a file moves between the
device, JAX (flax, equinox, plain dicts) and other tools (``safetensors.numpy.load_file``,
``safetensors.torch``) unchanged. A leaf that is a scalar is stored with shape ``[]``.

Loading takes the structure, shapes and dtypes from a pytree ``like`` and checks the file
against it leaf by leaf: a missing, extra, mis-shaped or mis-typed tensor is an
``ArgumentError`` naming it. Files are written atomically (rlxjax/atomic.py).
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Tuple

import jax
import numpy as np

from .. import atomic, metadata
from ..errors import ArgumentError

SEP = "/"
#: ``__metadata__`` entry naming the writer (safetensors metadata is str -> str)
FORMAT = metadata.PARAMS_FORMAT


def _key(k) -> str:
    for attr in ("key", "name", "idx"):
        if hasattr(k, attr):
            return str(getattr(k, attr))
    return str(k)


def leaf_names(tree) -> Tuple[List[str], List[object], object]:
    """(names, leaves, treedef) of ``tree``: each leaf's path, keys joined by '/'."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(tree)
    names = []
    for path, _ in flat:
        parts = [_key(k) for k in path]
        bad = [p for p in parts if SEP in p or not p]
        if bad:
            raise ArgumentError(
                f"parameter key {bad[0]!r} (at {jax.tree_util.keystr(path)}) is empty or "
                f"contains '{SEP}', which separates the keys of a safetensors tensor name: "
                "rename it")
        names.append(SEP.join(parts) if parts else "params")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ArgumentError(f"two parameter leaves have the same name {dup[0]!r} "
                            "(keys that differ only in type, e.g. 0 and '0'): rename one")
    return names, [x for _, x in flat], treedef


def save_params(path, params, metadata: Optional[Dict[str, str]] = None) -> str:
    """Write ``params`` (a pytree of arrays) to the safetensors file ``path`` atomically;
    returns its absolute path."""
    from safetensors.numpy import save

    names, leaves, _ = leaf_names(params)
    arrays = {}
    for name, x in zip(names, leaves):
        arr = np.asarray(x, order="C")  # (ascontiguousarray would make a scalar [1])
        if arr.dtype == object or arr.dtype.kind not in "biuf":
            raise ArgumentError(f"parameter '{name}' is {arr.dtype}: safetensors stores "
                                "bool, integer and float arrays")
        arrays[name] = arr
    meta = {"format": FORMAT, **{str(k): str(v) for k, v in (metadata or {}).items()}}
    data = save(arrays, metadata=meta)
    return os.path.abspath(atomic.write_bytes(path, data))


def load_params(path, like, *, strict: bool = True):
    """The params pytree stored in the safetensors file ``path``, in the structure of
    ``like`` (a pytree of arrays or ``jax.ShapeDtypeStruct``) and checked against it: every
    leaf of ``like`` must be in the file with its shape and dtype. ``strict``: the file may
    hold no other tensor (``strict=False`` ignores them, e.g. loading the trained subset
    of a file that also holds frozen weights)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            stored = load(f.read())
    except OSError as e:
        raise ArgumentError(f"cannot read parameters from {path}: {e}") from None
    except (SafetensorError, ValueError) as e:
        raise ArgumentError(f"{path} is not a safetensors file ({e})") from None
    return check_named(stored, like, path, strict=strict)


def check_named(stored: Dict[str, np.ndarray], like, where: str, *, strict: bool = True,
                hint: str = "pass strict=False to ignore them"):
    """The pytree of ``like`` built from ``stored`` (tensor name -> array, names as
    ``leaf_names`` gives them), checked leaf by leaf: a missing, mis-shaped or mis-typed
    tensor - or, with ``strict``, an extra one - is an ArgumentError naming it and
    ``where`` the tensors came from (a file, a Flower message)."""
    names, leaves, treedef = leaf_names(like)
    missing = [n for n in names if n not in stored]
    if missing:
        raise ArgumentError(f"{where} has no tensor '{missing[0]}' (missing: {missing[:5]}; "
                            f"it holds {sorted(stored)[:8]}): it was written for "
                            "another model")
    extra = sorted(set(stored) - set(names))
    if extra and strict:
        raise ArgumentError(f"{where} holds tensor '{extra[0]}' that the parameters do not "
                            f"have (extra: {extra[:5]}); {hint}")
    out = []
    for name, want in zip(names, leaves):
        arr = stored[name]
        shape = tuple(np.shape(want))
        dtype = np.dtype(want.dtype) if hasattr(want, "dtype") else np.asarray(want).dtype
        if arr.shape != shape or arr.dtype != dtype:
            raise ArgumentError(f"tensor '{name}' in {where} is {arr.dtype}{list(arr.shape)}, "
                                f"the parameter is {dtype}{list(shape)}")
        out.append(arr)
    return jax.tree_util.tree_unflatten(treedef, out)
