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
