"""Reference backend: a numpy interpreter of Core ML ML Programs (MIL protobuf)."""
from .interpreter import ReferenceProgram, ReferenceRuntimeError

__all__ = ["ReferenceProgram", "ReferenceRuntimeError"]
