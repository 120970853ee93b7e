"""Atomic writes of files and folders: one staging scheme, one cleanup.

Everything rlxjax writes for later use (``.mlpackage`` folders, checkpoints, the files of
``export_state``) is first written to a hidden staging entry in the destination's folder,
named ``.rlxjax-<pid>-<random>`` after the writing process, and then moved into place with
one rename: a failure or a kill at any point leaves the previous file (or nothing) at the
destination, never a half-written one. A writer killed between staging and rename leaves
its staging entry behind; the next write into the same folder removes the entries whose
process no longer runs (and leaves alone those of writers still at work).

Replacing an existing folder uses an atomic directory exchange (renameat2 RENAME_EXCHANGE
on Linux, renamex_np RENAME_SWAP on macOS) where the system offers it, and falls back to
rename-aside-then-rename otherwise.
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import re
import shutil
import sys
import tempfile
import uuid
from typing import BinaryIO, Callable, Iterator

from .errors import PackageError


_TAG = ".rlxjax-"
# What ``staging_prefix`` produces, and the ``.rlxjax-<kind>-<pid>-`` names older versions
# staged under (``ckpt-``, ``file-``): one pattern for every staging entry.
_STAGING = re.compile("^" + re.escape(_TAG) + r"(?:[a-z]+-)?(\d+)-")


def staging_prefix() -> str:
    """Prefix of a hidden staging entry; it names the writing process, so that a later
    write can tell a killed writer's leftovers from a write still in progress."""
    return f"{_TAG}{os.getpid()}-"


def staging_pid(name: str) -> int | None:
    """The writer's process id if ``name`` is a staging entry, else None."""
    m = _STAGING.match(name)
    return int(m.group(1)) if m else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def remove_stale_staging(folder: str) -> None:
    """Delete staging entries left in ``folder`` by writers that no longer run (a write
    killed between staging and its final rename)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        pid = staging_pid(name)
        if pid is None or pid == os.getpid() or _alive(pid):
            continue
        full = os.path.join(folder, name)
        if os.path.isdir(full) and not os.path.islink(full):
            shutil.rmtree(full, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(full)


def _fsync_dir(folder: str) -> None:
    """Make a rename in ``folder`` durable (best effort: not every system can)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- files ------------------------------------------------------------------------------
def _umask() -> int:
    """The process's umask (read without changing it where the system says it: Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore (as the standard library does)
    os.umask(mask)
    return mask


def write_file(path, write: Callable[[BinaryIO], None]) -> str:
    """Write ``path`` through ``write(file)`` atomically: a staging file in the same folder,
    fsynced, then renamed over ``path``. Returns the absolute path."""
    path = os.path.abspath(os.fspath(path))
    folder = os.path.dirname(path)
    remove_stale_staging(folder)
    fd, tmp = tempfile.mkstemp(prefix=staging_prefix(), dir=folder)
    try:
        # mkstemp makes the file 0600; the file written is the user's, as open() makes it
        os.chmod(tmp, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(folder)
    return path


def user_modes(root: str) -> None:
    """Give every file and folder under ``root`` the mode ``open`` / ``mkdir`` give under
    the user's umask: the libraries that write packages stage some files through
    ``mkstemp`` (0600: coremltools' ``model.mlmodel``)."""
    mask = _umask()
    os.chmod(root, 0o777 & ~mask)
    for folder, dirs, files in os.walk(root):
        for d in dirs:
            os.chmod(os.path.join(folder, d), 0o777 & ~mask)
        for f in files:
            p = os.path.join(folder, f)
            if not os.path.islink(p):
                os.chmod(p, 0o666 & ~mask)


def write_bytes(path, data: bytes) -> str:
    return write_file(path, lambda f: f.write(data))


# -- folders ----------------------------------------------------------------------------
@contextlib.contextmanager
def staging_dir(parent: str) -> Iterator[str]:
    """A fresh hidden staging folder in ``parent`` (stale ones removed first), deleted on
    exit: build the new content inside it, then ``replace_dir`` it into place."""
    os.makedirs(parent, exist_ok=True)
    remove_stale_staging(parent)
    root = tempfile.mkdtemp(prefix=staging_prefix(), dir=parent)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


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
    """Move folder ``new`` to ``path``, replacing what is there as atomically as possible.
    Concurrent writers of one ``path`` each succeed, one after the other (the last one's
    folder stays): a rename that finds ``path`` just created by another writer exchanges
    with it instead, and an exchange that finds it just moved away renames again."""
    for _ in range(100):
        if not os.path.lexists(path):
            try:
                os.rename(new, path)
                return
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
                continue  # another writer's folder arrived first: replace it
        if not os.path.isdir(path) or os.path.islink(path):
            raise FileExistsError(f"{path} exists and is not a folder; refusing to replace it")
        if _exchange(new, path):
            shutil.rmtree(new, ignore_errors=True)  # ``new`` now holds the previous folder
            return
        if not os.path.lexists(path):
            continue  # moved away by another writer between the check and the exchange
        if _can_exchange():
            continue
        aside = f"{path}.old-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            continue
        try:
            os.rename(new, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.rename(aside, path)
            raise
        shutil.rmtree(aside, ignore_errors=True)
        return
    raise PackageError(f"{path}: could not replace it (other writers kept replacing it); "
                       "write it again")


def _can_exchange() -> bool:
    """Whether this system has an atomic exchange (then a failed one was a race)."""
    libc = _libc()
    return libc is not None and (
        (sys.platform.startswith("linux") and hasattr(libc, "renameat2"))
        or (sys.platform == "darwin" and hasattr(libc, "renamex_np")))


def write_package(path, suffix: str, kind: str, write: Callable[[str], None]) -> str:
    """Write the package folder ``path`` (which must end in ``suffix``) atomically:
    ``write(staged)`` builds it in a staging folder beside ``path``, which then replaces
    ``path`` in one step, so a failure leaves the previous package or nothing. ``kind``
    names the package in errors ("Core ML", "Core AI"). Returns the absolute path."""
    path = os.path.abspath(os.fspath(path))
    if not path.endswith(suffix):
        raise PackageError(f"a {kind} package path must end in {suffix}: {path}")
    if os.path.lexists(path) and (not os.path.isdir(path) or os.path.islink(path)):
        raise PackageError(f"{path} exists and is not a folder; refusing to replace it")
    with staging_dir(os.path.dirname(path)) as tmp_root:
        staged = os.path.join(tmp_root, "staged" + suffix)
        write(staged)
        user_modes(staged)
        replace_dir(staged, path)
    return path
