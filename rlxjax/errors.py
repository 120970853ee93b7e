"""Public error types. Each says what went wrong and what to do; see docs/errors.md."""
from __future__ import annotations


class RlxError(Exception):
    """Base class of every error rlxjax raises on purpose."""


class UnsupportedPrimitiveError(RlxError, NotImplementedError):
    """A JAX primitive (or a parameter of one) that rlxjax cannot compile exactly."""

    def __init__(self, primitive: str, source: str | None = None, detail: str = "",
                 message: str | None = None):
        self.primitive = primitive
        self.source = source
        where = f" at {source}" if source else ""
        extra = f": {detail}" if detail else ""
        super().__init__(message or (
            f"JAX primitive '{primitive}'{where} is not supported by rlxjax{extra}. "
            "Rewrite that line with supported operations, or open an issue with this message."
        ))


class DynamicShapeError(RlxError, ValueError):
    """A dimension unknown at compile time reached the Core ML lowering."""


#: RLX ops named differently from the JAX primitive they come from (errors name the latter)
JAX_NAMES = {"convert": "convert_element_type", "select": "select_n", "gather_nd": "gather",
             "scatter_nd": "scatter", "conv": "conv_general_dilated", "while": "while_loop"}


def op_label(op: str) -> str:
    """An RLX op as an error names it: its JAX primitive, and the RLX op when that differs
    (``gather (RLX op gather_nd)``)."""
    jax_name = JAX_NAMES.get(op, op)
    return jax_name if jax_name == op else f"{jax_name} (RLX op {op})"


class UnsupportedDTypeError(RlxError, TypeError):
    """A dtype with no Core ML counterpart (int64, float64, complex, ...)."""


class ZeroSizeError(RlxError, ValueError):
    """A zero-size tensor (a dimension of 0) would reach a program input or output, or an
    op whose result rlxjax cannot fold to a constant: Core ML has no zero-size tensors."""


class TargetError(RlxError, ValueError):
    """The deployment target is unknown or too old for a feature the program needs."""


class ArgumentError(RlxError, TypeError):
    """A compiled function was called with the wrong number, shape or dtype of arguments."""


class BackendUnavailableError(RlxError, RuntimeError):
    """The requested backend cannot run on this machine (e.g. 'coreml' off macOS)."""


class ValidationError(RlxError, ValueError):
    """coremltools' own MIL loader rejected a program rlxjax produced (a bug in rlxjax)."""


class PackageError(RlxError, OSError):
    """A package that cannot be written or read (wrong suffix, not a folder, missing or
    malformed files or metadata)."""
