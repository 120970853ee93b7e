"""``rlxjax inspect``: describe a saved package, a Core ML ``.mlpackage`` or a Core AI
``.aimodel``.

Its inputs, outputs, training roles, target and op histogram. The package is read by
rlxjax's own checked readers (rlxjax/coreml/loaded.py, rlxjax/coreai/loaded.py), which
open only files inside it: a manifest or a symlink naming a file elsewhere is refused."""
from __future__ import annotations

import json
import os
from collections import Counter

from . import metadata as keys
from . import coremltools_quiet  # noqa: F401  (first: coremltools, quietly)
from .coreml.mil import operations

_SPEC_TO_TARGET = {6: "iOS15 / macOS12", 7: "iOS16 / macOS13", 8: "iOS17 / macOS14",
                   9: "iOS18 / macOS15", 10: "iOS26 / macOS26"}


class InspectError(Exception):
    """A path that is not a readable Core ML package (one-line message)."""


def load(path):
    """The model protobuf of the ``.mlpackage`` at ``path``."""
    from .coreml.loaded import _parse_model, _read_manifest
    from .errors import PackageError

    path = os.path.abspath(os.fspath(path))
    if not os.path.exists(path):
        raise InspectError(f"no such file or directory: {path}")
    if not (os.path.isdir(path) and os.path.isfile(os.path.join(path, "Manifest.json"))):
        raise InspectError(f"not a package: {path} (rlxjax inspect reads a Core ML "
                           "'.mlpackage' folder with a Manifest.json, or a Core AI "
                           "'.aimodel' folder)")
    try:
        model_file, _ = _read_manifest(path)
        return _parse_model(model_file)
    except PackageError as e:
        raise InspectError(f"cannot read the Core ML package: {e}") from None


def _array_type(feature):
    from coremltools.proto import FeatureTypes_pb2

    t = feature.type
    kind = t.WhichOneof("Type")
    if kind == "stateType" and t.stateType.WhichOneof("Type") == "arrayType":
        arr = t.stateType.arrayType
        dtype = FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(arr.dataType)
        return dtype.lower(), list(arr.shape)
    if kind != "multiArrayType":
        return kind or "?", []
    dtype = FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(t.multiArrayType.dataType)
    return dtype.lower(), list(t.multiArrayType.shape)


def _ops(spec):
    if spec.WhichOneof("Type") != "mlProgram":
        return None, None
    counts = Counter(op.type for op in operations(spec))
    return counts, [fn.opset for fn in spec.mlProgram.functions.values()]


def describe(path) -> str:
    if os.fspath(path).rstrip("/" + os.sep).endswith(".aimodel"):
        from .errors import PackageError, RlxError
        from .inspect_aimodel import describe_aimodel

        try:
            return describe_aimodel(path)
        except PackageError as e:
            raise InspectError(f"cannot read the Core AI package: {e}") from None
        except RlxError as e:  # coreai-core missing or of another version
            raise InspectError(str(e).strip().splitlines()[0]) from None
    spec = load(path)
    if len(spec.description.functions):
        return _describe_multifunction(path, spec)
    return _describe(path, spec)


def _describe_multifunction(path, spec) -> str:
    """A multifunction package: the header, then each function as a package of its own
    (its features, roles and cost), indented."""
    from .coreml.multifunction import function_view

    names = [f.name for f in spec.description.functions]
    default = spec.description.defaultFunctionName
    head = _describe(path, spec, header_only=True).splitlines()
    head.append(f"  functions ({len(names)}): " + ", ".join(
        n + (" (default)" if n == default else "") for n in names) +
        "; an app picks one with MLModelConfiguration.functionName")
    for name in names:
        try:
            body = _describe(path, function_view(spec, name)).splitlines()[2:]
        except Exception as e:  # noqa: BLE001 - a malformed function: say so, go on
            body = [f"  (cannot describe: {type(e).__name__}: {e})"]
        head.append(f"  function '{name}':")
        head += ["  " + line for line in body if not line.startswith("  written by")]
    return "\n".join(head)


def _describe(path, spec, header_only: bool = False) -> str:
    meta = dict(spec.description.metadata.userDefined)
    roles = {}
    if keys.TRAIN in meta:
        try:
            train = json.loads(meta[keys.TRAIN])
            for row in train.get("inputs", []) + train.get("outputs", []):
                roles[row.get("feature")] = row
            for row in train.get("states", []):
                roles[row.get("name")] = row
        except (ValueError, TypeError):
            roles = {}
    lines = [f"{os.path.abspath(os.fspath(path))}"]
    kind = spec.WhichOneof("Type")
    target = _SPEC_TO_TARGET.get(spec.specificationVersion, "unknown")
    counts, opsets = _ops(spec)
    lines.append(f"  model type: {kind}; specification version {spec.specificationVersion} "
                 f"(deployment target {target})" +
                 (f"; opset {', '.join(sorted(set(opsets)))}" if opsets else ""))
    if keys.VERSION in meta:
        lines.append(f"  written by rlxjax {meta[keys.VERSION]}")
    if header_only:
        return "\n".join(lines)
    if keys.PREDICT in meta:
        lines.append("  predict: " + (
            "reads the parameters from the training states (the weights the latest "
            "train_step wrote)" if '"states"' in meta[keys.PREDICT] else
            "takes the parameters as inputs (feed the new_param outputs of train_step)"))
    if keys.TRAIN in meta:
        lines.append(f"  a training step (metadata '{keys.TRAIN}'): " + (
            "parameters and optimizer state live in the Core ML states below, updated in "
            "place by every call" if len(spec.description.state) else
            "outputs marked '-> x' feed input x on the next call"))
    sections = [("inputs", spec.description.input), ("outputs", spec.description.output)]
    if len(spec.description.state):
        sections.append(("states", spec.description.state))
    for title, features in sections:
        lines.append(f"  {title} ({len(features)}):")
        rows = []
        for f in features:
            dtype, shape = _array_type(f)
            row = roles.get(f.name, {})
            role = (f"[{row['role']}" + (f" -> {row['feeds']}" if "feeds" in row else "") +
                    "]") if "role" in row else ""
            path = f.shortDescription if f.shortDescription else "-"
            rows.append((f.name, f"{dtype}{shape}", path, role))
        widths = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
        for r in rows:
            lines.append("    " + "  ".join(c.ljust(w) for c, w in zip(r, widths + [0])).rstrip())
    lines += _empty_lines(meta)
    if counts is not None:
        lines += _cost_lines(spec, counts)
    return "\n".join(lines)


def _empty_lines(meta):
    """The zero-size inputs / outputs the package lists (not Core ML features)."""
    EMPTY_IO_KEY = keys.EMPTY

    try:
        empty = json.loads(meta[EMPTY_IO_KEY]) if EMPTY_IO_KEY in meta else None
        rows = [(title, r["mil_name"], f"{r['dtype']}{list(r['shape'])}", r["name"])
                for title in ("inputs", "outputs") for r in (empty or {}).get(title, [])]
    except (ValueError, TypeError, KeyError):
        return [f"  zero-size inputs / outputs: metadata '{keys.EMPTY}' is malformed"]
    if not rows:
        return []
    lines = ["  zero-size inputs / outputs (not Core ML features; rlxjax.load takes and "
             "returns them as empty arrays):"]
    for title, name, t, path in rows:
        lines.append(f"    {title[:-1]:<7}{name}  {t}  {path}")
    return lines


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def _count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} "


def _cost_lines(spec, counts):
    from .coreml.cost import analyse, by_type

    n = sum(v for k, v in counts.items() if k != "const")
    try:
        cost = analyse(spec, next(iter(spec.mlProgram.functions)))
    except Exception:  # a foreign program the cost model cannot read: op counts only
        cost = None
    lines = [f"  MIL ops: {n} (+ {counts.get('const', 0)} const)"]
    if cost is None:
        for op, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if op != "const":
                lines.append(f"    {op:<24}{c}")
        return lines
    lines.append(f"  weights: {_size(cost['weight_bytes'])} in constants")
    lines.append(f"  estimated cost per call (a static model; loop bodies counted once): "
                 f"{_count(cost['flops'])}FLOP, {_size(cost['bytes_read'])} read, "
                 f"{_size(cost['bytes_written'])} written")
    lines.append(f"    {'op':<24}{'count':>6}{'FLOPs':>12}{'read':>12}{'written':>12}")
    for op, a in by_type(cost["ops"]).items():
        lines.append(f"    {op:<24}{a['count']:>6}{_count(a['flops']):>12}"
                     f"{_size(a['bytes_read']):>12}{_size(a['bytes_written']):>12}")
    return lines
