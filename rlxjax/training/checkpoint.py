"""Files a training run writes: checkpoints and the initial Core ML state for an app.

Every file goes through rlxjax/atomic.py (staged, fsynced, renamed into place; a killed
writer's leftovers are removed by the next write into the same folder).
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .. import atomic
from ..errors import ArgumentError


def save_checkpoint(path, step: int, leaves: Sequence[np.ndarray]) -> str:
    """Write ``leaves`` (parameters then optimizer state) and ``step`` to an ``.npz``
    checkpoint atomically (a failure leaves the previous file or none)."""
    arrays = {f"leaf_{i}": np.asarray(x) for i, x in enumerate(leaves)}
    return atomic.write_file(path, lambda f: np.savez(f, step=np.int64(step), **arrays))


def load_checkpoint(path, like: Sequence[np.ndarray]) -> Tuple[int, List[np.ndarray]]:
    """(step, leaves) of a checkpoint written by ``save_checkpoint``, checked against the
    leaves ``like`` of the state it is loaded into."""
    with np.load(os.fspath(path)) as z:
        n = len([k for k in z.files if k.startswith("leaf_")])
        if n != len(like):
            raise ArgumentError(f"checkpoint {path} holds {n} arrays, the state "
                                f"{len(like)}: it was written for another model or optimizer")
        leaves = [z[f"leaf_{i}"] for i in range(n)]
        for i, (a, b) in enumerate(zip(leaves, like)):
            if a.shape != np.shape(b) or a.dtype != np.asarray(b).dtype:
                raise ArgumentError(f"checkpoint array {i} is {a.dtype}{list(a.shape)}, the "
                                    f"state wants {np.asarray(b).dtype}{list(np.shape(b))}")
        return int(z["step"]), leaves


#: a state file's suffix and little-endian dtype, by the state's dtype (Core ML's states are
#: fp16; Core AI's fp32 and int32)
STATE_FILES = {"float16": (".f16", "<f2"), "float32": (".f32", "<f4"), "int32": (".i32", "<i4")}


def write_state_files(folder, step: int, pieces: Dict[str, np.ndarray]) -> str:
    """``export_state``: one raw little-endian file per state (``<name>.f16`` for Core ML's
    fp16 states, ``.f32`` / ``.i32`` for Core AI's; from ``pieces``: state name -> values),
    then ``state.json`` (names, shapes, dtypes, step), each written atomically into
    ``folder``."""
    folder = os.fspath(folder)
    os.makedirs(folder, exist_ok=True)
    rows = []
    for name, arr in pieces.items():
        suffix, le = STATE_FILES[arr.dtype.name]
        atomic.write_bytes(os.path.join(folder, name + suffix), arr.astype(le).tobytes())
        rows.append({"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name})
    atomic.write_bytes(os.path.join(folder, "state.json"),
                       json.dumps({"step": step, "states": rows}).encode())
    return os.path.abspath(folder)


def read_state_files(state, names, folder, optional=()) -> None:
    """Fill ``state`` (a loaded package's ``make_state()``) from an ``export_state`` folder:
    ``state.json`` must list exactly the package's states ``names``, each with its shape,
    but for those in ``optional`` (a KV cache's: zero, an empty cache, when not listed)."""
    folder = os.fspath(folder)
    index = os.path.join(folder, "state.json")
    if not os.path.isfile(index):
        raise ArgumentError(f"{folder} is not an export_state folder (no state.json): write "
                            "one with step.export_state(state, folder)")
    rows = json.load(open(index))["states"]
    got = sorted(r["name"] for r in rows)
    if got != sorted(n for n in names if n not in optional or n in got):
        raise ArgumentError(f"{folder} holds states {got}; the package declares "
                            f"{sorted(names)}: export the state of the step this package "
                            "was saved from")
    for r in rows:
        if r.get("dtype", "float16") not in STATE_FILES:
            raise ArgumentError(f"{folder}/state.json: state {r['name']} has dtype "
                                f"{r.get('dtype')!r}; expected one of {sorted(STATE_FILES)}")
        suffix, le = STATE_FILES[r.get("dtype", "float16")]
        raw = np.fromfile(os.path.join(folder, r["name"] + suffix), le)
        if raw.size != int(np.prod(r["shape"])):
            raise ArgumentError(f"{folder}/{r['name']}{suffix} holds {raw.size} values; "
                                f"state.json says shape {r['shape']}")
        state.write_state(r["name"], raw.reshape(r["shape"]))
