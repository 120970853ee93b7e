"""Hypothesis strategies shared by the per-primitive tests (tests/frontend/test_primitives_*.py).

Small shapes (rank 0-3, dims 1-5) keep every example to a few milliseconds of compile + run.
Float elements exclude subnormals: XLA on CPU flushes them to zero, numpy does not, and that
is a property of the host, not of the program under test.
"""
from __future__ import annotations

import numpy as np
from hypothesis import settings, strategies as st
from hypothesis.extra import numpy as hnp

from helpers import examples

F32, F16, I32, BOOL = np.float32, np.float16, np.int32, np.bool_

#: Default per-test settings: few examples, no deadline (first example pays JAX's jit).
FEW = settings(max_examples=examples(8), deadline=None)
SOME = settings(max_examples=examples(12), deadline=None)


def shapes(min_dims=0, max_dims=3, min_side=1, max_side=5):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=max_side)


def bshapes(n=2, max_dims=3):
    """n mutually broadcastable shapes (rank 0-3); `.input_shapes` of the drawn value."""
    return hnp.mutually_broadcastable_shapes(num_shapes=n, min_dims=0, max_dims=max_dims,
                                             min_side=1, max_side=5)


def _f32_bounds(lo, hi):
    lo_ = float(np.float32(lo))
    hi_ = float(np.float32(hi))
    if lo_ < lo:
        lo_ = float(np.nextafter(np.float32(lo_), np.float32(np.inf)))
    if hi_ > hi:
        hi_ = float(np.nextafter(np.float32(hi_), np.float32(-np.inf)))
    return lo_, hi_


def float_elements(lo=-10.0, hi=10.0, exclude_near=None, away_from_zero=None):
    """fp32 elements in [lo, hi].

    exclude_near=(step, offset, dist): drop values within dist of offset + k*step (e.g. the
    .5 ties of round()). away_from_zero=d: drop |x| < d (divisors, negative powers)."""
    lo_, hi_ = _f32_bounds(lo, hi)
    el = st.floats(lo_, hi_, width=32, allow_subnormal=False)
    if exclude_near is not None:
        step, offset, dist = exclude_near

        def far(v):
            r = (v - offset) / step
            return abs(r - round(r)) * step > dist

        el = el.filter(far)
    if away_from_zero is not None:
        el = el.filter(lambda v: abs(v) >= away_from_zero)
    return el


def dyadic_elements(lo=-8, hi=8, denom=8):
    """Floats k/denom in [lo, hi]: sums and products of a few of them are exact in fp32, so
    results do not depend on the summation order (XLA's vs numpy's)."""
    return st.integers(int(lo * denom), int(hi * denom)).map(lambda k: k / denom)


def arrays(dtype, shape, elements=None, lo=-10, hi=10):
    dtype = np.dtype(dtype)
    if elements is None:
        if dtype.kind == "b":
            elements = st.booleans()
        elif dtype.kind in "iu":
            elements = st.integers(int(lo), int(hi))
        else:
            elements = float_elements(lo, hi)
    return hnp.arrays(dtype, shape, elements=elements)


def axes_subsets(rank):
    """A (possibly empty) tuple of distinct axes of a rank-`rank` array, in random order."""
    return st.lists(st.integers(0, rank - 1), unique=True, max_size=rank).map(tuple) \
        if rank else st.just(())


@st.composite
def dot_problems(draw, max_rank=4):
    """(lhs shape, rhs shape, dimension_numbers) with dims of each kind at random positions
    (dot_general: tests of the primitive and of its gradient)."""
    while True:
        nb, nc, nl, nr = (draw(st.integers(0, 2)) for _ in range(4))
        if nb + nc + nl <= max_rank and nb + nc + nr <= max_rank:
            break
    size = st.integers(1, 4)
    b = [draw(size) for _ in range(nb)]
    c = [draw(size) for _ in range(nc)]
    lf = [draw(size) for _ in range(nl)]
    rf = [draw(size) for _ in range(nr)]
    lhs_labels = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + \
        [("f", i) for i in range(nl)]
    rhs_labels = [("b", i) for i in range(nb)] + [("c", i) for i in range(nc)] + \
        [("f", i) for i in range(nr)]
    lhs_labels = draw(st.permutations(lhs_labels))
    rhs_labels = draw(st.permutations(rhs_labels))
    sizes_l = {"b": b, "c": c, "f": lf}
    sizes_r = {"b": b, "c": c, "f": rf}
    lshape = tuple(sizes_l[k][i] for k, i in lhs_labels)
    rshape = tuple(sizes_r[k][i] for k, i in rhs_labels)
    pos = lambda labels, kind, n: tuple(labels.index((kind, i)) for i in range(n))
    # JAX requires batch dims to appear in the same order in both operands (label order);
    # contracting dims pair up by index, in any order (shuffle the pairs).
    cpairs = draw(st.permutations(list(range(nc))))
    dn = (((tuple(lhs_labels.index(("c", i)) for i in cpairs),
            tuple(rhs_labels.index(("c", i)) for i in cpairs))),
          (pos(lhs_labels, "b", nb), pos(rhs_labels, "b", nb)))
    return lshape, rshape, dn
