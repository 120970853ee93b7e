"""Core AI deployment targets: iOS 27 / macOS 27, the first OS with Core AI."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import TargetError
from ..formats import base


@dataclass(frozen=True)
class Target(base.Target):
    name: str
    order: int

    def at_least(self, other: str) -> bool:
        return self.order >= get_target(other).order

    def require(self, minimum: str, feature: str) -> None:
        if not self.at_least(minimum):
            raise TargetError(f"{feature} needs target {minimum} or newer (you asked for "
                              f"{self.name}): pass target='{minimum}'")


TARGETS = {"iOS27": Target("iOS27", 27)}
_ALIASES = {"macOS27": "iOS27"}
DEFAULT = "iOS27"


def get_target(name: str) -> Target:
    key = _ALIASES.get(name, name)
    if key not in TARGETS:
        raise TargetError(f"unknown target {name!r} for format='aimodel'; choose one of "
                          f"{', '.join(list(TARGETS) + list(_ALIASES))} (Core AI needs iOS 27 "
                          "/ macOS 27)")
    return TARGETS[key]
