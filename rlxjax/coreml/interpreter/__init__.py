"""Reference backend: a numpy interpreter of Core ML ML Programs (MIL protobuf).

``ReferenceProgram`` (interpreter.py + ops/: one function per MIL op) is the oracle and the
default (backend ``"reference"``). ``AcceleratedProgram`` (accelerated/: program.py with
prepared.py and codegen.py) is the explicit speed option (backend ``"reference-fast"``): same
loading, checks and errors, bit-identical results, several times faster on training steps.
"""
from ... import coremltools_quiet  # noqa: F401  (first: coremltools, quietly)
from .accelerated import AcceleratedProgram
from .interpreter import ReferenceProgram, ReferenceRuntimeError
from .ops.random import seed_fresh_draws

__all__ = ["AcceleratedProgram", "ReferenceProgram", "ReferenceRuntimeError",
           "seed_fresh_draws"]
