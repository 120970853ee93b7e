"""``fold_scalar_muls``: ``(x * a) * b`` with scalar constants ``a``, ``b``, one of them a
power of two, becomes ``x * (a * b)`` — one multiplication instead of two (the VJP of
``mean(x ** 2)`` is ``(2 * x) * (1 / n)``; of ``0.5 * x`` inside a scaled loss, alike).

Why it is exact: multiplying by ``2**k`` only moves the exponent, so rounding commutes
with it, ``round(x * a) * 2**k == round(x * a * 2**k)``, and ``a * 2**k`` is itself exact,
as long as nothing leaves the normal range. It differs only when the intermediate
``x * a`` overflows to inf or falls below the smallest normal (2**-126 in fp32: a
subnormal keeps fewer bits, which the scaling cannot bring back), or the result does
(rounded once instead of twice into a subnormal). So the pass folds only:

- fp32 programs (``precision="fp32"``) and f32 values: fp16's normal range is 2**-14 ..
  65504, where gradients routinely go (mixed-precision programs hold f16 values and are
  left alone);
- finite scalar constants with ``2**-32 <= |a|, |b| <= 2**32``: then a difference needs
  ``|x| > 2**96`` or ``0 < |x| < 2**-94`` (and the product stays a normal fp32 number);
- pairs where one constant is a power of two (never two arbitrary constants: then
  ``round(round(x * a) * b)`` and ``round(x * round(a * b))`` differ in the last bit);
- an inner product ``x * a`` read by nothing else (else no op is saved).

docs/numerics.md states the bound; tests/transforms/test_peephole.py checks the fold against JAX.
Runs at compile time (``pipeline.BEFORE_LOWERING``, after ``fold_constants``), when the
precision is known and the cotangent seeds have become scalar constants.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from ..ir import DType, Graph, constant_value
from .rewrite import Appender, dce, output_ids, users

#: the constants' magnitude bound (see the module docstring)
BOUND = 2.0 ** 32


def _scalar_const(v) -> Optional[float]:
    if v.type.rank != 0:
        return None
    c = constant_value(v)
    if c is None:
        return None
    c = float(np.asarray(c).reshape(()))
    return c if np.isfinite(c) and 1 / BOUND <= abs(c) <= BOUND else None


def _split(node) -> Optional[Tuple[object, float]]:
    """(x, c) if ``node`` is an f32 ``x * c`` with an admissible scalar constant c."""
    if node.op != "mul" or node.output.dtype != DType.f32:
        return None
    a, b = node.inputs
    for x, c in ((a, b), (b, a)):
        val = _scalar_const(c)
        if val is not None and tuple(x.shape) == tuple(node.output.shape):
            return x, val
    return None


def _pow2(c: float) -> bool:
    return np.frexp(abs(c))[0] == 0.5


def fold_scalar_muls(graph: Graph, precision: str = "fp32") -> int:
    """Fold chains of scalar multiplications (see the module docstring); returns how many
    multiplications were removed."""
    if precision != "fp32":
        return 0
    producer = {v.id: n for n in graph.nodes for v in n.outputs}
    readers = users(graph)
    outs = output_ids(graph)
    changed = 0
    for node in list(graph.nodes):
        outer = _split(node)
        if outer is None:
            continue
        y, b = outer
        inner_node = producer.get(y.id)
        inner = _split(inner_node) if inner_node is not None else None
        if inner is None or y.id in outs or len(readers.get(y.id, ())) != 1:
            continue
        x, a = inner
        if not (_pow2(a) or _pow2(b)):
            continue
        c = np.float32(a) * np.float32(b)  # exact: one factor is a power of two
        if not (2.0 ** -126 <= abs(float(c)) <= float(np.finfo(np.float32).max)):
            continue
        ap = Appender(graph, node.source)
        k = ap.constant(np.asarray(c, np.float32))
        ap.place_before(node)
        node.inputs = (x, k)
        changed += 1
    if changed:
        dce(graph)
    return changed
