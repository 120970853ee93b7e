"""The state files of an app, format-neutral: ``export_state`` writes them, a loaded package's
``make_state(folder)`` reads them (both formats, rlxjax/coreml/loaded.py and
rlxjax/coreai/loaded.py, and a loaded training package, rlxjax/loaded_step.py).

One raw little-endian file per state (``<name>.f16`` for Core ML's fp16 states, ``.f32`` /
``.i32`` for Core AI's) and ``state.json``, the index written last, with every file's
SHA-256, checked on read. The folder is written atomically *as a whole*
(rlxjax/atomic.py): built in a staging folder beside the destination and exchanged with it
in one step, so a writer killed at any point leaves the previous export or the new one,
never a mix; a truncated, empty, byte-flipped or incomplete folder is a ``PackageError``
naming the file, never a state read from a mix of two exports. Readers touch only files
inside the folder they are given: a state name that is no identifier (``../x``, an absolute
path) or a state file that is a symlink or no regular file is refused.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from typing import Dict

import numpy as np

from .. import atomic
from ..errors import ArgumentError, PackageError

_MAX_INDEX = 1 << 20  # state.json: a few rows per state
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


#: a state file's suffix and little-endian dtype, by the state's dtype (Core ML's states are
#: fp16; Core AI's fp32 and int32)
STATE_FILES = {"float16": (".f16", "<f2"), "float32": (".f32", "<f4"), "int32": (".i32", "<i4")}
INDEX = "state.json"


def _state_name(name, where) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise PackageError(f"{where}: state name {name!r} is not an identifier (a file name "
                           "inside the folder): refused")
    return name


def write_state_files(folder, step: int, pieces: Dict[str, np.ndarray]) -> str:
    """``export_state``: one raw little-endian file per state (``<name>.f16`` for Core ML's
    fp16 states, ``.f32`` / ``.i32`` for Core AI's; from ``pieces``: state name -> values),
    then ``state.json`` (names, shapes, dtypes, SHA-256 of each file, step), the folder
    written as a whole: built beside ``folder`` and exchanged with it in one step. An
    existing ``folder`` must be an earlier export (or empty): anything else is refused."""
    folder = os.path.abspath(os.fspath(folder))
    if os.path.lexists(folder):
        if os.path.islink(folder) or not os.path.isdir(folder):
            raise PackageError(f"{folder} exists and is not a folder: export_state writes a "
                               "folder; name a new one")
        names = os.listdir(folder)
        if names and INDEX not in names:
            raise PackageError(f"{folder} holds files and is no export_state folder (no "
                               f"{INDEX}): refusing to replace it; name a new or empty folder")
    with atomic.staging_dir(os.path.dirname(folder)) as tmp:
        staged = os.path.join(tmp, "state")
        os.mkdir(staged)
        rows = []
        for name, arr in pieces.items():
            suffix, le = STATE_FILES[arr.dtype.name]
            data = np.ascontiguousarray(arr.astype(le)).tobytes()
            atomic.write_bytes(os.path.join(staged, _state_name(name, folder) + suffix), data)
            rows.append({"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name,
                         "sha256": hashlib.sha256(data).hexdigest()})
        atomic.write_bytes(os.path.join(staged, INDEX),
                           json.dumps({"step": step, "states": rows}).encode())
        atomic.replace_dir(staged, folder)
    return folder


def _regular(path: str) -> os.stat_result:
    """The stat of a file that must be a regular file (not a symlink, FIFO, device)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise PackageError(f"{path} is missing: the export_state folder is incomplete; "
                           "export the state again") from None
    if not stat.S_ISREG(st.st_mode):
        raise PackageError(f"{path} is a symbolic link or no regular file: an export_state "
                           "folder's files must lie inside it; refused")
    return st


def _read_index(folder: str) -> list:
    index = os.path.join(folder, INDEX)
    if not os.path.lexists(index):
        raise ArgumentError(f"{folder} is not an export_state folder (no {INDEX}): write "
                            "one with step.export_state(state, folder)")
    if _regular(index).st_size > _MAX_INDEX:
        raise PackageError(f"{index} is implausibly large: not an export_state index")
    try:
        with open(index, "rb") as f:
            rows = json.loads(f.read().decode("utf-8"))["states"]
        if not isinstance(rows, list):
            raise TypeError("'states' is not a list")
        for r in rows:
            shape = r["shape"]
            if not isinstance(shape, list) or not all(
                    type(d) is int and d >= 0 for d in shape):
                raise ValueError(f"state {r.get('name')!r}: shape {shape!r}")
            if r.get("dtype", "float16") not in STATE_FILES:
                raise ValueError(f"state {r.get('name')!r} has dtype {r.get('dtype')!r}; "
                                 f"expected one of {sorted(STATE_FILES)}")
            _state_name(r["name"], index)
    except PackageError:
        raise
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise PackageError(f"{index} is malformed ({type(e).__name__}: {e}): not an index "
                           "written by step.export_state; export the state again") from None
    return rows


def read_state_files(state, names, folder, optional=()) -> None:
    """Fill ``state`` (a loaded package's ``make_state()``) from an ``export_state`` folder:
    ``state.json`` must list exactly the package's states ``names``, each with its shape,
    but for those in ``optional`` (a KV cache's: zero, an empty cache, when not listed);
    every file is checked (size, SHA-256 when the index has it) before any is written into
    ``state``."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise ArgumentError(f"{folder} is not an export_state folder (not a folder): write "
                            "one with step.export_state(state, folder)")
    rows = _read_index(folder)
    got = sorted(r["name"] for r in rows)
    if got != sorted(n for n in names if n not in optional or n in got):
        raise ArgumentError(f"{folder} holds states {got}; the package declares "
                            f"{sorted(names)}: export the state of the step this package "
                            "was saved from")
    values = {}
    for r in rows:
        suffix, le = STATE_FILES[r.get("dtype", "float16")]
        path = os.path.join(folder, r["name"] + suffix)
        size, want = _regular(path).st_size, int(np.prod(r["shape"])) * np.dtype(le).itemsize
        if size != want:
            raise ArgumentError(f"{path} holds {size // np.dtype(le).itemsize} values; "
                                f"state.json says shape {r['shape']}: the folder is damaged "
                                "or mixes two exports; export the state again")
        with open(path, "rb") as f:
            data = f.read(want + 1)
        if "sha256" in r and hashlib.sha256(data).hexdigest() != r["sha256"]:
            raise PackageError(f"{path} does not match its SHA-256 in state.json: the file "
                               "was changed or damaged after export; export the state again")
        values[r["name"]] = np.frombuffer(data, le).reshape(r["shape"])
    for name, arr in values.items():
        state.write_state(name, arr)
