"""Reading a ``.mlpackage`` (from rlxjax or coremltools) to run it: ``rlxjax.load`` of the
Core ML format.

The package's ``Manifest.json`` and model protobuf are read here (no ``libmodelpackage``),
so that malformed packages surface as ``PackageError`` (or, for a program the reference
interpreter cannot run, ``ReferenceRuntimeError``) rather than a crash. Values in and out
are rlxjax/loaded.py's (format-neutral); this module finds the function, its weights and
the backend that runs it, and shares states between the functions of one package.
"""
from __future__ import annotations

import json
import os
import stat
from typing import Dict, Optional, Tuple

import numpy as np

from .. import package_check
from ..errors import ArgumentError, PackageError, RlxError
from ..loaded import LoadedFunction
from ..states.files import read_state_files
from .backends import REFERENCE_BACKENDS, resolve_backend
from .multifunction import function_names, function_view
from .package import MLPACKAGE_SUFFIX

_MANIFEST = "Manifest.json"
_MAX_MANIFEST_BYTES = 1 << 20
_AUTHOR = "com.apple.CoreML"


def _within(path: str, root: str) -> bool:
    """Whether the real path of ``path`` is ``root``'s real path or below it."""
    full, base = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([full, base]) == base


def _inside(root: str, rel: str) -> str:
    """The real path of ``root``/``rel``, refusing paths that leave ``root`` (``..``,
    absolute paths, symlinks resolving elsewhere; ``root`` itself a symlink out of the
    package is refused by the caller)."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or os.path.isabs(rel):
        raise PackageError(f"manifest path {rel!r} is not a relative path")
    full = os.path.join(root, rel)
    if not _within(full, root):
        raise PackageError(f"manifest path {rel!r} points outside the package "
                           f"(to {os.path.realpath(full)!r}): refused")
    return os.path.realpath(full)


def _read_manifest(pkg: str) -> Tuple[str, Optional[str]]:
    """(model file, weights folder or None) of the package at ``pkg``."""
    mpath = os.path.join(pkg, _MANIFEST)
    if not os.path.isfile(mpath):
        raise PackageError(f"{pkg} has no {_MANIFEST}: not a Core ML package (or a "
                           "half-written one)")
    if not _within(mpath, pkg) or not stat.S_ISREG(os.stat(mpath).st_mode):
        raise PackageError(f"{mpath} is a link out of the package or no regular file: "
                           "refused")
    if os.path.getsize(mpath) > _MAX_MANIFEST_BYTES:
        raise PackageError(f"{mpath} is implausibly large ({os.path.getsize(mpath)} bytes)")
    try:
        with open(mpath, "rb") as f:
            manifest = json.loads(f.read().decode("utf-8"))
        entries = manifest["itemInfoEntries"]
        if not isinstance(entries, dict):
            raise TypeError("itemInfoEntries is not an object")
        model_rel = entries[manifest["rootModelIdentifier"]]["path"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise PackageError(f"{mpath} is malformed ({type(e).__name__}: {e})") from None
    data = os.path.join(pkg, "Data")
    if os.path.isdir(data) and not _within(data, pkg):
        raise PackageError(f"{pkg}: its Data folder is a link to {os.path.realpath(data)!r}, "
                           "outside the package: refused")
    model_file = _inside(data, model_rel)
    if not os.path.isfile(model_file):
        raise PackageError(f"{pkg}: the model file {model_rel!r} named by the manifest is missing")
    if not stat.S_ISREG(os.stat(model_file).st_mode):
        raise PackageError(f"{pkg}: the model file {model_rel!r} is no regular file: refused")
    weights = None
    for entry in entries.values():
        if (isinstance(entry, dict) and entry.get("name") == "weights"
                and entry.get("author", _AUTHOR) == _AUTHOR and "path" in entry):
            weights = _inside(data, entry["path"])
            break
    if weights is None:  # coremltools' convention: a 'weights' folder next to the model
        weights = os.path.join(os.path.dirname(model_file), "weights")
        if os.path.lexists(weights) and not _within(weights, data):
            raise PackageError(f"{pkg}: the weights folder is a link to "
                               f"{os.path.realpath(weights)!r}, outside the package: refused")
        weights = os.path.realpath(weights)
    return model_file, (weights if os.path.isdir(weights) else None)


def _blob_file_names(message):
    """Every ``BlobFileValue.fileName`` anywhere in a protobuf message (nested blocks,
    attributes, input bindings, tuple values)."""
    from coremltools.proto import MIL_pb2

    stack = [message]
    while stack:
        msg = stack.pop()
        if isinstance(msg, MIL_pb2.Value.BlobFileValue):
            yield msg.fileName
            continue
        for field, value in msg.ListFields():
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                entry_value = field.message_type.fields_by_name["value"]
                if entry_value.message_type is not None:
                    stack.extend(value.values())
            elif hasattr(value, "ListFields"):  # a message (protobuf-version independent)
                stack.append(value)
            else:  # a repeated message field
                stack.extend(value)


def _check_weight_references(pkg: str, model, weights_dir: Optional[str]) -> None:
    """Every weight file the program names lies inside the package's weights folder
    (whichever backend runs it: Core ML resolves ``@model_path`` itself)."""
    from .interpreter.values import ValueDecodeError, weight_file_path

    for name in set(_blob_file_names(model)):
        if weights_dir is None:
            raise PackageError(f"{pkg}: the program reads weight file {name!r} but the "
                               "package has no weights folder")
        try:
            full = weight_file_path(weights_dir, name)
        except ValueDecodeError as e:
            raise PackageError(f"{pkg}: {e}") from None
        if os.path.exists(full) and not stat.S_ISREG(os.stat(full).st_mode):
            raise PackageError(f"{pkg}: weight file {name!r} is no regular file: refused")


def _parse_model(model_file: str):
    from coremltools.proto import Model_pb2
    from google.protobuf.message import DecodeError

    with open(model_file, "rb") as f:
        data = f.read()
    model = Model_pb2.Model()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise PackageError(f"{model_file} is not a valid Core ML model protobuf "
                           f"({type(e).__name__}: {e}); the file is truncated or corrupted") from None
    return model


def program_rows(model, function: str, path: str):
    """(inputs, outputs) of ``function`` as its MIL program declares them (package_check.py
    rows: name, shape with None for an open dim, numpy dtype name); states left out."""
    from .interpreter.values import ValueDecodeError, tensor_signature
    from .mil import function_block

    def row(name, value_type):
        dtype, shape = tensor_signature(value_type)
        return name, tuple(shape) if shape is not None else (), np.dtype(dtype).name

    try:
        fn = model.mlProgram.functions[function]
        ins = [row(v.name, v.type) for v in fn.inputs
               if v.type.WhichOneof("type") != "stateType"]
        types = {v.name: v.type for v in fn.inputs}
        block = function_block(model, function)
        for op in block.operations:
            types.update((o.name, o.type) for o in op.outputs)
        outs = [row(n, types[n]) for n in block.outputs]
    except (KeyError, ValueDecodeError) as e:
        raise PackageError(f"{path}: the ML Program of function {function!r} is malformed "
                           f"({type(e).__name__}: {e})") from None
    return ins, outs


class LoadedModel(LoadedFunction):
    """A saved package ready to run: ``model(x=..., ...)`` or ``model(x, ...)`` -> dict.

    A multifunction package (``step.save(path, predict=...)``) loads as its default
    function (or ``function=``); ``functions`` names them all, ``function(name)`` gives
    another one, ``run(name, ...)`` calls one, and a state from ``make_state()`` is shared
    by all of them (each function declares the same states)."""

    def __init__(self, path, model, weights_dir, backend, function=None, _family=None):

        self.path = path
        self.functions = function_names(model)
        if len(model.description.functions):
            name = function or model.description.defaultFunctionName or self.functions[0]
            if name not in self.functions:
                raise ArgumentError(f"{path} has functions {list(self.functions)}; "
                                    f"function={name!r} is none of them")
            self.package_spec = model
            try:
                model = function_view(model, name)
            except (KeyError, ValueError, TypeError, AttributeError) as e:
                raise PackageError(f"{path}: the description or rlxjax.functions metadata of "
                                   f"function {name!r} is malformed ({type(e).__name__}: "
                                   f"{e})") from None
        elif function not in (None, "main"):
            raise ArgumentError(f"{path} is a single-function package (its function is "
                                f"'main'); function={function!r} is not it")
        else:
            name, self.package_spec = "main", model
        self.function_name = name
        self._family = {} if _family is None else _family  # function name -> LoadedModel
        self._family[name] = self
        self.spec = model
        self.weights_dir = weights_dir
        self._describe(model.description.metadata.userDefined,
                       (f.name for f in model.description.input),
                       (f.name for f in model.description.output))
        if self.input_specs is not None:  # rlxjax's metadata, checked against the program
            ins, outs = program_rows(model, name, path)
            where = path if name == "main" else f"{path} (function {name!r})"
            package_check.check_specs(where, "inputs", self.input_specs, ins)
            package_check.check_specs(where, "outputs", self.output_specs, outs)
        self.backend = resolve_backend(backend)
        if self.backend in REFERENCE_BACKENDS:
            from .backends import reference_program

            try:
                self._program = reference_program(
                    model, weights_dir, accelerated=self.backend == "reference-fast",
                    function=name)
            except RlxError:
                raise
            except Exception as e:  # noqa: BLE001 - a malformed program, never a crash
                raise PackageError(f"{path}: cannot load the ML Program "
                                   f"({type(e).__name__}: {e})") from e
            self._run = self._program.run
            if self.input_specs is None:
                self._feature_dtypes = {k: v[0] for k, v in self._program.input_signatures.items()}
        else:  # pragma: no cover - macOS only
            import coremltools as ct

            extra = {} if name == "main" else {"function_name": name}
            self._mlmodel = ct.models.MLModel(path, compute_units=ct.ComputeUnit.ALL, **extra)
            self._run = self._mlmodel.predict
            self._feature_dtypes = {}

    def memory_analysis(self):
        """What a call of this function needs in memory (``Compiled.memory_analysis``,
        rlxjax/memory.py), read from the package's program."""
        from ..memory import analyse
        from .memory import value_program

        return analyse(value_program(self.spec, self.function_name))

    @property
    def state_names(self) -> Tuple[str, ...]:
        """Names of the package's Core ML states (a ``state="mlstate"`` training step)."""
        return tuple(f.name for f in self.spec.description.state)

    def make_state(self, folder=None):
        """Fresh (zero) state buffers for a stateful package, with ``read_state(name)`` and
        ``write_state(name, fp16 array)`` (``MLModel.make_state()`` on Core ML); fill them
        from ``TrainStep.export_state`` files before the first call, or pass that folder:
        ``m.make_state(folder)``."""
        if not self.state_names:
            raise ArgumentError(f"{self.path} has no Core ML states")
        state = self._make_state()
        if folder is not None:
            read_state_files(state, self.state_names, folder, optional=self._cache_states())
        return self._wrap_state(state)

    def _make_state(self):
        if self.backend in REFERENCE_BACKENDS:
            return self._program.make_state()
        return self._mlmodel.make_state()  # pragma: no cover - macOS only

    def function(self, name: str) -> "LoadedModel":
        """Function ``name`` of this (multifunction) package, on the same backend; states
        made by any function of the package work with every one."""
        if name not in self.functions:
            raise ArgumentError(f"{self.path} has functions {list(self.functions)}; "
                                f"{name!r} is none of them")
        got = self._family.get(name)
        if got is None:
            got = LoadedModel(self.path, self.package_spec, self.weights_dir, self.backend,
                              function=name, _family=self._family)
        return got

    def run(self, function: str, *args, state=None, **kwargs) -> Dict[str, np.ndarray]:
        """Call function ``function`` of the package: ``m.run("predict", x, state=st)``."""
        return self.function(function)(*args, state=state, **kwargs)

    def _share(self, state) -> None:
        """A reference state made by another function of this package: let this one
        bind it too (the functions declare the same states)."""
        if self.backend not in REFERENCE_BACKENDS or len(self._family) < 2:
            return
        owner = getattr(state, "owner", None)
        if owner is None or owner is self._program:
            return
        if not any(getattr(m, "_program", None) is owner for m in self._family.values()):
            raise ArgumentError(
                "this state was made by another loaded package: the functions of one "
                "package share states when reached from one load, m = rlxjax.load(path); "
                "st = m.make_state(); m.function(name)(..., state=st)")
        state.share_with(self._program)

    def __repr__(self):
        fn = "" if self.function_name == "main" else f", function={self.function_name!r}"
        return (f"LoadedModel({self.path!r}{fn}, inputs={list(self.input_names)}, "
                f"outputs={list(self.output_names)}, backend={self.backend!r})")


def load_package(path, backend: str | None = None, function: str | None = None) -> LoadedModel:
    """Load a saved ``.mlpackage`` and return a callable running it on ``backend``
    ("coreml" on macOS, "reference" elsewhere by default). ``function``: which function
    of a multifunction package (default: its ``defaultFunctionName``); the result's
    ``function(name)`` gives the others, sharing states.

    Raises ``PackageError`` for a missing or malformed package and
    ``ReferenceRuntimeError`` for a program the reference interpreter cannot run (it names
    the unsupported op)."""
    try:
        pkg = os.path.abspath(os.fspath(path))
    except TypeError:
        raise PackageError(f"expected a path, got {type(path).__name__}") from None
    if not os.path.exists(pkg):
        raise PackageError(f"no such package: {pkg}")
    if not os.path.isdir(pkg):
        raise PackageError(f"{pkg} is not a folder; a Core ML package is a "
                           f"'*{MLPACKAGE_SUFFIX}' folder")
    model_file, weights = _read_manifest(pkg)
    model = _parse_model(model_file)
    _check_weight_references(pkg, model, weights)
    return LoadedModel(pkg, model, weights, backend, function=function)
