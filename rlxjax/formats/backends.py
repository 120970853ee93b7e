"""Backend names: which runtime runs a program, resolved without importing any.

* ``"reference"``: the reference MIL interpreter's general path, the oracle the tests
  compare with JAX; the default off macOS.
* ``"reference-fast"``: the same interpreter's accelerated path (bit-identical results).
* ``"coreml"``: Core ML's runtime (macOS only; the default there).

The runtimes themselves are in each format's folder (Core ML: rlxjax/coreml/backends.py and
the interpreter, rlxjax/coreml/interpreter/), reached through a format's
``Executable.runner`` and loader.
"""
from __future__ import annotations

import platform

from ..errors import BackendUnavailableError, RlxError

BACKENDS = ("reference", "reference-fast", "coreml")  # Core ML's (its registry entry)
REFERENCE_BACKENDS = ("reference", "reference-fast")


def is_macos() -> bool:
    return platform.system() == "Darwin"


def default_backend() -> str:
    return "coreml" if is_macos() else "reference"


def resolve_backend(name: str | None, format: str = "mlpackage") -> str:
    """``name`` checked against the backends of ``format`` (its registry entry); None: the
    first of them, or Core ML's runtime on macOS where it is one of them."""
    from . import REGISTRY

    runs = REGISTRY[format].backends
    if name is None:
        return "coreml" if "coreml" in runs and is_macos() else runs[0]
    if name not in runs:
        other = [e.name for e in REGISTRY.values() if name in e.backends]
        if other:
            raise RlxError(f"backend={name!r} runs format={other[0]!r} programs, not "
                           f"format={format!r} ones: compile with format={other[0]!r}, or "
                           f"choose one of {runs} or None")
        raise RlxError(f"unknown backend {name!r}; choose one of {runs} or None")
    if name == "coreml" and not is_macos():
        raise BackendUnavailableError(
            "backend='coreml' needs Core ML's runtime, which exists only on macOS "
            f"(this is {platform.system()}). Use backend='reference' (the numpy MIL "
            "interpreter) here, or save() the package and run it on a Mac or device.")
    return name
