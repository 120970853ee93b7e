"""A multifunction package's metadata (``metadata.merge_functions``) is the same bytes
whatever order each function's metadata map iterates in: a protobuf map (Core ML's
``userDefined``) iterates in an order that changes from process to process."""
from __future__ import annotations

import json

from rlxjax import metadata


def test_the_merged_metadata_does_not_depend_on_the_maps_iteration_order():
    rows = {metadata.VERSION: "9.9", metadata.IO: json.dumps({"inputs": [], "outputs": []}),
            metadata.STATEFUL: json.dumps({"argument": "cache"}),
            metadata.TRAIN: json.dumps({"state": "io"})}
    forward = dict(rows)
    backward = dict(reversed(list(rows.items())))
    assert list(forward) != list(backward)
    a = metadata.merge_functions([("f", forward), ("g", backward)], "f")
    b = metadata.merge_functions([("f", backward), ("g", forward)], "f")
    assert a[metadata.FUNCTIONS] == b[metadata.FUNCTIONS]
    merged = json.loads(a[metadata.FUNCTIONS])
    assert [r["name"] for r in merged["functions"]] == ["f", "g"]
    assert merged["functions"][0]["metadata"][metadata.STATEFUL] == {"argument": "cache"}
    assert a[metadata.VERSION] == "9.9" and metadata.IO not in a


def test_the_merged_weight_file_takes_an_ops_blobs_in_name_order():
    """An op's constants in a weight file are visited by attribute / input name, not in the
    map's iteration order (which changes between processes and reorders the merged weight
    file: tests/program_hashes.py saw a multifunction package's blobs swap places)."""
    from coremltools.proto import MIL_pb2

    from rlxjax.coreml.multifunction import _blob_values

    def block(order):
        b = MIL_pb2.Block()
        op = b.operations.add(type="constexpr_blockwise_shift_scale")
        for name in order:
            op.attributes[name].blobFileValue.fileName = f"@model_path/weights/{name}.bin"
        return b

    names = ["scale", "data", "offset"]
    seen = [[v.blobFileValue.fileName for v in _blob_values(block(o))]
            for o in (names, names[::-1])]
    assert seen[0] == seen[1] == [f"@model_path/weights/{n}.bin" for n in sorted(names)]
