"""Multifunction ML Programs (iOS18): several compiled programs as the functions of one.

Core ML represents them as coremltools' ``save_multifunction`` writes them (read from
coremltools 9's ``models/utils.py`` and ``converters/mil/backend/mil/load.py``):

* ``mlProgram.functions`` holds one ``Function`` per name, each with its own inputs, opset
  and block; a constant both functions use is one ``BlobFileValue`` (the same file and
  offset) in both, so it is stored once (coremltools gets there with its
  ``const_deduplication`` pass across functions, then a weight id per shared const);
* the model description has no top-level inputs / outputs / states: it lists a
  ``FunctionDescription`` per function (``functions``: name, input, output, state) and
  ``defaultFunctionName``, the function an app gets unless it sets
  ``MLModelConfiguration.functionName``; ``specificationVersion`` >= 9 (iOS18).

``merge_programs`` builds that from single-function ``Model`` protobufs as rlxjax lowers
them, copying every weight into one new weight file and deduplicating the blobs by content
(dtype + bytes), so a weight the functions share takes its bytes once whatever each
function's lowering named it. The package metadata keeps each function's own ``rlxjax.*``
entries under ``rlxjax.functions`` (``function_metadata``), which ``rlxjax.load`` and
``rlxjax inspect`` read.

Runtime pitfall avoided (``check_no_output_aliases_state_write``): Core ML crashes loading
a stateful program whose function output is the very value a ``write_state`` stores
(reported against coremltools in apple/coremltools#2713, "Reject stateful programs whose
output aliases a state-write source": a segmentation fault in the runtime, no Python
error). Every function here is checked for it before the package is written (our
``write_state`` has no outputs, so the pattern is a block output naming a ``write_state``'s
``data``; ``predict`` writes no state at all). Memory
grows with the number of functions even when all weights are shared
(apple/coremltools#2351); two functions keep that small.
"""
from __future__ import annotations

import hashlib
import json
import os
from typing import Dict, Sequence, Tuple

from coremltools.proto import MIL_pb2, Model_pb2

from .. import metadata
from ..errors import RlxError
from .builder import WEIGHT_FILE
from .ct_private import blob_reader, blob_writer
from .mil import operations

FUNCTIONS_KEY = metadata.FUNCTIONS
IOS18_SPEC_VERSION = 9

# MIL data type -> the blob reader's / writer's method suffix (libmilstoragepython)
_BLOB_KIND = {
    MIL_pb2.FLOAT32: "float", MIL_pb2.FLOAT16: "fp16", MIL_pb2.INT8: "int8",
    MIL_pb2.UINT8: "uint8", MIL_pb2.INT16: "int16", MIL_pb2.UINT16: "uint16",
    MIL_pb2.INT32: "int32", MIL_pb2.UINT32: "uint32", MIL_pb2.INT4: "int4",
    MIL_pb2.UINT4: "uint4", MIL_pb2.UINT1: "uint1", MIL_pb2.UINT2: "uint2",
    MIL_pb2.UINT3: "uint3", MIL_pb2.UINT6: "uint6",
}


def _blob_values(block: MIL_pb2.Block):
    """Every ``Value`` stored in a weight file in ``block`` (nested blocks included):
    const ``val`` attributes and constant input bindings, each op's by name (a protobuf map
    iterates in an order that changes from process to process: the merged weight file
    would too)."""
    for op in operations(block):
        for _, v in sorted(op.attributes.items()):
            if v.WhichOneof("value") == "blobFileValue":
                yield v
        for _, arg in sorted(op.inputs.items()):
            for b in arg.arguments:
                if b.WhichOneof("binding") == "value" and \
                        b.value.WhichOneof("value") == "blobFileValue":
                    yield b.value


def _weight_path(weights_dir: str, file_name: str) -> str:
    prefix = "@model_path/weights/"
    if not file_name.startswith(prefix):
        raise RlxError(f"internal: blob file {file_name!r} is not under {prefix}")
    return os.path.join(weights_dir, file_name[len(prefix):])


def check_no_output_aliases_state_write(fn_name: str, block: MIL_pb2.Block) -> None:
    """Refuse a function whose output is a value a ``write_state`` stores (the runtime
    crash of apple/coremltools#2713; see the module doc)."""
    written = {}
    for op in operations(block):
        if op.type in ("write_state", "coreml_update_state"):
            for b in op.inputs["data" if "data" in op.inputs else "value"].arguments:
                state = op.inputs["input" if "input" in op.inputs else "state"].arguments
                written[b.name] = state[0].name if state else "?"
    aliased = [n for n in block.outputs if n in written]
    if aliased:
        raise RlxError(f"internal: function '{fn_name}' returns '{aliased[0]}', the value it "
                       f"writes into state '{written[aliased[0]]}': Core ML crashes loading "
                       "such a program (apple/coremltools#2713)")


def merge_programs(parts: Sequence[Tuple[str, Model_pb2.Model, str]], default: str,
                   weights_dir: str) -> Model_pb2.Model:
    """One multifunction Model from ``parts`` = (function name, single-function Model whose
    program is ``functions["main"]``, its weights folder). Weights go to
    ``weights_dir``/weight.bin, each distinct blob once. The parts are not modified."""
    names = [n for n, _, _ in parts]
    if len(set(names)) != len(names) or default not in names:
        raise RlxError(f"internal: functions {names}, default {default!r}")
    version = max(IOS18_SPEC_VERSION, *(m.specificationVersion for _, m, _ in parts))
    model = Model_pb2.Model(specificationVersion=version)
    model.mlProgram.version = 1
    desc = model.description
    desc.defaultFunctionName = default
    writer, readers, seen = None, {}, {}
    for name, part, part_weights in parts:
        src = part.mlProgram.functions["main"]
        fn = model.mlProgram.functions[name]
        fn.CopyFrom(src)
        check_no_output_aliases_state_write(name, fn.block_specializations[fn.opset])
        d = part.description
        desc.functions.add(name=name, input=d.input, output=d.output, state=d.state)
        for block in fn.block_specializations.values():
            for value in _blob_values(block):
                blob = value.blobFileValue
                kind = _BLOB_KIND.get(value.type.tensorType.dataType)
                if kind is None:
                    raise RlxError(f"internal: no blob encoding for MIL data type "
                                   f"{value.type.tensorType.dataType}")
                path = _weight_path(part_weights, blob.fileName)
                if path not in readers:
                    readers[path] = blob_reader(path)
                data = getattr(readers[path], f"read_{kind}_data")(blob.offset)
                key = (kind, hashlib.sha256(data.tobytes()).digest(), data.size)
                offset = seen.get(key)
                if offset is None:
                    if writer is None:
                        writer = blob_writer(os.path.join(weights_dir, WEIGHT_FILE))
                    offset = seen[key] = getattr(writer, f"write_{kind}_data")(data)
                blob.fileName = f"@model_path/weights/{WEIGHT_FILE}"
                blob.offset = offset
    del writer  # the weight file is complete once its writer is dropped
    meta = desc.metadata  # author, license, ... of the first part; rlxjax.* per function
    meta.CopyFrom(parts[0][1].description.metadata)
    merged = metadata.merge_functions(
        [(name, dict(part.description.metadata.userDefined)) for name, part, _ in parts], default)
    for k in [k for k in meta.userDefined if k not in merged]:
        del meta.userDefined[k]
    meta.userDefined[FUNCTIONS_KEY] = merged[FUNCTIONS_KEY]
    return model


def function_names(model: Model_pb2.Model) -> Tuple[str, ...]:
    """The functions a package declares (``("main",)`` for a single-function one)."""
    return tuple(f.name for f in model.description.functions) or ("main",)


def function_view(model: Model_pb2.Model, name: str) -> Model_pb2.Model:
    """A single-function Model of function ``name``: its description's inputs, outputs,
    states and its own ``rlxjax.*`` metadata at the top level, as a single-function
    package has them, and a copy of that one function (still named ``name``: the
    interpreter is told which function to run). For rlxjax.load and rlxjax inspect."""
    descs = {f.name: f for f in model.description.functions}
    if name not in descs:
        raise KeyError(name)
    view = Model_pb2.Model(specificationVersion=model.specificationVersion)
    fd = descs[name]
    view.description.input.extend(fd.input)
    view.description.output.extend(fd.output)
    view.description.state.extend(fd.state)
    view.description.metadata.CopyFrom(model.description.metadata)
    meta = view.description.metadata.userDefined
    raw = meta.pop(FUNCTIONS_KEY, None)
    if raw is not None:
        rows: Dict[str, dict] = {r["name"]: r["metadata"] for r in json.loads(raw)["functions"]}
        for k, v in rows.get(name, {}).items():
            meta[k] = v if isinstance(v, str) else json.dumps(v)
    view.mlProgram.version = model.mlProgram.version
    view.mlProgram.functions[name].CopyFrom(model.mlProgram.functions[name])
    return view
