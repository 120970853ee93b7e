"""VJP rules: the activation family (rlxjax/ir/activation.py). Each fused activation emits
its own backward op (activation_grad family, named by its record's ``backward``): softmax
and log_softmax from their saved output, gelu and silu from their input."""
from __future__ import annotations

from .helpers import backward_op
from .registry import refuse_vjp, vjp_rule


@vjp_rule("softmax", "log_softmax")
def _from_output(ctx, node, cts, needs):
    (ct,) = cts
    if not needs[0]:
        return [None]
    return [ctx.add(backward_op(node), node.outputs[0], ct, axis=node.params["axis"])]


@vjp_rule("gelu")
def _gelu(ctx, node, cts, needs):
    (ct,) = cts
    if not needs[0]:
        return [None]
    return [ctx.add(backward_op(node), node.inputs[0], ct, approximate=node.params["approximate"])]


@vjp_rule("silu")
def _silu(ctx, node, cts, needs):
    (ct,) = cts
    return [ctx.add(backward_op(node), node.inputs[0], ct) if needs[0] else None]


refuse_vjp("second-order derivatives through a fused activation are not supported (its "
           "backward op has no VJP rule)",
           "softmax_grad", "log_softmax_grad", "gelu_grad", "silu_grad")
