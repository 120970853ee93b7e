"""Core AI deployment targets: iOS 27 / macOS 27, the first OS with Core AI."""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import TargetError
from ..formats import base


@dataclass(frozen=True)
class Target(base.Target):
    name: str
    order: int

    def at_least(self, other: str) -> bool:
        """``other`` may also name an older OS (a Core ML target, 'iOS18', 'macOS15'): a
        feature the format-neutral code requires of it is there on every Core AI OS."""
        return self.order >= _os_order(other)

    def require(self, minimum: str, feature: str) -> None:
        if not self.at_least(minimum):
            raise TargetError(f"{feature} needs target {minimum} or newer (you asked for "
                              f"{self.name}): pass target='{minimum}'")


TARGETS = {"iOS27": Target("iOS27", 27)}
_ALIASES = {"macOS27": "iOS27"}
DEFAULT = "iOS27"


_MACOS = {12: 15, 13: 16, 14: 17, 15: 18}  # macOS -> the iOS of the same year


def _os_order(name: str) -> int:
    m = re.fullmatch(r"(iOS|macOS)(\d+)", name)
    if m is None:
        return get_target(name).order
    n = int(m.group(2))
    return _MACOS.get(n, n) if m.group(1) == "macOS" else n


def get_target(name: str) -> Target:
    key = _ALIASES.get(name, name)
    if key not in TARGETS:
        raise TargetError(f"unknown target {name!r} for format='aimodel'; choose one of "
                          f"{', '.join(list(TARGETS) + list(_ALIASES))} (Core AI needs iOS 27 "
                          "/ macOS 27)")
    return TARGETS[key]
