"""The RLX graph: SSA values, nodes with frozen parameters and regions, named inputs and
outputs.

Ownership: a ``Graph`` is a mutable container owned by whoever builds or transforms it
(passes change the graph they are given, in place, and say so). A node's regions are
graphs owned by that node: ``Node.regions`` is an immutable mapping (region name -> graph,
or tuple of graphs for ``cond``'s branches) fixed when the node is made, and no region graph
belongs to two nodes (``inline`` copies the regions of the nodes it copies; the verifier
checks it). A pass that runs on every region (``transforms/regions.all_regions``) therefore
changes graphs owned, through their node, by the graph it was given. ``Params`` hold plain
frozen data only: no graphs, no callables, no JAX objects, so a graph prints and parses
back (ir/printer.py, ir/parser.py).
"""
from __future__ import annotations

import itertools
import struct
import types
from typing import Any, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from .ops import OPS, infer_types
from .printer import format_graph, format_params
from .types import DType, Dyn, TensorType, Typed
from ..weightstore import is_mapped, mapped_place

#: Leaf values a parameter may hold (besides arrays and tuples of these).
_PLAIN = (type(None), bool, int, float, str, DType, Dyn)
_PLAIN_TYPES = frozenset(_PLAIN)  # exact types: the common case, checked first


def _frozen(a: np.ndarray) -> bool:
    """``a`` cannot change: read-only, and its memory is a read-only array's own (an array
    ``_freeze`` made, or a view of one), so it need not be copied again (a model's
    weights as constants were copied by every pass that rebuilt a constant node)."""
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    return not a.flags.writeable and not root.flags.writeable and \
        (root.flags.owndata or is_mapped(root))  # a frozen weight on disk (weightstore.py)


def _freeze(v: Any) -> Any:
    if type(v) in _PLAIN_TYPES:
        return v
    if isinstance(v, np.ndarray):
        if _frozen(v) and v.flags.c_contiguous:
            return v
        a = np.array(v, copy=True)
        a.setflags(write=False)
        return a
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    if not isinstance(v, _PLAIN):
        raise TypeError(f"an op parameter must be plain data (numbers, strings, dtypes, "
                        f"arrays, tuples), got {type(v).__name__}: regions go in "
                        "Node.regions, and JAX objects stay in the frontend")
    return v


def param_key(v: Any) -> Any:
    """A hashable key for a parameter value: equal keys mean interchangeable values. Arrays
    key by content; floats by their bits (0.0 and -0.0 differ, as they do for ``1 / x``; a
    NaN equals itself); every key names its type (1, 1.0 and True differ). Other values
    key by themselves (region graphs and callables: by identity); unhashable values raise
    TypeError. Params equality and CSE (transforms/cse.py) both use it."""
    if isinstance(v, np.ndarray):
        if v.nbytes > ArrayContent.MIN_BYTES:
            return ("ndarray", v.dtype.str, v.shape, ArrayContent(v))
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


class ArrayContent:
    """The bytes of a large array as a key, without copying them (``tobytes`` copied each
    weight into every key: CSE held a second copy of a model's constants): hashed on a
    sample of the bytes, equal exactly when all bytes are."""

    MIN_BYTES = 4096
    _CHUNK = 1 << 20
    __slots__ = ("flat", "_hash")

    def __init__(self, arr: np.ndarray):
        place = mapped_place(arr)
        if place is not None:  # a frozen weight on disk keys by its place, unread
            self.flat, self._hash = place, hash(place[:-1])
            return
        self.flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        step = max(1, self.flat.size // 4096)
        self._hash = hash((self.flat.size, self.flat[::step].tobytes(),
                           self.flat[-64:].tobytes()))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if not isinstance(other, ArrayContent):
            return NotImplemented
        a, b = self.flat, other.flat
        if a is b:
            return True
        if isinstance(a, tuple) or isinstance(b, tuple):  # places: two leaves of a store
            return isinstance(a, tuple) and isinstance(b, tuple) and a[:-1] == b[:-1] and \
                a[-1] is b[-1]
        if self._hash != other._hash or a.size != b.size:
            return False
        return all(np.array_equal(a[i:i + self._CHUNK], b[i:i + self._CHUNK])
                   for i in range(0, a.size, self._CHUNK))


class Params(Mapping[str, Any]):
    """Immutable op parameters. Lists become tuples, arrays become read-only copies."""

    # _fits: the OpDef whose schema these params passed (infer_types); they cannot change,
    # so the verifier's later passes over the same node need not check them again
    __slots__ = ("_items", "_hash", "_fits")

    def __init__(self, items: Mapping[str, Any] | None = None):
        frozen = {k: _freeze(v) for k, v in sorted(items.items())} if items else {}
        object.__setattr__(self, "_items", frozen)
        object.__setattr__(self, "_hash", None)
        object.__setattr__(self, "_fits", None)

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
        return format_params(self)


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


Region = Union["Graph", Tuple["Graph", ...]]
_NO_REGIONS: Mapping[str, Region] = types.MappingProxyType({})


def _regions(regions: Optional[Mapping[str, Region]]) -> Mapping[str, Region]:
    if not regions:
        return _NO_REGIONS
    out = {}
    for k, r in regions.items():
        r = tuple(r) if isinstance(r, (list, tuple)) else r
        if not all(isinstance(g, Graph) for g in (r if isinstance(r, tuple) else (r,))):
            raise TypeError(f"region {k!r} must be a Graph or a tuple of Graphs")
        out[k] = r
    return types.MappingProxyType(out)


class Node:
    """One op application. ``regions``: the closed sub-graphs the op runs (control flow),
    by name as the op's record declares them (``OpDef.regions``); empty for other ops."""

    # typed: (op, params, input types, output types) of the last type inference of this
    # node (Graph.add_node, the verifier), or None; inference is a function of the first
    # three, so the verifier re-infers only a node a pass has changed (ir/verify.py)
    __slots__ = ("op", "params", "inputs", "outputs", "source", "regions", "typed")

    def __init__(self, op: str, params: Params, inputs: Tuple[Value, ...], outputs: Tuple[Value, ...],
                 source: Optional[str] = None, regions: Optional[Mapping[str, Region]] = None):
        self.op = op
        self.params = params
        self.inputs = inputs
        self.outputs = outputs
        self.source = source
        self.regions = _regions(regions)
        self.typed = None

    def subgraphs(self) -> Iterator["Graph"]:
        """Every region graph of this node (not nested ones), in declaration order."""
        for r in self.regions.values():
            yield from (r if isinstance(r, tuple) else (r,))

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
                 source: Optional[str] = None,
                 regions: Optional[Mapping[str, Region]] = None) -> Node:
        """Append a node. A region op's regions may also be given among ``params`` under
        the names its record declares (``OpDef.regions``): they are moved to ``regions``."""
        if not isinstance(params, Params):
            if regions is None and params:
                params, regions = split_regions(op, params)
            params = Params(params)
        inputs = tuple(inputs)
        in_types = tuple([v.type for v in inputs])
        node = Node(op, params, inputs, (), source, regions)
        out_types = tuple(infer_types(op, in_types, params, node.regions))
        ids = self._ids
        node.outputs = tuple([Value(next(ids), t, node, i) for i, t in enumerate(out_types)])
        if not node.regions:
            node.typed = (op, params, in_types, out_types)
        self.nodes.append(node)
        return node

    def add_output(self, name: str, value: Value) -> None:
        self.outputs.append((name, value))

    # -- queries -------------------------------------------------------------------
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
        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {self.name}: {len(self.inputs)} inputs, {len(self.nodes)} nodes, {len(self.outputs)} outputs>"


def split_regions(op: str, kwargs: Mapping[str, Any]):
    """(params, regions): the entries of ``kwargs`` named as regions by ``op``'s record
    go to regions."""
    opdef = OPS.get(op)
    names = opdef.regions if opdef is not None else ()
    if not names or not any(k in kwargs for k in names):
        return kwargs, None
    return ({k: v for k, v in kwargs.items() if k not in names},
            {k: v for k, v in kwargs.items() if k in names})


def constant_value(v: Value) -> Optional[np.ndarray]:
    """The array behind ``v`` if it is produced by a constant node, else None."""
    if v.node is not None and v.node.op == "constant":
        return v.node.params["value"]
    return None
