"""Core ML's side of ``compress=``: the oldest target whose MIL has the op that stores each
scheme. What a scheme stores and the values the program computes with are format-neutral
(rlxjax/compression/schemes.py, shared with Core AI); the ``constexpr_*`` ops that
decompress them are rlxjax/coreml/rules/constexpr.py's.
"""
from __future__ import annotations

from typing import Dict, Optional

from ..compression import schemes
from .targets import Target, get_target, require

#: scheme -> the oldest target whose MIL has the op that stores it
SCHEMES: Dict[str, str] = {"fp16": "iOS16", "int8": "iOS16", "int4": "iOS18",
                           "palettize4": "iOS16", "palettize8": "iOS16"}


def check_scheme(compress: Optional[str], target) -> None:
    """Refuse an unknown scheme (ArgumentError) or a target too old for it (TargetError)."""
    if compress is None:
        return
    schemes.check_name(compress)
    t = target if isinstance(target, Target) else get_target(target)
    require(t, SCHEMES[compress], f"compress={compress!r}")
