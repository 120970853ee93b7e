"""RLX ops -> Core AI ops (used by lower.py, which owns the function boundary and states).

The rules live by family: ops_elementwise.py, ops_bitwise.py (shifts, bit counts),
ops_shape.py (reductions, shapes, matmul, indexing), ops_nn.py (attention), ops_conv.py
(convolutions), control.py (cond / while / scan / custom_vjp), weights.py (frozen weights,
compressed ones decompressed by Core AI ops); ops_base.py has the context, the registry and
the dispatch (``Ctx.lower_nodes``). Every other op is refused, naming the JAX primitive and
the user's line. The composite ops Core AI has no rule for (the norms and their backward
ops, the pool family, the activations, erfc and the special functions, integer matmul and
conv, the linalg family) are decomposed in the RLX graph before these rules run (rlxjax/transforms/legalize/, lower.py).
"""
from __future__ import annotations

from typing import Dict

from . import (control, ops_bitwise, ops_elementwise, ops_nn, ops_conv,  # noqa: F401
               ops_shape, weights)
from . import dynamic  # noqa: F401
from .ops_base import Ctx

__all__ = ["Ctx", "lower_nodes"]


def lower_nodes(ctx: Ctx, nodes, env: Dict[int, object]) -> None:
    """Lowers ``nodes`` in order; ``env`` maps RLX value ids to Core AI values (in and out)."""
    ctx.lower_nodes(nodes, env)
