"""Text form of an RLX graph (``print(graph)``); ``ir/parser.py`` reads it back.

::

    graph f(
        %0: f32[3,4]  # x
    ) {
        %1: f32[] = constant() {value=f32[](0.5)}
        %2: f32[3,4] = mul(%0, %1)
        %3: f32[3] = reduce_sum(%2) {axes=(1,)}
        %4: f32[3] = cond(%9, %3) {}
            branches[0]: graph branch0(
                ...
            }
        return out=%3
    }

Parameter values print as Python literals (ints, floats with ``repr``'s exact shortest
form, strings, ``None``/``True``/``False``, tuples), dtypes as their names (``f32``) and
arrays as ``dtype[shape](elements)``: up to ``SMALL`` elements as decimal numbers that read
back to the same bits, larger ones (and any that would not read back exactly, e.g. a NaN
payload) as ``b64:`` base64 of their little-endian bytes, so the text is exact. Regions
follow their node, one level deeper, named ``key:`` or ``key[i]:``. Names that are not
plain (spaces, quotes, ``=``...) print as JSON strings. ``sources=True`` adds each node's
source line as ``loc("file.py:12 (f)")``.
"""
from __future__ import annotations

import base64
import json
import math
import re
from typing import Any

import numpy as np

from .types import DType, Dyn, dtype_from_numpy

SMALL = 16  # arrays up to this many elements print their values as decimals
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.<>\[\]:/@+\-]+\Z")


def format_graph(g, indent: str = "", *, sources: bool = False) -> str:
    lines = [f"{indent}graph {format_name(g.name)}("]
    lines += [f"{indent}    %{v.id}: {v.type}  # {format_name(name)}" for name, v in g.inputs]
    lines.append(f"{indent}) {{")
    for n in g.nodes:
        outs = ", ".join(f"%{v.id}: {v.type}" for v in n.outputs)
        args = ", ".join(f"%{v.id}" for v in n.inputs)
        params = f" {format_params(n.params)}" if n.params else ""
        loc = f" loc({json.dumps(n.source)})" if sources and n.source else ""
        lines.append(f"{indent}    {outs} = {n.op}({args}){params}{loc}")
        for key, r in n.regions.items():
            for label, sub in ([(f"{key}[{i}]", s) for i, s in enumerate(r)]
                               if isinstance(r, tuple) else [(key, r)]):
                text = format_graph(sub, indent + "        ", sources=sources)
                lines.append(f"{indent}        {label}: {text.lstrip()}")
    rets = ", ".join(f"{format_name(name)}=%{v.id}" for name, v in g.outputs)
    lines.append(f"{indent}    return {rets}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def format_name(name: str) -> str:
    return name if _PLAIN_NAME.match(name) else json.dumps(name)


def format_params(params) -> str:
    return "{" + ", ".join(f"{k}={format_value(v)}" for k, v in params.items()) + "}"


def format_value(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return format_array(v)
    if isinstance(v, tuple):
        inner = ", ".join(format_value(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, (bool, int, str)) or v is None:
        return repr(v)
    if isinstance(v, float):
        return repr(v)  # shortest exact form; inf, -inf and nan read back too
    if isinstance(v, Dyn):
        return f"Dyn({json.dumps(v.name)})"
    if isinstance(v, DType):
        return v.value
    raise TypeError(f"cannot print a parameter of type {type(v).__name__}")


def format_array(a: np.ndarray) -> str:
    head = f"{dtype_from_numpy(a.dtype)}[{','.join(map(str, a.shape))}]"
    if a.size <= SMALL:
        body = _decimals(a)
        if body is not None:
            return f"{head}({body})"
    raw = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
    return f"{head}(b64:{base64.b64encode(raw).decode('ascii')})"


def _decimals(a: np.ndarray):
    """The elements as decimals that read back to the same bits, else None."""
    flat = a.reshape(-1)
    if a.dtype == np.bool_:
        return ", ".join("True" if x else "False" for x in flat)
    if a.dtype.kind in "iu":
        return ", ".join(str(int(x)) for x in flat)
    words = []
    for x in flat:
        f = float(x)
        if math.isnan(f):
            return None  # a NaN's sign and payload: exact only as bytes
        words.append(np.format_float_positional(x, unique=True, trim="-")
                     if math.isfinite(f) and (f == 0 or 1e-4 <= abs(f) < 1e16)
                     else repr(f) if not math.isfinite(f)
                     else np.format_float_scientific(x, unique=True, trim="-"))
    back = np.array([float(w) for w in words], np.float64).astype(a.dtype)
    if back.tobytes() != np.ascontiguousarray(flat).tobytes():
        return None
    return ", ".join(words)
