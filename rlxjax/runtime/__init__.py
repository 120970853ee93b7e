"""Deprecated alias of rlxjax.coreml.backends and rlxjax.coreml.interpreter (moved there).

Core ML's backends and reference MIL interpreter live under the Core ML format,
``rlxjax.coreml.backends`` and ``rlxjax.coreml.interpreter`` (issue 38).

``rlxjax.runtime`` (its names) and ``rlxjax.runtime.reference`` (with every submodule:
``rlxjax.runtime.reference.liveness``, ...) still import, as the very modules they moved
to, with a ``DeprecationWarning``; they go in a later release.
"""
import importlib
import pkgutil
import sys
import warnings

warnings.warn("rlxjax.runtime moved: import rlxjax.coreml.backends (make_backend, "
              "reference_program, ...) and rlxjax.coreml.interpreter (the reference MIL "
              "interpreter, was rlxjax.runtime.reference); rlxjax.runtime goes in a later "
              "release", DeprecationWarning, stacklevel=2)

from ..coreml import interpreter as _interpreter  # noqa: E402
from ..coreml.backends import (BACKENDS, REFERENCE_BACKENDS, default_backend,  # noqa: E402
                               is_macos, make_backend, reference_program, resolve_backend)
from ..coreml import backends  # noqa: E402,F401


def _alias(old: str, module) -> None:
    """``old`` (and each of its submodules) imports as ``module`` itself: one class per
    error, not a second copy of the interpreter."""
    sys.modules[old] = module
    for info in pkgutil.walk_packages(module.__path__, module.__name__ + "."):
        sub = importlib.import_module(info.name)
        sys.modules[old + info.name[len(module.__name__):]] = sub


_alias(__name__ + ".reference", _interpreter)
reference = _interpreter

__all__ = ["BACKENDS", "REFERENCE_BACKENDS", "default_backend", "is_macos", "make_backend",
           "reference_program", "resolve_backend"]
