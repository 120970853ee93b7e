"""The format-neutral program: what the transforms hand to a format (rlxjax/formats/).

A ``Program`` is the RLX graph after every transform, with its signature and host parts
(``Traced``: pytree structures, the host's random draws, zero-size leaves, NaN-sign checks),
the states and their roles, and what the target and precision are. A format lowers it once
(``Format.compile``) into an ``Executable``; the metadata it writes comes from
rlxjax/metadata.py, the same for every format.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from .frontend import Traced
from .ir import Graph


@dataclass
class Program:
    traced: Traced
    target: object      # the format's Target (resolved once, formats/base.py)
    #: "fp32" | "fp16" | "mixed" (a mixed-precision training step: the graph's own dtypes,
    #: its f16 values computed in fp16; training/mixed_precision.py)
    precision: str
    #: graph input name -> the graph output written back into it at the end of a call (a
    #: state the program updates), or None (a state it only reads); None: no states
    states: Optional[Dict[str, Optional[str]]] = None
    #: flexible= sizes given as lists: flexible dim name -> the sizes (docs/flexible.md)
    enumerated: Dict[str, tuple] = field(default_factory=dict)

    @property
    def graph(self) -> Graph:
        return self.traced.graph
