"""The RLX graph: SSA values, nodes with frozen parameters, named inputs and outputs."""
from __future__ import annotations

import itertools
import struct
from typing import Any, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .builder import Builder
from .types import TensorType, Typed


def _freeze(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        a = np.array(v, copy=True)
        a.setflags(write=False)
        return a
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    return v


def param_key(v: Any) -> Any:
    """A hashable key for a parameter value: equal keys mean interchangeable values. Arrays
    key by content; floats by their bits (0.0 and -0.0 differ, as they do for ``1 / x``; a
    NaN equals itself); every key names its type (1, 1.0 and True differ). Other values
    key by themselves (region graphs and callables: by identity); unhashable values raise
    TypeError. Params equality and CSE (transforms/cse.py) both use it."""
    if isinstance(v, np.ndarray):
        return ("ndarray", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (tuple, list)):
        return (type(v).__name__,) + tuple(param_key(x) for x in v)
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, np.generic):
        return ("np", v.dtype.str, v.tobytes())
    if isinstance(v, dict):
        return ("dict",) + tuple(sorted((k, param_key(x)) for k, x in v.items()))
    hash(v)
    return (type(v).__name__, v)


class Params(Mapping[str, Any]):
    """Immutable op parameters. Lists become tuples, arrays become read-only copies."""

    __slots__ = ("_items", "_hash")

    def __init__(self, items: Mapping[str, Any] | None = None):
        frozen = {k: _freeze(v) for k, v in sorted((items or {}).items())}
        object.__setattr__(self, "_items", frozen)
        object.__setattr__(self, "_hash", None)

    def __getitem__(self, k):
        return self._items[k]

    def __iter__(self):
        return iter(self._items)

    def __len__(self):
        return len(self._items)

    def key(self):
        return tuple((k, param_key(v)) for k, v in self._items.items())

    def __hash__(self):
        if self._hash is None:
            object.__setattr__(self, "_hash", hash(self.key()))
        return self._hash

    def __eq__(self, other):
        return isinstance(other, Params) and self.key() == other.key()

    def __setattr__(self, *_):
        raise AttributeError("Params are immutable")

    def __repr__(self):
        return "{" + ", ".join(f"{k}={_short(v)}" for k, v in self._items.items()) + "}"


def _short(v: Any) -> str:
    if isinstance(v, np.ndarray):
        if v.size <= 8:
            return np.array2string(v, separator=",").replace("\n", "")
        return f"<{v.dtype}{list(v.shape)}>"
    return repr(v)


class Value(Typed):
    """An SSA value: produced by a node (``node``, output ``index``) or a graph input."""

    __slots__ = ("id", "type", "node", "index")

    def __init__(self, id: int, type: TensorType, node: Optional["Node"] = None, index: int = 0):
        self.id = id
        self.type = type
        self.node = node
        self.index = index

    def __repr__(self):
        return f"%{self.id}:{self.type}"


class Node:
    __slots__ = ("op", "params", "inputs", "outputs", "source")

    def __init__(self, op: str, params: Params, inputs: Tuple[Value, ...], outputs: Tuple[Value, ...],
                 source: Optional[str] = None):
        self.op = op
        self.params = params
        self.inputs = inputs
        self.outputs = outputs
        self.source = source

    @property
    def output(self) -> Value:
        if len(self.outputs) != 1:
            raise ValueError(f"{self.op} has {len(self.outputs)} outputs")
        return self.outputs[0]

    def __repr__(self):
        return f"Node({self.op}, {self.params!r}, in={list(self.inputs)}, out={list(self.outputs)})"


class Graph:
    """A function: named inputs, nodes in topological order, named outputs."""

    def __init__(self, name: str = "main"):
        self.name = name
        self.inputs: List[Tuple[str, Value]] = []
        self.outputs: List[Tuple[str, Value]] = []
        self.nodes: List[Node] = []
        self._ids = itertools.count()

    # -- construction -------------------------------------------------------------
    def new_value(self, type: TensorType, node: Optional[Node] = None, index: int = 0) -> Value:
        return Value(next(self._ids), type, node, index)

    def add_input(self, name: str, type: TensorType) -> Value:
        v = self.new_value(type)
        self.inputs.append((name, v))
        return v

    def add_node(self, op: str, inputs: Sequence[Value], params: Mapping[str, Any] | None = None,
                 source: Optional[str] = None) -> Node:
        from .ops import infer_types  # late import: ops imports graph for typing only

        params = params if isinstance(params, Params) else Params(params)
        inputs = tuple(inputs)
        out_types = infer_types(op, [v.type for v in inputs], params)
        node = Node(op, params, inputs, (), source)
        node.outputs = tuple(self.new_value(t, node, i) for i, t in enumerate(out_types))
        self.nodes.append(node)
        return node

    def add(self, op: str, *inputs: Value, source: Optional[str] = None, **params) -> Value:
        """Add a single-output node and return its value (a ``Builder`` shortcut)."""
        return Builder(self, source).add(op, *inputs, **params)

    def constant(self, value, dtype=None, source: Optional[str] = None) -> Value:
        return Builder(self, source).constant(value, dtype)

    def add_output(self, name: str, value: Value) -> None:
        self.outputs.append((name, value))

    # -- queries -------------------------------------------------------------------
    def input_values(self) -> List[Value]:
        return [v for _, v in self.inputs]

    def output_values(self) -> List[Value]:
        return [v for _, v in self.outputs]

    def iter_nodes(self, op: Optional[str] = None) -> Iterator[Node]:
        return (n for n in self.nodes if op is None or n.op == op)

    def users(self) -> dict:
        """value id -> list of nodes that read it."""
        users: dict = {}
        for n in self.nodes:
            for v in n.inputs:
                users.setdefault(v.id, []).append(n)
        return users

    def op_histogram(self) -> dict:
        hist: dict = {}
        for n in self.nodes:
            hist[n.op] = hist.get(n.op, 0) + 1
        return dict(sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])))

    def __str__(self) -> str:
        from .printer import format_graph

        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"


def constant_value(v: Value) -> Optional[np.ndarray]:
    """The array behind ``v`` if it is produced by a constant node, else None."""
    if v.node is not None and v.node.op == "constant":
        return v.node.params["value"]
    return None
