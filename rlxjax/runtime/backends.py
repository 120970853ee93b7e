"""Backends that run a compiled ML Program: Core ML itself (macOS) or the reference
numpy interpreter of MIL (any OS)."""
from __future__ import annotations

import platform
import shutil
import tempfile

from ..errors import BackendUnavailableError, RlxError

BACKENDS = ("reference", "coreml")


def is_macos() -> bool:
    return platform.system() == "Darwin"


def default_backend() -> str:
    return "coreml" if is_macos() else "reference"


def resolve_backend(name: str | None) -> str:
    name = default_backend() if name is None else name
    if name not in BACKENDS:
        raise RlxError(f"unknown backend {name!r}; choose one of {BACKENDS} or None")
    if name == "coreml" and not is_macos():
        raise BackendUnavailableError(
            "backend='coreml' needs Core ML's runtime, which exists only on macOS "
            f"(this is {platform.system()}). Use backend='reference' (the numpy MIL "
            "interpreter) here, or save() the package and run it on a Mac or device.")
    return name


class ReferenceBackend:
    def __init__(self, model, weights_dir):
        from .reference import ReferenceProgram

        self.program = ReferenceProgram(model, weights_dir)

    def make_state(self):
        return self.program.make_state()

    def run(self, feeds, state=None):
        return self.program.run(feeds, state=state)


class CoreMLBackend:  # pragma: no cover - exercised only on macOS
    def __init__(self, model, weights_dir):
        import coremltools as ct

        from ..coreml.package import save_mlpackage

        self._dir = tempfile.mkdtemp(prefix="rlxjax-coreml-")
        path = save_mlpackage(model, weights_dir, f"{self._dir}/model.mlpackage")
        self.model = ct.models.MLModel(path, compute_units=ct.ComputeUnit.ALL)

    def make_state(self):
        return self.model.make_state()  # ct.models.model.MLState: read_state / write_state

    def run(self, feeds, state=None):
        if state is None:
            return self.model.predict(feeds)
        return self.model.predict(feeds, state=state)

    def __del__(self):
        shutil.rmtree(getattr(self, "_dir", ""), ignore_errors=True)


def make_backend(name: str, model, weights_dir):
    name = resolve_backend(name)
    return (ReferenceBackend if name == "reference" else CoreMLBackend)(model, weights_dir)
