"""Writing ``.mlpackage`` folders atomically.

The package is built in a staging folder next to its destination and moved into place with
one rename (rlxjax/atomic.py: the staging scheme, the cleanup of killed writers' leftovers
and the atomic folder exchange shared with every file rlxjax writes), so a failure at any
point leaves either the previous package or nothing at ``path`` — never a half-written one.
"""
from __future__ import annotations

import os

from ..atomic import replace_dir, staging_dir
from ..errors import PackageError
from .ct_private import create_mlpackage

MLPACKAGE_SUFFIX = ".mlpackage"


def save_mlpackage(model, weights_dir: str | None, path: str | os.PathLike) -> str:
    path = os.path.abspath(os.fspath(path))
    if not path.endswith(MLPACKAGE_SUFFIX):
        raise PackageError(f"a Core ML package path must end in {MLPACKAGE_SUFFIX}: {path}")
    if os.path.lexists(path) and (not os.path.isdir(path) or os.path.islink(path)):
        raise PackageError(f"{path} exists and is not a folder; refusing to replace it")
    with staging_dir(os.path.dirname(path)) as tmp_root:
        staged = os.path.join(tmp_root, "staged" + MLPACKAGE_SUFFIX)
        weights = weights_dir if weights_dir and os.listdir(weights_dir) else None
        create_mlpackage(model, weights, staged)
        replace_dir(staged, path)
    return path
