"""Flexible shapes on Core AI (docs/flexible.md, docs/coreai.md): a *range* compiles to
one Core AI function with dynamic dims; *enumerated* sizes to one static Core AI function
per shape, in one asset, chosen by the call's sizes.

A range (``flexible={"x": {0: (1, 64)}}``, or JAX's symbolic shapes) is lowered once: the
function's inputs have ``?`` dims and the shapes that depend on them are computed in the
program (coreai/dynamic.py); ops that cannot take a dynamic dim there are refused by name.

Enumerated sizes (``flexible={"x": {0: [1, 8, 64]}}``) are *specialised*: for every
combination of its enumerated sizes the RLX graph is copied with each ``Dyn`` dim evaluated
(``dim_size`` a constant), folded again, and lowered as a static function named
``<function>__<symbol>_<size>...`` (static shapes: what the Neural Engine compiles). The
per-function metadata ``rlxjax.coreai.shapes`` lists which Core AI function serves which
sizes; a call picks it from the sizes of its inputs (after the same size check as Core ML's,
rlxjax/flexible.py ``check_sizes``).

A program mixing both (one symbol a range, another enumerated) is refused.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .. import metadata
from ..errors import ArgumentError, DynamicShapeError
from ..ir import Dyn, Graph, TensorType
from ..ir.flexible import eval_dim, parse_dim

#: per-function metadata: [{"function": Core AI function name, "sizes": {symbol: size}}]
SHAPES = "rlxjax.coreai.shapes"
#: at most this many static functions per flexible program (Core ML's enumerated limit)
MAX_SHAPES = 128

_ARITH = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "max": max, "min": min}


def is_flexible(graph: Graph) -> bool:
    return any(not v.type.is_static for _, v in graph.inputs)


def _symbols(graph: Graph) -> Dict[str, Tuple[str, int, tuple]]:
    """symbol -> (the first input that has it, its axis, its bounds)."""
    syms: Dict[str, Tuple[str, int, tuple]] = {}
    for name, v in graph.inputs:
        for axis, d in enumerate(v.type.shape):
            if isinstance(d, Dyn):
                syms.setdefault(d.name, (name, axis, d.bounds or (1, -1)))
    return syms


def is_range(graph: Graph, enumerated: Dict[str, tuple]) -> bool:
    """Whether the graph's flexible symbols are ranges (one function with dynamic dims),
    not enumerated sizes; DynamicShapeError when it has both."""
    syms = _symbols(graph)
    ranges = sorted(s for s in syms if s not in enumerated)
    if ranges and len(ranges) < len(syms):
        name, axis, _ = syms[ranges[0]]
        raise DynamicShapeError(
            f"input '{name}' axis {axis} has a flexible range while other flexible axes list "
            "enumerated sizes: format='aimodel' compiles either one function with dynamic "
            "dims (ranges) or one static function per shape (enumerated sizes); make every "
            "flexible axis a range, or list the sizes of each")
    return bool(ranges)


def combinations(graph: Graph, enumerated: Dict[str, tuple]) -> List[Dict[str, int]]:
    """Every combination of the sizes of the graph inputs' (enumerated) flexible symbols
    (sorted by symbol, each symbol's sizes ascending)."""
    syms = _symbols(graph)
    order = sorted(syms)
    combos = [dict(zip(order, c)) for c in itertools.product(*(enumerated[s] for s in order))]
    if len(combos) > MAX_SHAPES:
        raise ArgumentError(f"{len(combos)} enumerated shapes: format='aimodel' compiles one "
                            f"function per shape and takes at most {MAX_SHAPES}")
    return combos


def dim_value(d, sizes: Dict[str, int]) -> int:
    if not isinstance(d, Dyn):
        return d
    return int(eval_dim(parse_dim(d.name), sizes.__getitem__, int,
                        lambda op, a, b: _ARITH[op](a, b)))


def _param(v, sizes):
    if isinstance(v, Dyn):
        return dim_value(v, sizes)
    if isinstance(v, tuple):
        return tuple(_param(x, sizes) for x in v)
    return v


def _type(t: TensorType, sizes) -> TensorType:
    return t if t.is_static else TensorType(tuple(dim_value(d, sizes) for d in t.shape),
                                            t.dtype)


def specialise(graph: Graph, sizes: Dict[str, int]) -> Graph:
    """A copy of ``graph`` (its regions too) with every flexible dim the size ``sizes``
    gives it: ``dim_size`` nodes become int32 constants, ``Dyn`` parameters ints, and the
    types are inferred again by ``add_node`` (the same checks as a static trace's)."""
    new = Graph(graph.name)
    env = {v.id: new.add_input(n, _type(v.type, sizes)) for n, v in graph.inputs}
    for node in graph.nodes:
        if node.op == "dim_size":
            value = np.asarray(dim_value(Dyn(node.params["dim"]), sizes), np.int32)
            out = new.add_node("constant", [], {"value": value}, node.source)
        else:
            params = {k: _param(v, sizes) for k, v in node.params.items()}
            regions = {k: tuple(specialise(g, sizes) for g in r) if isinstance(r, tuple)
                       else specialise(r, sizes) for k, r in node.regions.items()}
            out = new.add_node(node.op, [env[v.id] for v in node.inputs], params, node.source,
                               regions or None)
        env.update((v.id, w) for v, w in zip(node.outputs, out.outputs))
    for n, v in graph.outputs:
        new.add_output(n, env[v.id])
    return new


def graph_name(function: str, sizes: Dict[str, int]) -> str:
    """The Core AI function of ``function`` that serves ``sizes``."""
    return function + "__" + "_".join(f"{s}_{n}" for s, n in sorted(sizes.items()))


def shape_rows(function: str, combos: Sequence[Dict[str, int]]) -> list:
    return [{"function": graph_name(function, c), "sizes": dict(c)} for c in combos]


def _named(shape) -> tuple:
    return tuple(d.name if isinstance(d, Dyn) else d for d in shape)


def flexible_specs(graph: Graph, states, lowered, enumerated) -> Tuple[tuple, tuple]:
    """The (inputs, outputs) IOSpecs of the flexible program, from those of one of its
    static functions (``lowered``: the same names, features and dtypes): flexible dims by
    name, inputs with their bounds and enumerated sizes (as rlxjax/coreml/enumerated.py
    writes them, so the host checks a call the same way)."""
    bound = dict(states or {})
    written = {o for o in bound.values() if o is not None}
    ins = [v.type for n, v in graph.inputs if n not in bound]
    outs = [v.type for n, v in graph.outputs if n not in written]

    def spec(s, t: TensorType, with_bounds: bool):
        if t.is_static:
            return s
        bounds = () if not with_bounds else tuple(
            (*(d.bounds or (1, -1)), *((tuple(enumerated[d.name]),) if d.name in enumerated
                                       else ())) if isinstance(d, Dyn) else None
            for d in t.shape)
        return dataclasses.replace(s, shape=_named(t.shape), io_shape=_named(t.shape),
                                   bounds=bounds)

    return (tuple(spec(s, t, True) for s, t in zip(lowered.inputs, ins)),
            tuple(spec(s, t, False) for s, t in zip(lowered.outputs, outs)))


def pick(rows: Sequence[dict], in_specs, feeds) -> str:
    """The Core AI function of ``rows`` (``shape_rows``) for the sizes of ``feeds``."""
    sizes: Dict[str, int] = {}
    for s in in_specs:
        if s.flexible and s.mil_name in feeds:
            for d, n in zip(s.shape, np.shape(feeds[s.mil_name])):
                if isinstance(d, str):
                    sizes[d] = int(n)
    for r in rows:
        if r["sizes"] == sizes:
            return r["function"]
    raise ArgumentError(f"no function of this Core AI program serves the sizes {sizes}: it "
                        f"was compiled for {[r['sizes'] for r in rows]}")


def read_rows(meta) -> list:
    """``SHAPES`` of a function's metadata ([] for a static function)."""
    return metadata.read(meta, SHAPES, [])


def lower_variants(program, lower_program) -> list:
    """``[(sizes, lower.Lowered)]``: ``program`` specialised to each of its enumerated
    shapes, folded as a static program is (transforms/pipeline.py ``BEFORE_LOWERING``) and
    lowered by ``lower_program``."""
    from ..transforms import pipeline

    out = []
    for sizes in combinations(program.graph, program.enumerated):
        graph = specialise(program.graph, sizes)
        pipeline.run_passes(graph, pipeline.BEFORE_LOWERING,
                            precision="fp32" if program.precision == "mixed" else program.precision)
        traced = dataclasses.replace(program.traced, graph=graph)
        out.append((sizes, lower_program(dataclasses.replace(program, traced=traced))))
    return out
