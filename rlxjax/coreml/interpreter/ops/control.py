"""const and identity."""
from __future__ import annotations

from .registry import register


@register("const")
def const(inputs):
    # The interpreter decodes attributes["val"] at load time; const just forwards it.
    return (inputs["val"],)


@register("identity")
def identity(inputs):
    return (inputs["x"],)
