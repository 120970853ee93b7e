"""rlxjax: compile JAX functions and training steps into Apple Core ML ML Programs.

Importing rlxjax loads no format's libraries: coremltools is imported when a program is
first compiled or loaded (rlxjax/formats/)."""
from ._version import __version__  # noqa: F401

from .errors import (  # noqa: E402
    ArgumentError, BackendUnavailableError, DynamicShapeError, PackageError, RlxError,
    TargetError, UnsupportedDTypeError, UnsupportedPrimitiveError, ValidationError,
    ZeroSizeError,
)
from .api import Compiled, CoreMLFunction, Lowered, coreml_jit  # noqa: E402
from .grad_api import coreml_grad, coreml_value_and_grad  # noqa: E402
from .training import TrainState, TrainStep, coreml_train_step, export_inference  # noqa: E402
from .training import DynamicLossScale, MixedState  # noqa: E402
from .load import load  # noqa: E402
from .stateful import StateValues, save_functions  # noqa: E402
from . import lora  # noqa: E402,F401

__all__ = [
    "coreml_jit", "coreml_grad", "coreml_value_and_grad", "coreml_train_step",
    "export_inference", "load", "save_functions", "StateValues", "TrainState", "DynamicLossScale", "MixedState",
    "TrainStep", "Compiled", "CoreMLFunction", "Lowered",
    "RlxError", "ArgumentError", "BackendUnavailableError", "DynamicShapeError", "PackageError",
    "TargetError",
    "UnsupportedDTypeError", "UnsupportedPrimitiveError", "ValidationError", "ZeroSizeError",
]
