"""A package is checked before it is believed: what its metadata says against its program.

rlxjax's metadata (``rlxjax.io``, rlxjax/metadata.py) tells the host how to feed and read a
function: each feature's name, order, shape and dtype. It is a JSON string beside the program
(Core ML: in the model's ``userDefined`` map; Core AI: ``metadata.json``, which ``main.hash``
does not cover), so a hand-edited or hostile package can say anything there. Every loader
compares it here with the program's own declaration of its inputs, outputs and states (read
by the format: Core ML's MIL function, Core AI's ``coreai.graph`` signature) and refuses a
difference with a ``PackageError``: the package then never returns int32 for float32, a
reshaped result, two results swapped or nothing at all.

A format passes the program's side as ``Signature`` rows: (feature name, shape with ``None``
for a dim the program leaves open, numpy dtype name).
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from .errors import PackageError

#: (feature name, shape (None: open dim), numpy dtype name)
Row = Tuple[str, Tuple[Optional[int], ...], str]

#: the dtype a feature carries for a JAX-side dtype (both formats' ``_io_dtype``: floats as
#: float32, integers and bool as int32, int8 as int8 where the format carries it)
def _carries(dtype: str, io_dtype: str) -> bool:
    kind = np.dtype(dtype).kind
    if io_dtype == "float32":
        return kind == "f"
    if io_dtype == "int32":
        return kind in "iub"
    if io_dtype == "int8":
        return dtype == "int8"
    return False


def _dims_agree(meta_shape, prog_shape, sizes: Dict[str, int]) -> bool:
    if len(meta_shape) != len(prog_shape):
        return False
    for m, p in zip(meta_shape, prog_shape):
        if isinstance(m, str):
            m = sizes.get(m)
        if m is not None and p is not None and int(m) != int(p):
            return False
    return True


def _fmt(rows) -> str:
    return ", ".join(f"{n}: {d}{list(s)}" for n, s, d in rows)


def check_specs(where: str, what: str, specs, program: Sequence[Row],
                sizes: Optional[Dict[str, int]] = None) -> None:
    """``specs`` (the metadata's IOSpecs of the function's inputs or outputs, ``what``)
    against ``program``'s rows of the same, in order; ``sizes``: a flexible symbol's size
    in this program (Core AI's one static function per enumerated shape)."""
    sizes = sizes or {}
    told = [(s.mil_name, tuple(s.io_shape), s.io_dtype) for s in specs]
    for s in specs:
        jax_shape = tuple(s.shape) if len(s.shape) else (1,)
        if not _carries(s.dtype, s.io_dtype) or (
                not s.flexible and jax_shape != tuple(s.io_shape)):
            raise PackageError(
                f"{where}: its metadata says {what[:-1]} '{s.name}' is {s.dtype}"
                f"{list(s.shape)} carried as {s.io_dtype}{list(s.io_shape)}, which no program "
                "rlxjax writes carries: the metadata was edited or damaged; refused (save the "
                "package again)")
    for k in range(max(len(told), len(program))):
        a = told[k] if k < len(told) else None
        b = program[k] if k < len(program) else None
        if a is None or b is None or a[0] != b[0] or a[2] != b[2] or \
                not _dims_agree(a[1], b[1], sizes):
            break
    else:
        return
    say = (lambda r: "nothing" if r is None else f"'{r[0]}' {r[2]}{list(r[1])}")
    err = PackageError(
        f"{where}: its metadata says {what[:-1]} {k} is {say(a)}, the program declares "
        f"{say(b)}: the metadata or the program was edited or damaged after it was written; "
        "refused (save the package again; the whole lists are on this error's .detail)")
    err.detail = f"metadata {what}: [{_fmt(told)}]\nprogram {what}: [{_fmt(program)}]"
    raise err


def check_states(where: str, rows: Sequence[dict], program: Sequence[Row]) -> None:
    """A function's state rows (``rlxjax.states``: mil_name, shape, dtype) against the
    states the program declares."""
    told = [(str(r["mil_name"]), tuple(int(d) for d in r["shape"]), str(r["dtype"]))
            for r in rows]
    if sorted(told) != sorted((n, tuple(s), d) for n, s, d in program):
        raise PackageError(
            f"{where}: its metadata describes states [{_fmt(told)}] but the program declares "
            f"[{_fmt(program)}]: the package was edited or damaged; refused")


def check_functions(where: str, named: Sequence[str], program: Sequence[str]) -> None:
    """Every function the metadata names is one of the program's."""
    missing = [n for n in named if n not in program]
    if missing:
        raise PackageError(f"{where}: its metadata names functions {missing} that the "
                           f"program does not have (it has {list(program)}); refused")
