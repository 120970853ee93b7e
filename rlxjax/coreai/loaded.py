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

from .. import metadata
from ..errors import ArgumentError, PackageError
from ..loaded import LoadedFunction

FILES = ("main.mlirb", "main.hash", "metadata.json")
_MAX_METADATA = 16 << 20


def check_asset(path: str) -> None:
    """Refuse a folder that is not a whole, untampered ``.aimodel``."""
    if not os.path.isdir(path):
        raise PackageError(f"no such Core AI package (an '.aimodel' folder): {path}")
    missing = [f for f in FILES if not os.path.isfile(os.path.join(path, f))]
    if missing:
        raise PackageError(f"{path} lacks {missing}: not a Core AI package, or a half-written "
                           "one")
    with open(os.path.join(path, "main.mlirb"), "rb") as f:
        digest = hashlib.sha256(f.read()).digest()
    with open(os.path.join(path, "main.hash"), "rb") as f:
        stored = f.read()
    if stored != digest:
        raise PackageError(f"{path}: main.mlirb does not match main.hash (the program was "
                           "changed or truncated after it was written): refused")
    if os.path.getsize(os.path.join(path, "metadata.json")) > _MAX_METADATA:
        raise PackageError(f"{path}: metadata.json is implausibly large")


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
    """A saved ``.aimodel`` ready to run on Apple's Core AI runtime: ``m(x=...)`` -> dict."""

    def __init__(self, path: str, backend=None, function=None):
        if backend not in (None, "coreai"):
            raise ArgumentError(f"backend={backend!r}: an .aimodel runs on backend='coreai'")
        if function not in (None, "main"):
            raise ArgumentError(f"{path} has one function, 'main'; function={function!r} "
                                "is not it")
        check_asset(path)
        self.path, self.backend, self.function_name = path, "coreai", "main"
        self.functions = ("main",)
        meta = _creator_metadata(path)
        if metadata.IO not in meta:
            raise PackageError(f"{path} was not written by rlxjax (no {metadata.IO} metadata): "
                               "rlxjax.load reads the .aimodel packages rlxjax writes")
        self._describe(meta, (), ())

    def _run(self, feeds, state=None):
        from .worker import Session

        if getattr(self, "_session", None) is None or self._session.proc.poll() is not None:
            self._session = Session(self.path, "main")  # compiled once for every call
        return self._session(feeds)

    def __repr__(self):
        return (f"LoadedAIModel({self.path!r}, inputs={list(self.input_names)}, "
                f"outputs={list(self.output_names)}, backend='coreai')")


def load_asset(path, backend=None, function=None) -> LoadedAIModel:
    return LoadedAIModel(os.path.abspath(os.fspath(path)), backend, function)
