"""Backends that run a compiled ML Program: Core ML itself (macOS) or the reference
numpy interpreter of MIL (any OS).

Backend names:

* ``"reference"``: the reference interpreter's general path (``reference.ReferenceProgram``),
  one function per MIL op; the oracle the tests compare with JAX, and the default off macOS.
* ``"reference-fast"``: the same interpreter's accelerated path
  (``reference.AcceleratedProgram``): prepared numpy calls and generated straight-line code,
  bit-identical results (the test suite checks it), several times faster. An explicit option
  for training loops that want speed; nothing selects it implicitly.
* ``"coreml"``: Core ML's runtime (macOS only).
"""
from __future__ import annotations

import shutil
import tempfile

from ..formats.backends import (BACKENDS, REFERENCE_BACKENDS, default_backend,  # noqa: F401
                                is_macos, resolve_backend)


def reference_program(model, weights_dir, *, accelerated: bool = False,
                      function: str = "main"):
    """The reference interpreter loaded with ``function`` of ``model``: the oracle, or its
    accelerated path."""
    from .interpreter import AcceleratedProgram, ReferenceProgram

    return (AcceleratedProgram if accelerated else ReferenceProgram)(model, weights_dir,
                                                                      function=function)


class ReferenceBackend:
    accelerated = False

    def __init__(self, model, weights_dir):
        self.program = reference_program(model, weights_dir, accelerated=self.accelerated)

    def make_state(self):
        return self.program.make_state()

    def run(self, feeds, state=None):
        return self.program.run(feeds, state=state)


class AcceleratedReferenceBackend(ReferenceBackend):
    accelerated = True


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
    if name == "coreml":
        return CoreMLBackend(model, weights_dir)
    if name == "reference-fast":
        return AcceleratedReferenceBackend(model, weights_dir)
    return ReferenceBackend(model, weights_dir)
