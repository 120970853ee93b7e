"""``rlxjax.load``: a saved package (from rlxjax or its format's own tools), ready to run.

The package's format is found from its path (rlxjax/formats/: ``.mlpackage`` is Core ML's)
and its loader reads it; values in and out follow rlxjax/loaded.py, as ``Compiled.__call__``
takes and returns them.
"""
from __future__ import annotations

import os

from . import formats
from .errors import PackageError


def load(path, backend: str | None = None, function: str | None = None, *, flat: bool = False):
    """Load a saved package and return a callable running it on ``backend`` ("coreml" on
    macOS, "reference" elsewhere by default, for a ``.mlpackage``): ``m(x=..., ...)`` or
    ``m(x, ...)`` -> a dict keyed by output feature name. ``function``: which function of
    a multifunction package (default: its default function); the result's
    ``function(name)`` gives the others, sharing states.

    Raises ``PackageError`` for a missing or malformed package and
    ``ReferenceRuntimeError`` for a program the reference interpreter cannot run (it names
    the unsupported op).

    The result behaves like what saved it (rlxjax/loaded_step.py): a training step is called
    as the step (``loaded(state, *batch) -> (state, loss)``, ``fit``, exports), a function
    takes its JAX arguments and returns its pytree. ``.flat`` (or ``flat=True``) is the flat
    form an app sees: inputs by feature name or in order, a dict of outputs by name."""
    try:
        pkg = os.fspath(path)
    except TypeError:
        raise PackageError(f"expected a path, got {type(path).__name__}") from None
    loaded = formats.for_path(pkg).load(pkg, backend, function)
    if flat:
        return loaded
    from .loaded_step import structured

    return structured(loaded)
