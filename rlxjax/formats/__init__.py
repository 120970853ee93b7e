"""Formats: what a format-neutral program (rlxjax/program.py) is written as, and how it runs.

A format lowers a ``Program`` to its own representation, writes it as a package, loads a
package back and runs it (rlxjax/formats/base.py says what each must provide). The
registry below names each format's module, which is imported the first time the format is
used: ``import rlxjax`` and building a ``coreml_jit`` wrapper load no format's libraries
(coremltools for Core ML).

A new format is one folder (its lowering rules, package writer, loader, backends) with a
module that defines ``FORMAT`` (a ``base.Format``), and one entry here.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Dict

from ..errors import ArgumentError


@dataclass(frozen=True)
class Entry:
    name: str     # what ``format=`` names
    module: str   # the module defining ``FORMAT``, imported on first use
    targets: str  # a light module whose ``get_target(name)`` resolves target names
    default_target: str
    suffix: str   # a package's path suffix
    backends: tuple  # what runs its programs; the first the default (formats/backends.py)
    summary: str
    #: how its states hold fp32 / int32 training state (states/mlstate.py ``CODECS``)
    state_codec: str = "f16x3"
    #: whether it has random ops (``random="device"``)
    random_ops: bool = True
    #: training-step precisions it compiles (coreml_train_step's precision=)
    train_precisions: tuple = ("fp32", "mixed")
    #: whether it compiles flexible= shapes
    flexible: bool = True


#: every format rlxjax writes; the first is the default
REGISTRY: Dict[str, Entry] = {e.name: e for e in (
    Entry("mlpackage", "rlxjax.coreml.format", "rlxjax.coreml.targets", "iOS17", ".mlpackage",
          ("reference", "reference-fast", "coreml"),
          "Core ML ML Program (MIL protobuf + weight blob); runs on Core ML (macOS) or the "
          "reference MIL interpreter"),
    Entry("aimodel", "rlxjax.coreai.format", "rlxjax.coreai.targets", "iOS27", ".aimodel",
          ("coreai",),
          "Core AI program (MLIR coreai dialect bytecode; first slice: forward and gradient "
          "programs of dense models); runs on Apple's Core AI runtime (coreai-core)",
          state_codec="plain", random_ops=False),
)}
DEFAULT = next(iter(REGISTRY))

_loaded: dict = {}


def get(name: str = DEFAULT):
    """The format ``name`` (a ``base.Format``), its module imported on first use."""
    fmt = _loaded.get(name)
    if fmt is None:
        entry = REGISTRY.get(name)
        if entry is None:
            raise ArgumentError(f"unknown format {name!r}; choose one of "
                                f"{', '.join(map(repr, REGISTRY))}")
        fmt = _loaded[name] = importlib.import_module(entry.module).FORMAT
    return fmt


def resolve_target(target, name: str = DEFAULT):
    """``target`` (a name, or already a ``Target``) as format ``name``'s ``Target``, without
    loading the format's libraries: where a user's string enters, once; TargetError for an
    unknown name."""
    if hasattr(target, "at_least"):
        return target
    entry = REGISTRY.get(name)
    if entry is None:
        get(name)  # the unknown-format error
    return importlib.import_module(entry.targets).get_target(
        entry.default_target if target is None else target)


def for_path(path: str):
    """The format whose packages end like ``path`` (the default format for any other
    path: its loader says what it expected)."""
    base = os.fspath(path).rstrip("/" + os.sep)
    for entry in REGISTRY.values():
        if base.endswith(entry.suffix):
            return get(entry.name)
    return get(DEFAULT)
