"""Reverse-mode AD on the RLX graph.

The backward pass is appended to the forward graph: cotangents flow from the loss back to
the requested inputs through one VJP rule per op (vjp/<family>.py), cotangents of a value
read several times are summed, symbolic zeros (``None``) are never materialised unless an
output needs them, and dead code is removed at the end.

Custom derivative rules (``custom_vjp`` nodes) are JAX objects kept out of the IR: the
caller passes ``custom_backward(rule) -> Graph`` (the trace's ``CustomRules.backward``).
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..errors import DynamicShapeError, RlxError, UnsupportedPrimitiveError, op_label
from ..ir import Graph, TensorType, Value, verify
from ..ir.builder import Builder
from . import vjp  # noqa: F401  (registers the rules)
from .regions import save_scan_carries
from .rewrite import dce
from ..ir.ops import OPS


CustomBackward = Callable[[int], Graph]


class GradContext(Builder):
    """What VJP rules build with: the Builder of the graph under differentiation (each
    rule builds under the source line of the node it differentiates), with the cotangent
    helpers below and the custom rules' backward regions (``custom_backward``)."""

    def __init__(self, graph: Graph, custom_backward: Optional[CustomBackward] = None):
        super().__init__(graph)
        self.custom_backward = custom_backward

    def backward_seeded(self, graph: Graph, seeds, wrt) -> List[Value]:
        """``backward_seeded`` on another graph (a region's VJP), same custom rules."""
        return backward_seeded(graph, seeds, wrt, self.custom_backward)

    def instantiate(self, ct: Optional[Value], t: TensorType) -> Value:
        return self.zeros(t) if ct is None else ct

    def sum_to(self, ct: Value, shape) -> Value:
        """Undo numpy broadcasting: sum ``ct`` down to ``shape``."""
        shape = tuple(shape)
        if tuple(ct.shape) == shape:
            return ct
        lead = ct.type.rank - len(shape)
        axes = tuple(range(lead)) + tuple(
            lead + i for i, d in enumerate(shape) if d == 1 and ct.shape[lead + i] != 1)
        r = self.add("reduce_sum", ct, axes=axes) if axes else ct
        return self.reshape(r, shape)


def _differentiable(v: Value) -> bool:
    return v.dtype.is_float


def active_values(graph: Graph, wrt: Sequence[Value]) -> set:
    """Ids of float values that depend on ``wrt`` through differentiable ops."""
    active = {v.id for v in wrt}
    for n in graph.nodes:
        if not OPS[n.op].differentiable:  # no cotangent flows through it
            continue
        if any(v.id in active for v in n.inputs):
            active.update(v.id for v in n.outputs if _differentiable(v))
    return active


def backward(graph: Graph, loss: Value, wrt: Sequence[Value],
             custom_backward: Optional[CustomBackward] = None) -> List[Value]:
    """Append the backward pass of ``loss`` w.r.t. ``wrt`` to ``graph`` (in place); return
    the gradients (one per ``wrt``, zeros where ``loss`` does not depend on it)."""
    if loss.type.rank != 0 or not loss.dtype.is_float:
        raise RlxError(f"the loss must be a float scalar, got {loss.type}")
    # Seed with a constant 1 (added to the graph only when the loss depends on wrt).
    return backward_seeded(graph, [(loss, None)], wrt, custom_backward)


def backward_seeded(graph: Graph, seeds: Sequence[Tuple[Value, Optional[Value]]],
                    wrt: Sequence[Value],
                    custom_backward: Optional[CustomBackward] = None) -> List[Value]:
    """The vector-Jacobian product: append the backward pass that starts from cotangent
    ``ct`` on each ``(value, ct)`` of ``seeds`` (``ct`` None: a scalar 1) and return the
    cotangents of ``wrt``. Scans first save their per-step carries (transforms/regions.py).
    ``custom_backward(rule)``: the backward region of a ``custom_vjp`` node's rule."""
    active = active_values(graph, wrt)
    replaced = save_scan_carries(graph, active)
    if replaced:
        verify(graph)
        seeds = [(replaced.get(v.id, v), ct) for v, ct in seeds]
        active = active_values(graph, wrt)
    forward = list(graph.nodes)
    ctx = GradContext(graph, custom_backward)
    cts: Dict[int, Value] = {}
    # The seeds (and the zero gradients of inputs the loss does not read) are built under
    # the loss's line; everything else under the line of the node being differentiated.
    seed_source = next((v.node.source for v, _ in seeds if v.node is not None), None)
    with ctx.at(seed_source):
        for v, ct in seeds:
            if v.id not in active:
                continue
            ct = ctx.scalar(1.0, v) if ct is None else ct
            cts[v.id] = ct if v.id not in cts else ctx.add("add", cts[v.id], ct)

    for node in reversed(forward):
        out_cts = [cts.get(v.id) for v in node.outputs]
        if all(c is None for c in out_cts):
            continue
        needs = [v.id in active for v in node.inputs]
        if not any(needs):
            continue
        rule = OPS[node.op].impl("vjp")
        if rule is None:
            raise UnsupportedPrimitiveError(node.op, node.source,
                                            "rlxjax has no gradient rule for this op yet")
        with ctx.at(node.source):
            try:
                in_cts = rule(ctx, node, out_cts, needs)
            except (TypeError, ValueError) as e:  # a rule met a flexible dim (docs/flexible.md)
                if all(v.type.is_static for v in node.inputs + node.outputs):
                    raise
                if isinstance(e, RlxError):
                    raise
                raise DynamicShapeError(  # e's text is Python's, not for the user
                    f"the gradient of {op_label(node.op)} at {node.source} does not support "
                    f"its flexible dimension "
                    f"({', '.join(map(str, (v.type for v in node.inputs)))}): it needs that "
                    "size at compile time. Keep that axis static (docs/flexible.md).") from None
            for v, c, need in zip(node.inputs, in_cts, needs):
                if c is None or not need:
                    continue
                if c.type != v.type:
                    raise RlxError(f"internal: VJP of {node.op} gave {c.type} for input "
                                   f"{v.type}")
                prev = cts.get(v.id)
                cts[v.id] = c if prev is None else ctx.add("add", prev, c)
    with ctx.at(seed_source):
        return [ctx.instantiate(cts.get(v.id), v.type) for v in wrt]


def grad_graph(graph: Graph, loss_index: int, wrt_indices: Sequence[int],
               keep_outputs: Sequence[int], grads_first: bool = False,
               custom_backward: Optional[CustomBackward] = None) -> Graph:
    """Turn ``graph`` (in place) into: outputs ``keep_outputs`` and the gradients of output
    ``loss_index`` w.r.t. inputs ``wrt_indices`` (named ``grad.<input name>``), the
    gradients after the kept outputs or, with ``grads_first``, before them."""
    loss = graph.outputs[loss_index][1]
    wrt = [graph.inputs[i][1] for i in wrt_indices]
    grads = backward(graph, loss, wrt, custom_backward)
    kept = [graph.outputs[i] for i in keep_outputs]
    named = [(f"grad.{graph.inputs[i][0]}", g) for i, g in zip(wrt_indices, grads)]
    graph.outputs = named + kept if grads_first else kept + named
    dce(graph)
    return verify(graph)
