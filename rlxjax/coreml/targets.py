"""Deployment targets: which MIL opset and model spec version each one means."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TargetError


@dataclass(frozen=True)
class Target:
    name: str
    opset: str          # MIL function opset / block specialisation key
    spec_version: int   # Model.specificationVersion
    order: int          # for "needs at least" comparisons

    def at_least(self, other: str) -> bool:
        return self.order >= TARGETS[other].order


TARGETS = {
    "iOS15": Target("iOS15", "CoreML5", 6, 15),
    "iOS16": Target("iOS16", "CoreML6", 7, 16),
    "iOS17": Target("iOS17", "CoreML7", 8, 17),
    "iOS18": Target("iOS18", "CoreML8", 9, 18),
}
_ALIASES = {"macOS12": "iOS15", "macOS13": "iOS16", "macOS14": "iOS17", "macOS15": "iOS18"}


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
