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

#: A graph input named ``<state> + REREAD + <tag>`` (``reread_name``), where ``<state>`` is
#: a graph input of the program's ``states``, is one more read of that state: the same
#: value (a format reads it again where it is needed; every read comes before the write),
#: so that a value read early need not stay live until a late reader (training/
#: states/mlstate_graph.py: a train step reads its parameters again for the backward pass and the
#: update). It is neither a function input nor a state of its own.
REREAD = "@"


def reread_name(state: str, tag: str) -> str:
    return f"{state}{REREAD}{tag}"


def reread_of(name: str, states) -> Optional[str]:
    """The state graph input ``name`` reads again, or None (``REREAD``)."""
    base, sep, _ = name.rpartition(REREAD)
    return base if sep and base in (states or {}) else None


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
