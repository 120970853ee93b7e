"""Backend names: which runtime runs a program, resolved without importing any.

* ``"reference"``: the reference MIL interpreter's general path, the oracle the tests
  compare with JAX; the default off macOS.
* ``"reference-fast"``: the same interpreter's accelerated path (bit-identical results).
* ``"coreml"``: Core ML's runtime (macOS only; the default there).

The runtimes themselves are in rlxjax/runtime/ (backends.py), reached through a format's
``Executable.runner`` and loader.
"""
from __future__ import annotations

import platform

from ..errors import BackendUnavailableError, RlxError

BACKENDS = ("reference", "reference-fast", "coreml")  # Core ML's
#: format -> the backends that run its programs (the first the default, but for Core ML's
#: whose default depends on the OS)
FORMAT_BACKENDS = {"mlpackage": ("reference", "reference-fast", "coreml"),
                   "aimodel": ("coreai",)}
REFERENCE_BACKENDS = ("reference", "reference-fast")


def is_macos() -> bool:
    return platform.system() == "Darwin"


def default_backend() -> str:
    return "coreml" if is_macos() else "reference"


def resolve_backend(name: str | None, format: str = "mlpackage") -> str:
    """``name`` checked against the backends of ``format`` (None: its default)."""
    runs = FORMAT_BACKENDS.get(format, BACKENDS)
    if format != "mlpackage":
        name = runs[0] if name is None else name
        if name not in runs:
            raise RlxError(f"backend={name!r} cannot run a format={format!r} program; choose "
                           f"one of {runs} or None")
        return name
    name = default_backend() if name is None else name
    if name == "coreai":
        raise RlxError("backend='coreai' runs Core AI programs: compile with format='aimodel'")
    if name not in BACKENDS:
        raise RlxError(f"unknown backend {name!r}; choose one of {BACKENDS} or None")
    if name == "coreml" and not is_macos():
        raise BackendUnavailableError(
            "backend='coreml' needs Core ML's runtime, which exists only on macOS "
            f"(this is {platform.system()}). Use backend='reference' (the numpy MIL "
            "interpreter) here, or save() the package and run it on a Mac or device.")
    return name


