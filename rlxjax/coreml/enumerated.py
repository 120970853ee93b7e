"""Flexible inputs with listed sizes as Core ML enumerated shapes (docs/flexible.md).

``flexible={"x": {0: [1, 8, 32]}}`` lists the sizes an axis takes; Core ML describes such an
input with ``enumeratedShapes`` instead of a ``shapeRange``.
"""
from __future__ import annotations

import dataclasses
import itertools

from ..errors import ArgumentError

MAX_ENUMERATED = 128  # Core ML's limit on enumerated shapes per input


def describe_enumerated(model, specs, enumerated, target) -> list:
    """Turn the ``shapeRange`` of inputs whose flexible dims are enumerated into
    ``enumeratedShapes`` (docs/flexible.md): every combination of the enumerated symbols'
    sizes, in one order for every input (Core ML pairs the k-th shapes of several inputs,
    iOS18+; before iOS18 one input only). Returns the specs with the sizes in their bounds."""
    syms = sorted(enumerated)
    combos = list(itertools.product(*(enumerated[s] for s in syms)))
    feats = {f.name: f for f in model.description.input}
    out, n_enum = [], 0
    for spec in specs:
        dims = [d for d in spec.shape if isinstance(d, str)]
        if not any(d in enumerated for d in dims):
            out.append(spec)
            continue
        ranged = [d for d in dims if d not in enumerated]
        if ranged:
            raise ArgumentError(
                f"argument '{spec.name}' mixes enumerated and range flexible axes "
                f"({ranged} are ranges): a Core ML input has one kind; make them all "
                "enumerated (lists) or all ranges ((lower, upper))")
        n_enum += 1
        if len(combos) > MAX_ENUMERATED:
            raise ArgumentError(f"{len(combos)} enumerated shapes for '{spec.name}': Core ML "
                                f"takes at most {MAX_ENUMERATED}")
        arr = feats[spec.mil_name].type.multiArrayType
        arr.ClearField("shapeRange")
        shapes = []
        for combo in combos:
            size = dict(zip(syms, combo))
            shapes.append([size[d] if isinstance(d, str) else d for d in spec.io_shape])
        for shp in shapes:
            arr.enumeratedShapes.shapes.add(shape=shp)
        del arr.shape[:]
        arr.shape.extend(shapes[0])
        out.append(dataclasses.replace(spec, bounds=tuple(
            (b[0], b[1], tuple(enumerated[d])) if isinstance(d, str) else b
            for d, b in zip(spec.shape, spec.bounds))))
    if n_enum > 1 and not target.at_least("iOS18"):
        raise ArgumentError(
            f"{n_enum} inputs have enumerated shapes: before iOS18 Core ML takes enumerated "
            "shapes on one input only; compile with target='iOS18' or use ranges")
    return out
