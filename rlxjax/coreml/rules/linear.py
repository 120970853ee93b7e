"""Lowering: dot_general as (transpose, reshape) -> batched matmul -> reshape."""
from __future__ import annotations

import numpy as np

from ...ir import TensorType
from ..registry import lowering
from .common import reshape, transpose


def _operand(b, x, batch, free, contract, free_first):
    """Bring x to [batch..., F, C] (free_first) or [batch..., C, F]; return (var, transposed).

    Uses matmul's transpose flag instead of a transpose op when the operand already sits as
    [batch..., C..., F...] (resp. [batch..., F..., C...])."""
    size = lambda dims: int(np.prod([x.shape[d] for d in dims], dtype=np.int64))
    bshape = [x.shape[d] for d in batch]
    want = list(batch) + (list(free) + list(contract) if free_first else list(contract) + list(free))
    alt = list(batch) + (list(contract) + list(free) if free_first else list(free) + list(contract))
    flipped = want != list(range(x.type.rank)) and alt == list(range(x.type.rank))
    order = alt if flipped else want
    y = transpose(b, x, order)
    inner = [size(free), size(contract)] if free_first != flipped else [size(contract), size(free)]
    return reshape(b, y, bshape + inner), flipped


@lowering("dot_general")
def _dot_general(ctx, node, a, b):
    (lc, rc), (lb, rb) = node.params["contract"], node.params["batch"]
    lf = [d for d in range(a.type.rank) if d not in lc and d not in lb]
    rf = [d for d in range(b.type.rank) if d not in rc and d not in rb]
    x, tx = _operand(ctx.b, a, lb, lf, lc, free_first=True)
    y, ty = _operand(ctx.b, b, rb, rf, rc, free_first=False)
    batch = [a.shape[d] for d in lb]
    m = int(np.prod([a.shape[d] for d in lf], dtype=np.int64))
    n = int(np.prod([b.shape[d] for d in rf], dtype=np.int64))
    out = ctx.b.op("matmul", TensorType(tuple(batch + [m, n]), ctx.out_type(node).dtype),
                   x=x, y=y, transpose_x=tx, transpose_y=ty)
    return reshape(ctx.b, out, ctx.out_type(node).shape)
