"""A training run's checkpoints (``state.save`` / ``TrainState.load``).

A checkpoint is one ``.npz`` file, written atomically *as a whole* (rlxjax/atomic.py):
staged and renamed into place, so a writer killed at any point leaves the previous
checkpoint or the new one. Its ``manifest`` member, written last, holds every array's
SHA-256, checked on read: a truncated, empty, byte-flipped or incomplete file is a
``PackageError`` naming it, never a raw ``BadZipFile`` / ``KeyError``. (The initial state
for an app, ``export_state``'s folder, is rlxjax/states/files.py's: loaded packages read it
too.)
"""
from __future__ import annotations

import hashlib
import json
import os
import zipfile
from typing import List, Sequence, Tuple

import numpy as np

from .. import atomic
from ..errors import ArgumentError, PackageError, RlxError

_MANIFEST = "manifest"


def _sha(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def save_checkpoint(path, step: int, leaves: Sequence[np.ndarray]) -> str:
    """Write ``leaves`` (parameters then optimizer state) and ``step`` to an ``.npz``
    checkpoint atomically (a failure leaves the previous file or none), its manifest (each
    leaf's dtype, shape and SHA-256) last."""
    arrays = {f"leaf_{i}": np.asarray(x) for i, x in enumerate(leaves)}
    manifest = {"step": int(step), "leaves": [
        {"dtype": a.dtype.name, "shape": list(a.shape), "sha256": _sha(a)}
        for a in arrays.values()]}
    blob = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    return atomic.write_file(path, lambda f: np.savez(f, step=np.int64(step), **arrays,
                                                      **{_MANIFEST: blob}))


def _broken(path, why: str) -> PackageError:
    return PackageError(f"checkpoint {path} cannot be read: {why}. It is not a complete "
                        "checkpoint written by TrainState.save (truncated, damaged or another "
                        "file): restore it from a copy or save it again")


def load_checkpoint(path, like: Sequence[np.ndarray]) -> Tuple[int, List[np.ndarray]]:
    """(step, leaves) of a checkpoint written by ``save_checkpoint``, checked against its
    manifest and against the leaves ``like`` of the state it is loaded into."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise PackageError(f"no checkpoint at {path}: write one with state.save(path)")
    if os.path.getsize(path) == 0:
        raise _broken(path, "the file is empty")
    try:
        with zipfile.ZipFile(path) as zf:  # every member's CRC, the .npy headers included
            bad = zf.testzip()
        if bad is not None:
            raise _broken(path, f"member {bad} fails its CRC check")
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
            manifest = (json.loads(z[_MANIFEST].tobytes().decode())
                        if _MANIFEST in files else None)
            rows = manifest.get("leaves") if isinstance(manifest, dict) else None
            if manifest is not None and not isinstance(rows, list):
                raise _broken(path, "its manifest is malformed")
            # with a manifest, its rows say how many arrays were written
            n = len(rows) if rows is not None else len(
                [k for k in files if k.startswith("leaf_")])
            if n != len(like):
                raise ArgumentError(f"checkpoint {path} holds {n} arrays, the state "
                                    f"{len(like)}: it was written for another model or "
                                    "optimizer")
            missing = [k for k in ["step"] + [f"leaf_{i}" for i in range(n)] if k not in files]
            if missing:
                raise _broken(path, f"it lacks {missing}")
            leaves = [z[f"leaf_{i}"] for i in range(n)]
            step = int(z["step"])
    # RuntimeError / NotImplementedError: zipfile on a flipped flag bit of a member's header
    # ("File ... is encrypted", "compressed patched data")
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError, TypeError,
            UnicodeDecodeError, RuntimeError) as e:
        if isinstance(e, RlxError):
            raise
        raise _broken(path, f"{type(e).__name__}: {e}") from None
    if manifest is not None:  # written by rlxjax >= this version; older ones have none
        if manifest.get("step") != step:
            raise _broken(path, "its manifest does not match its arrays")
        for i, (a, r) in enumerate(zip(leaves, rows)):
            if not isinstance(r, dict) or r.get("sha256") != _sha(a):
                raise _broken(path, f"array {i} does not match its SHA-256 in the manifest")
    for i, (a, b) in enumerate(zip(leaves, like)):
        if a.shape != np.shape(b) or a.dtype != np.asarray(b).dtype:
            raise ArgumentError(f"checkpoint array {i} is {a.dtype}{list(a.shape)}, the "
                                f"state wants {np.asarray(b).dtype}{list(np.shape(b))}")
    return step, leaves
