"""``rlxjax.load``: a saved package (from rlxjax or its format's own tools), ready to run.

The package's format is found from its path (rlxjax/formats/: ``.mlpackage`` is Core ML's)
and its loader reads it; values in and out follow rlxjax/loaded.py, as ``Compiled.__call__``
takes and returns them.
"""
from __future__ import annotations

import os

from . import formats
from .errors import PackageError


def load(path, backend: str | None = None, function: str | None = None):
    """Load a saved package and return a callable running it on ``backend`` ("coreml" on
    macOS, "reference" elsewhere by default, for a ``.mlpackage``): ``m(x=..., ...)`` or
    ``m(x, ...)`` -> a dict keyed by output feature name. ``function``: which function of
    a multifunction package (default: its default function); the result's
    ``function(name)`` gives the others, sharing states.

    Raises ``PackageError`` for a missing or malformed package and
    ``ReferenceRuntimeError`` for a program the reference interpreter cannot run (it names
    the unsupported op)."""
    try:
        pkg = os.fspath(path)
    except TypeError:
        raise PackageError(f"expected a path, got {type(path).__name__}") from None
    return formats.for_path(pkg).load(pkg, backend, function)
