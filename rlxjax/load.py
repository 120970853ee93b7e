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
    """Load a saved package (a Core ML ``.mlpackage`` or a Core AI ``.aimodel``) and return
    a callable running it on ``backend`` (for a ``.mlpackage``: "coreml" on macOS,
    "reference" elsewhere by default; an ``.aimodel`` runs on Apple's Core AI runtime in a
    worker process): ``m(x=..., ...)`` or
    ``m(x, ...)`` -> a dict keyed by output feature name. ``function``: which function of
    a multifunction package (default: its default function); the result's
    ``function(name)`` gives the others, sharing states.

    The package is checked before it is believed: its metadata against its program, its
    files inside its folder (docs/guarantees.md). Raises ``PackageError`` for a missing,
    malformed or tampered package and
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
    base = pkg.rstrip("/" + os.sep)
    suffixes = [f.suffix for f in formats.REGISTRY.values()]
    if not any(base.endswith(sfx) for sfx in suffixes) and not os.path.isfile(
            os.path.join(pkg, "Manifest.json")):  # a Core ML package by another name loads
        what = ("no such file or folder" if not os.path.lexists(pkg) else
                "not a package folder" if not os.path.isdir(pkg) else "not a package")
        raise PackageError(f"{pkg}: {what}. rlxjax.load reads a saved package: a Core ML "
                           "'.mlpackage' folder or a Core AI '.aimodel' folder (written by "
                           "Compiled.save or step.save)")
    loaded = formats.for_path(pkg).load(pkg, backend, function)
    if flat:
        return loaded
    from .loaded_step import structured

    return structured(loaded)
