"""Readable text form of an RLX graph (``print(graph)``); regions print nested."""
from __future__ import annotations

from .graph import Graph, Params


def format_graph(g: Graph, indent: str = "") -> str:
    from .control import regions

    lines = [f"{indent}graph {g.name}("]
    lines += [f"{indent}    %{v.id}: {v.type}  # {name}" for name, v in g.inputs]
    lines.append(f"{indent}) {{")
    for n in g.nodes:
        outs = ", ".join(f"%{v.id}: {v.type}" for v in n.outputs)
        args = ", ".join(f"%{v.id}" for v in n.inputs)
        subs = list(regions(n))
        shown = n.params if not subs else Params(
            {k: v for k, v in n.params.items() if not _holds_graph(v)})
        params = "" if not shown else f" {shown!r}"
        lines.append(f"{indent}    {outs} = {n.op}({args}){params}")
        for sub in subs:
            lines.append(format_graph(sub, indent + "        "))
    rets = ", ".join(f"{name}=%{v.id}" for name, v in g.outputs)
    lines.append(f"{indent}    return {rets}")
    lines.append(f"{indent}}}")
    return "\n".join(lines)


def _holds_graph(v) -> bool:
    return isinstance(v, Graph) or (isinstance(v, tuple) and any(isinstance(x, Graph) for x in v))
