"""Reading an ``.aimodel`` to run it: ``rlxjax.load`` of the Core AI format.

The folder is checked before anything of Apple's touches it - the runtime ends its process
on a corrupted ``main.mlirb`` (SIGABRT) and on a missing path (SIGSEGV) - so a missing,
truncated or tampered asset is a ``PackageError``: the three files must be there, and
``main.hash`` must be the SHA-256 of ``main.mlirb`` (as coreai-core writes it). Values in and
out are rlxjax/loaded.py's; calls run in a persistent worker process (worker.py).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat

import numpy as np

from .. import metadata, package_check
from ..errors import ArgumentError, PackageError
from ..loaded import LoadedFunction
from ..states.files import read_state_files
from .flexible import SHAPES, pick, read_rows
from .worker import CoreAIRunner

FILES = ("main.mlirb", "main.hash", "metadata.json")
_MAX_METADATA = 16 << 20


def _regular(path: str, name: str) -> os.stat_result:
    """The stat of ``path``/``name``, a regular file inside the package: a symlink (which
    could lead anywhere), a FIFO or a device is refused before anything opens it."""
    full = os.path.join(path, name)
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        raise PackageError(f"{path} lacks {name}: not a Core AI package, or a half-written "
                           "one") from None
    if stat.S_ISLNK(st.st_mode):
        raise PackageError(f"{full} is a symbolic link (to {os.readlink(full)!r}): a "
                           "package's files must lie inside it; refused")
    if not stat.S_ISREG(st.st_mode):
        raise PackageError(f"{full} is not a regular file; refused")
    return st


def _digest(path: str) -> bytes:
    h = hashlib.sha256()
    fd = os.open(os.path.join(path, "main.mlirb"), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.digest()


def _fingerprint(st: os.stat_result) -> tuple:
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def check_asset(path: str) -> tuple:
    """Refuse a folder that is not a whole, untampered ``.aimodel``; returns the SHA-256
    of its program (``main.mlirb``) and the file's fingerprint taken before it was read
    (so that a change during the read is seen at the next call)."""
    if not os.path.isdir(path):
        raise PackageError(f"no such Core AI package (an '.aimodel' folder): {path}")
    missing = [f for f in FILES if not os.path.lexists(os.path.join(path, f))]
    if missing:
        raise PackageError(f"{path} lacks {missing}: not a Core AI package, or a half-written "
                           "one")
    seen = {f: _regular(path, f) for f in FILES}
    digest = _digest(path)
    with open(os.path.join(path, "main.hash"), "rb") as f:
        stored = f.read(64)
    if stored != digest:
        raise PackageError(f"{path}: main.mlirb does not match main.hash (the program was "
                           "changed or truncated after it was written): refused")
    if os.path.getsize(os.path.join(path, "metadata.json")) > _MAX_METADATA:
        raise PackageError(f"{path}: metadata.json is implausibly large")
    return digest, _fingerprint(seen["main.mlirb"])


def _signatures(path: str) -> dict:
    """The asset's functions as its program declares them (ca_private.signatures)."""
    from . import ca_private

    try:
        return ca_private.signatures(path)
    except Exception as e:  # noqa: BLE001 - a hostile program is refused, never believed
        raise PackageError(f"{path}: cannot read the program's signature from main.mlirb "
                           f"({type(e).__name__}: {e}); refused") from None


def _creator_metadata(path: str) -> dict:
    """rlxjax's keys from ``metadata.json`` (read as JSON here: no runtime involved)."""
    try:
        with open(os.path.join(path, "metadata.json"), "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
        custom = meta.get("creatorDefinedMetadata", {})
        if not isinstance(custom, dict):
            raise TypeError("creatorDefinedMetadata is not an object")
    except (ValueError, TypeError, UnicodeDecodeError, AttributeError) as e:
        raise PackageError(f"{path}: metadata.json is malformed ({type(e).__name__}: {e})") \
            from None
    return {k: v for k, v in custom.items() if isinstance(v, str)}


class LoadedAIModel(LoadedFunction):
    """A saved ``.aimodel`` ready to run on Apple's Core AI runtime: ``m(x=...)`` -> dict.

    A multifunction asset (``step.save(path, predict=...)``) loads as its default function
    (or ``function=``); ``functions`` names them all, ``function(name)`` gives another,
    ``run(name, ...)`` calls one; every function runs in one worker process, so a state from
    ``make_state()`` is shared by all of them."""

    def __init__(self, path: str, backend=None, function=None, _family=None):
        if backend not in (None, "coreai"):
            raise ArgumentError(f"backend={backend!r}: an .aimodel runs on backend='coreai'")
        if _family is None:
            digest, seen = check_asset(path)
            _family = {"meta": _creator_metadata(path), "session": [None],
                       "digest": digest, "seen": seen, "signatures": _signatures(path)}
        self.path, self.backend = path, "coreai"
        package = _family["meta"]
        default, names = metadata.function_names(package)
        self.functions = names or ("main",)
        name = function or default or "main"
        if name not in self.functions:
            raise ArgumentError(f"{path} has functions {list(self.functions)}; "
                                f"function={name!r} is none of them")
        self.function_name = name
        self._family = _family
        self._family[name] = self
        meta = metadata.function_metadata(package, name)
        if metadata.IO not in meta:
            raise PackageError(f"{path} was not written by rlxjax (no {metadata.IO} metadata): "
                               "rlxjax.load reads the .aimodel packages rlxjax writes")
        self._describe(meta, (), ())
        self._state_rows = _state_rows(path, meta)
        self._shape_rows = _shape_rows(path, meta)
        self._check_program(name)

    def _check_program(self, name: str) -> None:
        """What the metadata says of function ``name`` against its Core AI graph(s)."""
        sigs, where = self._family["signatures"], f"{self.path} (function {name!r})"
        graphs = ([(r["function"], r["sizes"]) for r in self._shape_rows]
                  or [(name, {})])
        package_check.check_functions(where, [g for g, _ in graphs], list(sigs))
        for graph, sizes in graphs:
            sig = sigs[graph]
            package_check.check_specs(where, "inputs", self.input_specs, sig["inputs"], sizes)
            package_check.check_specs(where, "outputs", self.output_specs, sig["outputs"],
                                      sizes)
            package_check.check_states(where, self._state_rows, sig["states"])

    def _check_unchanged(self) -> None:
        """Refuse to run a program changed on disk since it was loaded and checked (a
        worker started later would load the changed file)."""
        fam = self._family
        try:
            now = _fingerprint(_regular(self.path, "main.mlirb"))
            if now != fam["seen"]:
                if _digest(self.path) != fam["digest"]:
                    raise PackageError(
                        f"{self.path}: main.mlirb changed since rlxjax.load checked it: "
                        "refused (load the package again to run the new program)")
                fam["seen"] = now
        except OSError as e:
            if isinstance(e, PackageError):
                raise
            raise PackageError(f"{self.path}: its program cannot be read any more "
                               f"({type(e).__name__}: {e}); load the package again") from None

    @property
    def state_names(self):
        return tuple(r["mil_name"] for r in self._state_rows)

    def _runner(self):
        shared = self._family["session"]  # one worker for every function of the asset
        states = [_Spec(r) for r in self._state_rows]
        if self._shape_rows:  # flexible: one Core AI function per enumerated shape
            runner = ShapeRunner(self.path, self._shape_rows, self.input_specs, states,
                                 session=shared[0])
        else:
            runner = CoreAIRunner(self.path, self.function_name, states, session=shared[0])
        shared[0] = runner.session
        return runner

    def _run(self, feeds, state=None):
        self._check_unchanged()
        return self._runner().run(feeds, state)

    def make_state(self, folder=None):
        """Zero states in the worker, with ``read_state(name)`` / ``write_state(name,
        array)``; pass an ``export_state`` folder to fill them from its files."""
        if not self.state_names:
            raise ArgumentError(f"{self.path} has no states")
        state = self._runner().make_state()
        if folder is not None:
            read_state_files(state, self.state_names, folder, optional=self._cache_states())
        return self._wrap_state(state)

    def function(self, name: str) -> "LoadedAIModel":
        if name not in self.functions:
            raise ArgumentError(f"{self.path} has functions {list(self.functions)}; "
                                f"{name!r} is none of them")
        return self._family.get(name) or LoadedAIModel(self.path, "coreai", name,
                                                       _family=self._family)

    def run(self, function: str, *args, state=None, **kwargs):
        """Call function ``function`` of the asset: ``m.run("predict", x, state=st)``."""
        return self.function(function)(*args, state=state, **kwargs)

    def __repr__(self):
        return (f"LoadedAIModel({self.path!r}, function={self.function_name!r}, "
                f"inputs={list(self.input_names)}, outputs={list(self.output_names)}, "
                "backend='coreai')")


class _Spec:
    def __init__(self, row):
        self.mil_name, self.shape, self.dtype = row["mil_name"], tuple(row["shape"]), row["dtype"]


def _state_rows(path: str, meta) -> list:
    rows = metadata.read(meta, metadata.STATES, [])
    try:
        for r in rows:
            str(r["mil_name"]), np.dtype(r["dtype"]), [int(d) for d in r["shape"]]
    except (KeyError, TypeError, ValueError) as e:
        raise PackageError(f"{path}: its {metadata.STATES} metadata is malformed "
                           f"({type(e).__name__}: {e})") from None
    return rows


class ShapeRunner(CoreAIRunner):
    """Runs the Core AI function of ``rows`` (flexible.py ``shape_rows``) that serves each
    call's sizes, all in one worker (one asset)."""

    def __init__(self, asset: str, rows, in_specs, state_specs=(), session=None):
        super().__init__(asset, rows[0]["function"], state_specs, session)
        self.rows, self.in_specs = list(rows), tuple(in_specs)

    def run(self, feeds, state=None):
        self.function = pick(self.rows, self.in_specs, feeds)
        return super().run(feeds, state)


def _shape_rows(path: str, meta) -> list:
    """The flexible function's Core AI functions by sizes (flexible.py ``SHAPES``)."""
    rows = read_rows(meta)
    try:
        for r in rows:
            str(r["function"]), {str(k): int(v) for k, v in r["sizes"].items()}
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise PackageError(f"{path}: its {SHAPES} metadata is malformed "
                           f"({type(e).__name__}: {e})") from None
    return rows


def load_asset(path, backend=None, function=None) -> LoadedAIModel:
    return LoadedAIModel(os.path.abspath(os.fspath(path)), backend, function)
