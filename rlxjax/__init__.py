"""rlxjax: compile JAX functions and training steps into Apple Core ML ML Programs."""
__version__ = "0.1.0.dev0"

from .errors import (  # noqa: E402
    ArgumentError, BackendUnavailableError, DynamicShapeError, RlxError, TargetError,
    UnsupportedDTypeError, UnsupportedPrimitiveError, ValidationError,
)
from .api import Compiled, CoreMLFunction, Lowered, coreml_jit  # noqa: E402

__all__ = [
    "coreml_jit", "Compiled", "CoreMLFunction", "Lowered",
    "RlxError", "ArgumentError", "BackendUnavailableError", "DynamicShapeError", "TargetError",
    "UnsupportedDTypeError", "UnsupportedPrimitiveError", "ValidationError",
]
