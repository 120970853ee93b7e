"""Lowering: dot_general as (transpose, reshape) -> batched matmul -> reshape.

When the lhs already sits as ``[batch..., free..., contract...]`` with two or more free
dims (a Dense on a rank-3 activation, its input gradient), it enters ``matmul`` at its own
rank instead: MIL's matmul broadcasts the leading dims of ``[..., M, K] @ [K, N]``, so the
free dims other than the last need no flattening and the result no reshape back. Each
output element is the same dot product as in the flattened form (:func:`nd_form`).

When the rhs is a known constant matrix (an inference export's weight, a closed-over
parameter) and the lhs ``x[..., K]`` of rank 1-3 contracts its last dim, the product is
MIL's ``linear`` (:func:`native_linear`): ``weight`` is the ``[N, K]`` constant (a flax
Dense kernel ``[K, N]`` transposed at compile time, exact), and a following constant bias
add is fused into it on the protobuf (coreml/mil_linear_bias.py)."""
from __future__ import annotations

from collections import Counter

import numpy as np

from ...ir import TensorType
from ..registry import lowering
from .common import graphs, reshape, transpose


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


def nd_form(a_rank, lb, lf, lc, rf):
    """Whether dot_general's lhs enters matmul at its own rank (:func:`matmul_nd`): None
    when not, else matmul's ``transpose_x``. It does when the lhs sits as
    ``[lb..., lf..., lc...]`` (False) or ``[lb..., lf[:-1]..., lc..., lf[-1]]`` (True) with
    >= 2 free dims and >= 1 contracting dim, and that costs fewer reshapes than the
    flattened form's two (lhs in, result out). The nd form reshapes only to merge several
    contracting dims, to give the rhs unit dims after its batch dims (so they broadcast
    against the lhs's leading free dims), and to split a merged rhs free size (or drop N=1)
    in the result."""
    if len(lf) < 2 or not lc or (len(lc) > 1) + (len(lb) > 0) + (len(rf) != 1) >= 2:
        return None
    lb, lf, lc = list(lb), list(lf), list(lc)
    for tx, order in ((False, lb + lf + lc), (True, lb + lf[:-1] + lc + lf[-1:])):
        if order == list(range(a_rank)):
            return tx
    return None


def matmul_nd(b, a, y, tx, ty, nb, nf, out_type, reshape_to, size):
    """``a`` as ``[batch(nb)..., free(nf)..., K]`` (contracting dims merged; ``[..., K, M]``
    when ``tx``) @ ``y`` as ``[batch..., K, N]`` (``[batch..., N, K]`` when ``ty``): one
    matmul broadcasting the leading free dims. ``reshape_to(var, shape)`` and
    ``size(dims)`` handle (flexible) dims."""
    lead, m = list(a.shape[:nb + nf - 1]), a.shape[-1 if tx else nb + nf - 1]
    k = size(list(a.shape[nb + nf - 1:-1] if tx else a.shape[nb + nf:]))
    x = reshape_to(a, lead + ([k, m] if tx else [m, k]))
    if nb:
        y = reshape_to(y, list(y.shape[:nb]) + [1] * (nf - 1) + list(y.shape[nb:]))
    n = y.shape[-2] if ty else y.shape[-1]
    out = b.op("matmul", TensorType(tuple(lead + [m, n]), out_type.dtype),
               x=x, y=y, transpose_x=tx, transpose_y=ty)
    return reshape_to(out, out_type.shape)


#: MIL linear's x rank range and dtypes (coremltools iOS15 linear: 1 <= rank <= 3; fp16 /
#: fp32 here, weight of x's dtype).
LINEAR_RANKS = (1, 2, 3)
LINEAR_DTYPES = (np.float16, np.float32)


def native_linear(b, a, w, lc, rc, lb, out_type, may_transpose):
    """MIL ``linear(x=a, weight=[N, K] constant)`` for ``dot_general(a, w)`` when ``w`` is
    a known rank-2 constant of a's (fp16/fp32) dtype, contracted on a's last dim and
    without batch dims; None otherwise (the matmul forms). A ``[K, N]`` kernel is stored
    transposed only when ``may_transpose`` (nothing else reads it: no second copy)."""
    known = b.known(w)
    if known is None or lb or known.ndim != 2 or a.type.rank not in LINEAR_RANKS \
            or list(lc) != [a.type.rank - 1] or len(rc) != 1:
        return None
    if known.dtype not in LINEAR_DTYPES or known.dtype != a.type.dtype.np \
            or out_type.dtype != a.type.dtype:
        return None
    if rc[0] == 0 and not may_transpose:
        return None
    weight = known if rc[0] == 1 else known.T  # -> [N, K]
    return b.op("linear", out_type, x=a, weight=b.const(weight, derived=weight is not known))


def sole_read_consts(ctx) -> frozenset:
    """An analysis (``ctx.analysis``): ids of the constants one node reads once (and no
    graph output), which a rule may replace by a derived constant (linear's transposed
    kernel) without storing both; none with ``ctx.keep_weight_layout``."""
    if ctx.keep_weight_layout:
        return frozenset()
    root = ctx.graph
    reads, consts = Counter(v.id for _, v in root.outputs), set()
    for g in graphs(root):
        if g is not root:
            reads.update(v.id for _, v in g.outputs)  # a region's outputs are reads too
        for n in g.nodes:
            reads.update(v.id for v in n.inputs)
            if n.op == "constant":
                consts.update(v.id for v in n.outputs)
    return frozenset(c for c in consts if reads[c] == 1)


@lowering("dot_general")
def _dot_general(ctx, node, a, b):
    (lc, rc), (lb, rb) = node.params["contract"], node.params["batch"]
    lin = native_linear(ctx.b, a, b, lc, rc, lb, ctx.out_type(node),
                        node.inputs[1].id in ctx.analysis(sole_read_consts))
    if lin is not None:
        return lin
    lf = [d for d in range(a.type.rank) if d not in lc and d not in lb]
    rf = [d for d in range(b.type.rank) if d not in rc and d not in rb]
    tx = nd_form(a.type.rank, lb, lf, lc, rf)
    if tx is not None:
        y, ty = _operand(ctx.b, b, rb, rf, rc, free_first=False)
        return matmul_nd(ctx.b, a, y, tx, ty, len(lb), len(lf), ctx.out_type(node),
                         lambda v, s: reshape(ctx.b, v, s),
                         lambda dims: int(np.prod(dims, dtype=np.int64)))
    x, tx = _operand(ctx.b, a, lb, lf, lc, free_first=True)
    y, ty = _operand(ctx.b, b, rb, rf, rc, free_first=False)
    batch = [a.shape[d] for d in lb]
    m = int(np.prod([a.shape[d] for d in lf], dtype=np.int64))
    n = int(np.prod([b.shape[d] for d in rf], dtype=np.int64))
    out = ctx.b.op("matmul", TensorType(tuple(batch + [m, n]), ctx.out_type(node).dtype),
                   x=x, y=y, transpose_x=tx, transpose_y=ty)
    return reshape(ctx.b, out, ctx.out_type(node).shape)
