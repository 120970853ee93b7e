"""Running compiled programs: the Core ML backend and the reference MIL interpreter."""
from .backends import BACKENDS, default_backend, is_macos, make_backend, resolve_backend

__all__ = ["BACKENDS", "default_backend", "is_macos", "make_backend", "resolve_backend"]
