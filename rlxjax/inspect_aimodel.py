"""``rlxjax inspect`` of a Core AI ``.aimodel``: its functions, each one's inputs, outputs
and states (with training roles) as its program declares them, and its op histogram.

Raises the loader's ``PackageError`` (or an ``RlxError`` when coreai-core is missing), which
rlxjax/inspect_package.py turns into its one-line ``InspectError``. The asset goes through
the loader's checks first (rlxjax/coreai/loaded.py: its three
files regular and inside the folder, ``main.hash`` matching); nothing of Apple's runtime
runs, only coreai-core's parser of the program (``ca_private``).
"""
from __future__ import annotations

import json
import os
import re
from collections import Counter

from . import metadata as keys


def _roles(meta) -> dict:
    try:
        train = json.loads(meta[keys.TRAIN]) if keys.TRAIN in meta else {}
        rows = train.get("inputs", []) + train.get("outputs", [])
        roles = {r.get("feature"): r for r in rows}
        roles.update({r.get("name"): r for r in train.get("states", [])})
        return roles
    except (ValueError, TypeError, AttributeError):
        return {}


def _table(title, rows, roles) -> list:
    lines = [f"    {title} ({len(rows)}):"]
    cells = []
    for name, shape, dtype in rows:
        r = roles.get(name, {})
        role = (f"[{r['role']}" + (f" -> {r['feeds']}" if "feeds" in r else "") + "]"
                if "role" in r else "")
        cells.append((name, f"{dtype}{list(shape)}", role))
    widths = [max((len(c[i]) for c in cells), default=0) for i in range(2)]
    for c in cells:
        lines.append("      " + "  ".join(x.ljust(w) for x, w in zip(c, widths + [0])).rstrip())
    return lines


def describe_aimodel(path) -> str:
    from .coreai import ca_private
    from .coreai.loaded import _creator_metadata, _signatures, check_asset

    path = os.path.abspath(os.fspath(path))
    check_asset(path)
    meta = _creator_metadata(path)
    sigs = _signatures(path)
    text = str(ca_private.coreai().AIModelAsset.load(path).program)
    default, names = keys.function_names(meta)
    lines = [path, "  model type: Core AI program (.aimodel), run by Apple's Core AI runtime"]
    if keys.VERSION in meta:
        lines.append(f"  written by rlxjax {meta[keys.VERSION]}")
    graphs = list(sigs)
    lines.append(f"  functions ({len(graphs)}): " + ", ".join(
        g + (" (default)" if g == default else "") for g in graphs))
    for g in graphs:
        fmeta = keys.function_metadata(meta, g) if g in (names or ()) else meta
        roles = _roles(fmeta)
        lines.append(f"  function '{g}':")
        if keys.TRAIN in fmeta:
            lines.append("    a training step: " + (
                "parameters and optimizer state live in the states below, updated in place "
                "by every call" if sigs[g]["states"] else
                "outputs marked '-> x' feed input x on the next call"))
        for title in ("inputs", "outputs", "states"):
            if sigs[g][title] or title != "states":
                lines += _table(title, sigs[g][title], roles)
    counts = Counter(t.rpartition(".")[2] for t in re.findall(r"= coreai\.([a-z_0-9.]+)", text))
    n = sum(v for k, v in counts.items() if k != "constant")
    lines.append(f"  Core AI ops: {n} (+ {counts.get('constant', 0)} constant)")
    for op, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if op != "constant":
            lines.append(f"    {op:<32}{c}")
    return "\n".join(lines)
