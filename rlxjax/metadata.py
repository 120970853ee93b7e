"""Package metadata: every key rlxjax writes, its schema, and the one reader and writer.

A package (``.mlpackage``; next ``.aimodel``) carries, besides the program, a string-to-string
map of metadata (Core ML: ``Model.description.metadata.userDefined``). rlxjax's keys hold
JSON; ``rlxjax.load`` reads them back to take and return values as ``Compiled.__call__``
does. The schema is versioned by the writer's rlxjax version (``rlxjax.version``): a key's
JSON only ever gains optional fields, so a package written by one rlxjax version is read by
the next (tests/api/test_package_compat.py reads packages saved by an earlier main).

A new key goes here: its name, what it holds, a writer that builds its JSON from the
format-neutral program and a reader that checks it and raises ``PackageError``.
"""
from __future__ import annotations

import json
from typing import Dict, MutableMapping, Optional, Tuple

import numpy as np

from ._version import __version__
from .errors import PackageError
from .signature import IO_FIELDS, IOSpec, feature_name

#: the rlxjax version that wrote the package
VERSION = "rlxjax.version"
#: {"inputs": [IOSpec row], "outputs": [...], "states": [...]}: each feature's JAX-side shape
#: and dtype (rows without "bounds" are static; "states" only in a stateful program)
IO = "rlxjax.io"
#: {"inputs": [row], "outputs": [row]}: the zero-size leaves (no features): position among
#: the function's leaves, name, feature-style name, shape, dtype (frontend/zerosize.py)
EMPTY = "rlxjax.empty"
#: [row]: what the host computes for each random="inputs" program input (frontend/random/);
#: random="device" programs write {"mode": "device", ...} instead
RANDOM = "rlxjax.random"
#: {input feature name: where its values reach a top_k}: inputs refused with a -NaN
NAN_SIGN = "rlxjax.nan_sign"
#: a training step's layout: each feature's role and what feeds what (training/layout.py)
TRAIN = "rlxjax.train"
#: the predict function of a train + predict package (training/multifunction.py)
PREDICT = "rlxjax.predict"
#: a stateful function (coreml_jit(fn, state=...), rlxjax/stateful.py): its state
#: argument, the encoding, each state and where each leaf lives in the packed vectors
STATEFUL = "rlxjax.stateful"
#: a multifunction package: {"default": name, "functions": {name: {key: value}}}, the
#: per-function keys of each function
FUNCTIONS = "rlxjax.functions"
#: [{name, mil_name, shape, dtype}]: the function's states, for a format whose package does
#: not describe them where rlxjax can read it without the runtime (Core AI)
STATES = "rlxjax.states"
#: a function's output pytree structure, where its output names do not spell it
#: (rlxjax/pytree_json.py; absent in packages written before it, read from the names then)
TREE = "rlxjax.tree"
#: the "format" entry of a parameters file (training/params_io.py, safetensors metadata)
PARAMS_FORMAT = "rlxjax.params.v1"

KEYS = (VERSION, IO, EMPTY, RANDOM, NAN_SIGN, TRAIN, PREDICT, STATEFUL, FUNCTIONS, STATES,
        TREE)


def per_function(key: str) -> bool:
    """Whether ``key`` describes one function (kept per function in a multifunction
    package) rather than the package."""
    return key.startswith("rlxjax.") and key not in (VERSION, FUNCTIONS)


# -- writing --------------------------------------------------------------------------------

def write(meta: MutableMapping[str, str], key: str, obj) -> None:
    """Store ``obj`` as JSON under ``key``."""
    meta[key] = json.dumps(obj)


def io_row(spec: IOSpec) -> dict:
    """An IOSpec's row (``dataclasses.asdict`` without its deep copy: the fields are strings
    and int tuples, and a gradient program has an output per parameter)."""
    row = {f: getattr(spec, f) for f in IO_FIELDS}
    if not row["bounds"]:  # a static input or an output: as before flexible inputs existed
        del row["bounds"]
    return row


def write_program(meta: MutableMapping[str, str], in_specs, out_specs,
                  state_rows=()) -> None:
    """The keys every program has: the writer's version and its inputs and outputs (and
    ``state_rows``, its states, when its format lists them there)."""
    meta[VERSION] = __version__
    io = {"inputs": [io_row(s) for s in in_specs], "outputs": [io_row(s) for s in out_specs]}
    if state_rows:
        io["states"] = list(state_rows)
    write(meta, IO, io)


def describe(executable, program, extra: Optional[Dict[str, object]] = None) -> None:
    """Every per-program key, written once, after the format compiled ``program``
    (rlxjax/program.py) into ``executable`` (formats/base.py): the version, inputs, outputs
    and states, the host parts (randomness, zero-size leaves, NaN signs), the format's own
    keys, then ``extra`` (what the compile path adds: ``STATEFUL``, ``TRAIN``,
    ``PREDICT``). The one writer of a compiled program's metadata (rlxjax/stages.py calls
    it); ``TREE`` is written when the package is saved, ``FUNCTIONS`` when several are
    merged."""
    meta = executable.metadata
    ins, outs = executable.input_specs, executable.output_specs
    rows = executable.state_rows()
    write_program(meta, ins, outs, rows if executable.states_in_io else ())
    write_host_parts(meta, program.traced, ins, outs)
    if rows and not executable.states_in_io:
        write(meta, STATES, rows)
    for key, obj in {**executable.own_metadata(), **(extra or {})}.items():
        write(meta, key, obj)


def merge_functions(parts, default: str) -> Dict[str, str]:
    """One package's metadata for the functions ``parts`` ((name, metadata map) each): the
    first part's package keys, and each function's own keys under ``FUNCTIONS``, sorted (a
    protobuf map iterates in an order that changes from process to process: the package
    would not be the same bytes twice)."""
    meta = {k: v for k, v in parts[0][1].items() if not per_function(k)}
    rows = [{"name": name, "metadata": {k: _json_or_text(v) for k, v in sorted(m.items())
                                        if per_function(k)}} for name, m in parts]
    meta[FUNCTIONS] = json.dumps({"default": default, "functions": rows})
    return meta


def function_names(meta) -> Tuple[Optional[str], Tuple[str, ...]]:
    """(default function, every function) of a multifunction package's metadata; (None,
    ()) for a single-function one."""
    raw = read(meta, FUNCTIONS)
    if raw is None:
        return None, ()
    try:
        names = tuple(str(r["name"]) for r in raw["functions"])
        return str(raw["default"]), names
    except (KeyError, TypeError) as e:
        raise PackageError(f"the package's {FUNCTIONS} metadata is malformed "
                           f"({type(e).__name__}: {e})") from None


def function_metadata(meta, name: str) -> Dict[str, str]:
    """The metadata of function ``name`` as a single-function package has it."""
    out = {k: v for k, v in meta.items() if k != FUNCTIONS}
    raw = read(meta, FUNCTIONS)
    if raw is not None:
        try:
            for r in raw["functions"]:
                if r["name"] == name:
                    out.update({str(k): v if isinstance(v, str) else json.dumps(v)
                                for k, v in r["metadata"].items()})
        except (KeyError, TypeError, AttributeError) as e:
            raise PackageError(f"the package's {FUNCTIONS} metadata is malformed "
                               f"({type(e).__name__}: {e})") from None
    return out


def _json_or_text(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def random_rows(host, in_specs) -> list:
    """``RANDOM``'s JSON for a program with host parts (``Traced.host``): one row per
    host-computed input (the last inputs), naming its feature; random="device" adds its
    mode and draws (``host.payload``)."""
    rows = host.metadata()
    for row, spec in zip(rows, in_specs[len(in_specs) - len(rows):]):
        row["feature"] = spec.mil_name
    if hasattr(host, "payload"):  # random="device": mode and draws
        rows = host.payload(rows)
    return rows


def empty_rows(traced, in_specs, out_specs) -> Optional[dict]:
    """``EMPTY``'s JSON (None without zero-size leaves): per leaf its position among the
    function's input / output leaves, name, feature-style name (unique among the
    program's features), shape and dtype."""
    if not traced.empty_in and not traced.empty_out:
        return None
    taken = {s.mil_name for s in tuple(in_specs) + tuple(out_specs)}

    def rows(empties):
        out = []
        for k in sorted(empties):
            e = empties[k]
            name, n = feature_name(e.name), 1
            while name in taken:
                name, n = f"{feature_name(e.name)}_{n}", n + 1
            taken.add(name)
            out.append({"position": k, "name": e.name, "mil_name": name,
                        "shape": list(e.shape), "dtype": e.dtype})
        return out

    return {"inputs": rows(traced.empty_in), "outputs": rows(traced.empty_out)}


def nan_sign_rows(traced, in_specs) -> Optional[dict]:
    """``NAN_SIGN``'s JSON (None when no input reaches a top_k)."""
    if not traced.nan_sign:
        return None
    where = traced.leaf_inputs()
    return {in_specs[where[i]].mil_name: w for i, w in traced.nan_sign.items()}


def write_host_parts(meta: MutableMapping[str, str], traced, in_specs, out_specs) -> None:
    """The keys of a program's host parts: randomness, zero-size leaves, NaN-sign checks."""
    if traced.host is not None:
        write(meta, RANDOM, random_rows(traced.host, in_specs))
    empty = empty_rows(traced, in_specs, out_specs)
    if empty is not None:
        write(meta, EMPTY, empty)
    nan = nan_sign_rows(traced, in_specs)
    if nan is not None:
        write(meta, NAN_SIGN, nan)


# -- reading --------------------------------------------------------------------------------

def read(meta, key: str, default=None):
    """The JSON under ``key`` (``default`` when absent); ``PackageError`` when malformed."""
    raw = meta.get(key)
    if raw is None:
        return default
    try:
        return json.loads(raw)
    except ValueError as e:
        raise PackageError(f"the package's {key} metadata is malformed "
                           f"({type(e).__name__}: {e})") from None


def dims(values) -> tuple:
    """A shape from the metadata: ints, and flexible dims by name (docs/flexible.md)."""
    return tuple(d if isinstance(d, str) else int(d) for d in values)


def read_io(meta) -> Tuple[Optional[Tuple[IOSpec, ...]], Optional[Tuple[IOSpec, ...]]]:
    """The (inputs, outputs) IOSpecs of ``IO`` (None, None for a package without it: one
    rlxjax did not write)."""
    raw = meta.get(IO)
    if raw is None:
        return None, None
    try:
        io = json.loads(raw)

        def specs(rows):
            return tuple(IOSpec(name=str(r["name"]), mil_name=str(r["mil_name"]),
                                shape=dims(r["shape"]), dtype=str(r["dtype"]),
                                io_shape=dims(r["io_shape"]), io_dtype=str(r["io_dtype"]),
                                bounds=tuple(tuple(b) if b else None
                                             for b in r.get("bounds", ()))) for r in rows)

        ins, outs = specs(io["inputs"]), specs(io["outputs"])
        for s in ins + outs:
            np.dtype(s.dtype), np.dtype(s.io_dtype)  # noqa: B018 - validates the names
            if not s.flexible and (int(np.prod(s.shape, dtype=np.int64))
                                   != int(np.prod(s.io_shape, dtype=np.int64))):
                raise ValueError(f"'{s.name}': shape {s.shape} vs io_shape {s.io_shape}")
    except (ValueError, KeyError, TypeError) as e:
        raise PackageError(f"the package's {IO} metadata is malformed "
                           f"({type(e).__name__}: {e})") from None
    return ins, outs


def read_str_dict(meta, key: str) -> Dict[str, str]:
    """A JSON object of strings under ``key`` (``NAN_SIGN``), {} when absent."""
    raw = meta.get(key)
    if raw is None:
        return {}
    try:
        d = json.loads(raw)
    except ValueError:
        d = None
    if not isinstance(d, dict) or not all(isinstance(v, str) for v in d.values()):
        raise PackageError(f"the package's {key} metadata is malformed (expected a JSON "
                           "object of strings)")
    return d


def read_empty(meta, n_in: int, n_out: int):
    """The package's zero-size inputs and outputs (``EMPTY``): ({position: (feature-style
    name, EmptyIO)} for inputs, the same for outputs), given the numbers of real input and
    output features."""
    from .frontend.zerosize import EmptyIO

    raw = meta.get(EMPTY)
    if raw is None:
        return {}, {}
    try:
        io = json.loads(raw)

        def rows(rs, n_real):
            out = {}
            for r in rs:
                k, shape = int(r["position"]), tuple(int(d) for d in r["shape"])
                if k in out or any(d < 0 for d in shape) or 0 not in shape:
                    raise ValueError(f"position {k}, shape {shape}")
                out[k] = (str(r["mil_name"]),
                          EmptyIO(str(r["name"]), shape, np.dtype(str(r["dtype"])).name))
            if any(not 0 <= k < n_real + len(out) for k in out):
                raise ValueError(f"positions {sorted(out)} with {n_real} features")
            return out

        return rows(io["inputs"], n_in), rows(io["outputs"], n_out)
    except (ValueError, KeyError, TypeError) as e:
        raise PackageError(f"the package's {EMPTY} metadata is malformed "
                           f"({type(e).__name__}: {e})") from None
