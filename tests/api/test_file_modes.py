"""Files and folders rlxjax writes carry the user's umask, as ``open`` and ``mkdir`` would
make them (not ``mkstemp``'s 0600 / ``mkdtemp``'s 0700): every file and folder of a saved
package, its state files and a parameters file."""
from __future__ import annotations

import os
import stat

import numpy as np
import optax
import pytest

import rlxjax


def _loss(p, x):
    return ((x @ p["w"]) ** 2).mean()


def _modes(root):
    out = {}
    if os.path.isfile(root):
        return {root: stat.S_IMODE(os.stat(root).st_mode)}
    out[root] = stat.S_IMODE(os.stat(root).st_mode)
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            out[os.path.join(d, n)] = stat.S_IMODE(os.stat(os.path.join(d, n)).st_mode)
    return out


def _has_coreai():
    try:
        import coreai.authoring  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.mark.parametrize("mask,fmt", [(0o022, "mlpackage"), (0o077, "mlpackage"),
                                      pytest.param(0o022, "aimodel", marks=[pytest.mark.slow, pytest.mark.skipif(
                                          not _has_coreai(), reason="needs rlxjax[coreai]")])])
def test_written_files_follow_the_umask(tmp_path, mask, fmt):
    old = os.umask(mask)
    try:
        step = rlxjax.coreml_train_step(_loss, optax.sgd(0.1), state="mlstate", format=fmt)
        st = step.init({"w": np.ones((3, 2), np.float32)}, np.ones((4, 3), np.float32))
        written = [step.save(tmp_path / f"s.{fmt}"),
                   step.export_state(st, tmp_path / "state"),
                   step.export_params(st, tmp_path / "p.safetensors")]
    finally:
        os.umask(old)
    for root in written:
        for path, mode in _modes(root).items():
            want = (0o777 if os.path.isdir(path) else 0o666) & ~mask
            assert mode == want, f"{os.path.relpath(path, tmp_path)}: {oct(mode)} != {oct(want)}"
