"""VJP rule: fused attention emits its record's backward op, attention_grad
(rlxjax/ir/attention.py), asking only for the gradients ``needs`` wants; the probabilities
are recomputed there from q, k and the mask (a bool mask has no gradient)."""
from __future__ import annotations

from .helpers import backward_op, emit
from .registry import refuse_vjp, vjp_rule


@vjp_rule("attention")
def _attention(ctx, node, cts, needs):
    (ct,), p = cts, node.params
    roles = ["dq", "dk", "dv"] + ([] if not p["has_mask"] else
                                  ["dmask"] if node.inputs[3].dtype.is_float else [None])
    return emit(ctx, backward_op(node), [*node.inputs, ct], roles, needs,
                scale=p["scale"], has_mask=p["has_mask"])


refuse_vjp("second-order derivatives through fused attention are not supported (its "
           "backward op has no VJP rule)", "attention_grad")
