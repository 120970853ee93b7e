"""The one node builder: what the frontend, the grad transform and every rewrite build with.

A ``Builder`` appends nodes to one graph (``Graph.add_node`` is the primitive: type
inference, frozen params, fresh values) and stamps each node, constants included, with its
current ``source``: the user's line that the node stands for. Whoever builds on behalf of
an existing node builds under that node's line (``with b.at(node.source): ...``), so an
error raised by a later pass or by the lowering still points into the user's file.

Layers extend it rather than copy it: the frontend's ``Lowering`` (frontend/interpreter.py)
adds the jaxpr interpreter, ``GradContext`` (transforms/grad.py) the cotangent helpers,
``Appender`` (transforms/rewrite.py) places what it built before the node it replaces.
A layer that must see every constant (the frontend's uint32 range proofs, frontend/uint32.py)
passes ``on_constant``: ``on_constant(builder, array, make) -> Value``, where
``make(array)`` builds the constant node.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple

import numpy as np

from .types import TensorType, dtype_from_numpy

if TYPE_CHECKING:  # typing only: graph.py does not import this module, nor may it
    from .graph import Graph, Node, Value

ConstantHook = Callable[["Builder", np.ndarray, Callable[[np.ndarray], "Value"]], "Value"]


class Builder:
    """Appends nodes to ``graph`` under a current source line (see the module docstring)."""

    def __init__(self, graph: "Graph", source: Optional[str] = None, *,
                 on_constant: Optional[ConstantHook] = None):
        self.graph = graph
        self.source = source
        self.on_constant = on_constant

    def at(self, source: Optional[str]) -> "_At":
        """``with b.at(line):`` builds under ``line``, then restores the previous source."""
        return _At(self, source)

    # -- nodes ---------------------------------------------------------------------------
    def build(self, op: str, inputs: Sequence["Value"], params: dict) -> "Node":
        """Every node of this builder is made here (a layer that must see each one, as
        ``Appender`` does, overrides this); ``params`` is the node's own dict."""
        return self.graph.add_node(op, inputs, params, self.source)

    def add_node(self, op: str, inputs: Sequence["Value"], **params: Any) -> "Node":
        return self.build(op, inputs, params)

    def add(self, op: str, *inputs: "Value", **params: Any) -> "Value":
        """A single-output node; returns its value."""
        outs = self.build(op, inputs, params).outputs
        if len(outs) != 1:
            raise ValueError(f"{op} has {len(outs)} outputs")
        return outs[0]

    def add_multi(self, op: str, inputs: Sequence["Value"], **params: Any) -> Tuple["Value", ...]:
        """A node with any number of outputs; returns them all."""
        return self.build(op, inputs, params).outputs

    # -- constants -----------------------------------------------------------------------
    def constant(self, value, dtype=None) -> "Value":
        arr = np.asarray(value, dtype=dtype)
        if self.on_constant is not None:
            return self.on_constant(self, arr, self._make_constant)
        return self._make_constant(arr)

    def _make_constant(self, arr: np.ndarray) -> "Value":
        dtype_from_numpy(arr.dtype)  # reject int64/float64 early with a clear message
        return self.build("constant", (), {"value": arr}).outputs[0]

    def scalar(self, v, like) -> "Value":
        """A rank-0 constant ``v`` of ``like``'s dtype (broadcasts against ``like``)."""
        return self.constant(np.asarray(v, dtype=like.dtype.np))

    def zeros(self, t: TensorType) -> "Value":
        """Zeros of type ``t``: a scalar constant, broadcast unless ``t`` is rank 0."""
        zero = self.constant(np.zeros((), t.dtype.np))
        if t.rank == 0:
            return zero
        return self.add("broadcast_in_dim", zero, shape=tuple(t.shape), dims=())

    # -- shape ops that are skipped when they would change nothing ----------------------
    def reshape(self, x: "Value", shape) -> "Value":
        shape = tuple(shape)
        return x if tuple(x.shape) == shape else self.add("reshape", x, shape=shape)

    def transpose(self, x: "Value", perm) -> "Value":
        perm = tuple(int(p) for p in perm)
        return x if perm == tuple(range(len(perm))) else self.add("transpose", x, perm=perm)

    def broadcast(self, x: "Value", shape, dims) -> "Value":
        """``broadcast_in_dim``: x's dim i becomes dim ``dims[i]`` of ``shape``."""
        shape, dims = tuple(shape), tuple(dims)
        if tuple(x.shape) == shape and dims == tuple(range(len(shape))):
            return x
        return self.add("broadcast_in_dim", x, shape=shape, dims=dims)


class _At:
    """The context manager of ``Builder.at`` (a class: cheaper than a generator, and the
    grad transform enters one per differentiated node)."""

    __slots__ = ("builder", "source", "saved")

    def __init__(self, builder: Builder, source: Optional[str]):
        self.builder, self.source, self.saved = builder, source, None

    def __enter__(self) -> Builder:
        self.saved = self.builder.source
        self.builder.source = self.source
        return self.builder

    def __exit__(self, *exc) -> None:
        self.builder.source = self.saved
