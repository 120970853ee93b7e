"""Writing ``.mlpackage`` folders atomically.

The package is built in a staging folder next to its destination and moved into place with
one rename (rlxjax/atomic.py: the staging scheme, the cleanup of killed writers' leftovers
and the atomic folder exchange shared with every file rlxjax writes), so a failure at any
point leaves either the previous package or nothing at ``path`` — never a half-written one.
"""
from __future__ import annotations

import os

from ..atomic import write_package
from ..errors import PackageError  # noqa: F401  (importable from here, as before)
from .ct_private import create_mlpackage

MLPACKAGE_SUFFIX = ".mlpackage"


def save_mlpackage(model, weights_dir: str | None, path: str | os.PathLike) -> str:
    weights = weights_dir if weights_dir and os.listdir(weights_dir) else None
    return write_package(path, MLPACKAGE_SUFFIX, "Core ML",
                         lambda staged: create_mlpackage(model, weights, staged))
