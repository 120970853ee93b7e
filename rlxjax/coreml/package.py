"""Writing ``.mlpackage`` folders atomically.

The package is built next to its destination and moved into place with one rename, so a
failure at any point leaves either the previous package or nothing at ``path`` — never a
half-written one. Replacing an existing package uses an atomic directory exchange
(renameat2 RENAME_EXCHANGE on Linux, renamex_np RENAME_SWAP on macOS) where the system
offers it, and falls back to rename-aside-then-rename otherwise.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import shutil
import sys
import tempfile
import uuid

from ..errors import RlxError
from .ct_private import create_mlpackage

MLPACKAGE_SUFFIX = ".mlpackage"


class PackageError(RlxError, OSError):
    """A package path that cannot be written (wrong suffix, not a folder, ...)."""


def _libc():
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths; False where the system cannot."""
    libc = _libc()
    try:
        if sys.platform.startswith("linux") and libc is not None and hasattr(libc, "renameat2"):
            AT_FDCWD, RENAME_EXCHANGE = -100, 2
            rc = libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b),
                                RENAME_EXCHANGE)
            return rc == 0
        if sys.platform == "darwin" and libc is not None and hasattr(libc, "renamex_np"):
            RENAME_SWAP = 0x2
            return libc.renamex_np(os.fsencode(a), os.fsencode(b), RENAME_SWAP) == 0
    except (AttributeError, OSError):
        pass
    return False


def replace_dir(new: str, path: str) -> None:
    """Move folder ``new`` to ``path``, replacing what is there as atomically as possible."""
    if not os.path.lexists(path):
        os.rename(new, path)
        return
    if not os.path.isdir(path) or os.path.islink(path):
        raise PackageError(f"{path} exists and is not a folder; refusing to replace it")
    if _exchange(new, path):
        shutil.rmtree(new)  # ``new`` now holds the previous package
        return
    aside = f"{path}.old-{uuid.uuid4().hex[:8]}"
    os.rename(path, aside)
    try:
        os.rename(new, path)
    except BaseException:
        os.rename(aside, path)
        raise
    shutil.rmtree(aside)


_STAGING = re.compile(r"^\.rlxjax-(?:ckpt-)?(\d+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def staging_prefix(kind: str = "") -> str:
    """Prefix of a hidden staging entry that names the writing process, so that a later
    save can tell a killed writer's leftovers from a save still in progress."""
    return f".rlxjax-{kind}{os.getpid()}-"


def remove_stale_staging(folder: str) -> None:
    """Delete staging entries left in ``folder`` by writers that no longer run (a save
    killed between staging and its final rename)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        m = _STAGING.match(name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            full = os.path.join(folder, name)
            if os.path.isdir(full) and not os.path.islink(full):
                shutil.rmtree(full, ignore_errors=True)
            else:
                try:
                    os.unlink(full)
                except OSError:
                    pass


def save_mlpackage(model, weights_dir: str | None, path: str | os.PathLike) -> str:
    path = os.path.abspath(os.fspath(path))
    if not path.endswith(MLPACKAGE_SUFFIX):
        raise PackageError(f"a Core ML package path must end in {MLPACKAGE_SUFFIX}: {path}")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    remove_stale_staging(parent)
    tmp_root = tempfile.mkdtemp(prefix=staging_prefix(), dir=parent)
    try:
        staged = os.path.join(tmp_root, "staged" + MLPACKAGE_SUFFIX)
        weights = weights_dir if weights_dir and os.listdir(weights_dir) else None
        create_mlpackage(model, weights, staged)
        replace_dir(staged, path)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return path
