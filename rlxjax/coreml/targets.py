"""Deployment targets: which MIL opset and model spec version each one means.

What each newer target adds that rlxjax uses: iOS16 fp16 program I/O (not used: the boundary
is fp32), iOS17 int8/uint8 tensors inside a program (``cast`` to them), iOS18 Core ML states,
iOS26 int8 program inputs and outputs (``INT8_IO``; below it, int8 travels as int32 at the
boundary). coremltools 9 defines no new MIL ops for iOS26 (its ops are the iOS18 ones).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TargetError
from ..formats import base


@dataclass(frozen=True)
class Target(base.Target):
    name: str
    opset: str          # MIL function opset / block specialisation key
    spec_version: int   # Model.specificationVersion
    order: int          # for "needs at least" comparisons

    def at_least(self, other: str) -> bool:
        return self.order >= TARGETS[other].order

    def require(self, minimum: str, feature: str) -> None:
        require(self, minimum, feature)


TARGETS = {
    "iOS15": Target("iOS15", "CoreML5", 6, 15),
    "iOS16": Target("iOS16", "CoreML6", 7, 16),
    "iOS17": Target("iOS17", "CoreML7", 8, 17),
    "iOS18": Target("iOS18", "CoreML8", 9, 18),
    "iOS26": Target("iOS26", "CoreML9", 10, 26),
}
_ALIASES = {"macOS12": "iOS15", "macOS13": "iOS16", "macOS14": "iOS17", "macOS15": "iOS18",
            "macOS26": "iOS26"}

#: the oldest target whose model interface carries int8 multi-arrays
INT8_IO = "iOS26"


def get_target(name: str) -> Target:
    key = _ALIASES.get(name, name)
    if key not in TARGETS:
        raise TargetError(f"unknown target {name!r}; choose one of "
                          f"{', '.join(list(TARGETS) + list(_ALIASES))}")
    return TARGETS[key]


def require(target: Target, minimum: str, feature: str) -> None:
    if not target.at_least(minimum):
        raise TargetError(f"{feature} needs target {minimum} or newer (you asked for "
                          f"{target.name}): pass target='{minimum}'")
