"""rlxjax: compile JAX functions and training steps into Apple Core ML ML Programs."""
from ._version import __version__  # noqa: F401

import logging as _logging


class _NoRuntimeNotice(_logging.Filter):
    """Off macOS coremltools logs "Failed to load ..." for each runtime class at import.
    That is expected here (programs run on the reference backend), so drop exactly those
    import-time records; everything else coremltools logs still shows."""

    def filter(self, record):
        return "libcoremlpython" not in record.getMessage()


def _import_coremltools_quietly():
    handlers = [h for h in (_logging.lastResort, *_logging.getLogger().handlers) if h]
    notice = _NoRuntimeNotice()
    for h in handlers:
        h.addFilter(notice)
    try:
        import coremltools  # noqa: F401
    finally:
        for h in handlers:
            h.removeFilter(notice)


_import_coremltools_quietly()

from .errors import (  # noqa: E402
    ArgumentError, BackendUnavailableError, DynamicShapeError, RlxError, TargetError,
    UnsupportedDTypeError, UnsupportedPrimitiveError, ValidationError, ZeroSizeError,
)
from .api import Compiled, CoreMLFunction, Lowered, coreml_jit  # noqa: E402
from .grad_api import coreml_grad, coreml_value_and_grad  # noqa: E402
from .training import TrainState, TrainStep, coreml_train_step, export_inference  # noqa: E402
from .training import DynamicLossScale, MixedState  # noqa: E402
from .load import load  # noqa: E402
from . import lora  # noqa: E402,F401

__all__ = [
    "coreml_jit", "coreml_grad", "coreml_value_and_grad", "coreml_train_step",
    "export_inference", "load", "TrainState", "DynamicLossScale", "MixedState",
    "TrainStep", "Compiled", "CoreMLFunction", "Lowered",
    "RlxError", "ArgumentError", "BackendUnavailableError", "DynamicShapeError", "TargetError",
    "UnsupportedDTypeError", "UnsupportedPrimitiveError", "ValidationError", "ZeroSizeError",
]
