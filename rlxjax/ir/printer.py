"""Readable text form of an RLX graph (``print(graph)``)."""
from __future__ import annotations

from .graph import Graph


def format_graph(g: Graph) -> str:
    lines = [f"graph {g.name}("]
    lines += [f"    %{v.id}: {v.type}  # {name}" for name, v in g.inputs]
    lines.append(") {")
    for n in g.nodes:
        outs = ", ".join(f"%{v.id}: {v.type}" for v in n.outputs)
        args = ", ".join(f"%{v.id}" for v in n.inputs)
        params = "" if not n.params else f" {n.params!r}"
        lines.append(f"    {outs} = {n.op}({args}){params}")
    rets = ", ".join(f"{name}=%{v.id}" for name, v in g.outputs)
    lines.append(f"    return {rets}")
    lines.append("}")
    return "\n".join(lines)
