"""Running compiled programs: the Core ML backend and the reference MIL interpreter."""
from .backends import (BACKENDS, REFERENCE_BACKENDS, default_backend, is_macos, make_backend,
                       reference_program, resolve_backend)

__all__ = ["BACKENDS", "REFERENCE_BACKENDS", "default_backend", "is_macos", "make_backend",
           "reference_program", "resolve_backend"]
