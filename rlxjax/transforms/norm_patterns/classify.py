"""Which RLX norm op a recognised normalisation is: partition shapes, affine operands, and
flax's running-statistics update for ``batch_norm_train``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import numpy as np

from ...ir import Value
from .analysis import Analysis, Stat, apply_shape_op


@dataclass(frozen=True)
class Candidate:
    op: str
    params: dict
    keep: Tuple[int, ...]  # the dims of x that gamma/beta span


def _const_along(labels: np.ndarray, d: int) -> bool:
    return labels.shape[d] == 1 or bool((labels == np.take(labels, [0], axis=d)).all())


def _is_axes_partition(labels: np.ndarray, reduced: Sequence[int]) -> bool:
    """Groups = all elements sharing their index on the dims NOT in ``reduced``."""
    if not all(_const_along(labels, d) for d in reduced):
        return False
    kept = [labels.shape[d] for d in range(labels.ndim) if d not in reduced]
    return _n_distinct(labels, reduced) == int(np.prod(kept, dtype=np.int64))


def _n_distinct(labels: np.ndarray, const_dims: Sequence[int]) -> int:
    """The number of distinct labels, where ``labels`` is constant along ``const_dims``:
    those of its slice at index 0 along them (np.unique of a GPT-2 activation's labels
    took 1.5 ms, of the slice microseconds)."""
    sub = labels[tuple(slice(0, 1) if d in const_dims else slice(None)
                       for d in range(labels.ndim))]
    return len(np.unique(sub))


def candidates(labels: np.ndarray, kind: str) -> List[Candidate]:
    """The norm ops whose statistics partition x (labels: group rep per element of x) the
    way ``labels`` does, in order of preference. ``kind`` is 'norm' (centred) or 'rms'."""
    shape, r = labels.shape, labels.ndim
    out: List[Candidate] = []
    free = [d for d in range(r) if not _const_along(labels, d)]
    axes_part = _is_axes_partition(labels, [d for d in range(r) if d not in free])
    if axes_part:
        a = max(free) + 1 if free else 0
        # a layer norm reduces the trailing dims a.. only: a reduced dim before them (the
        # batch dim of statistics over (0, 2, 3) of NCHW) is no layer norm
        if a < r and all(d in free or shape[d] == 1 for d in range(a)):
            op = "layer_norm" if kind == "norm" else "rms_norm"
            out.append(Candidate(op, {"axis": a}, tuple(range(a, r))))
    if kind != "norm" or r < 2:
        return out
    n_groups = _n_distinct(labels, [d for d in range(r) if d not in free])
    if n_groups % shape[0] == 0:
        g = n_groups // shape[0]
        for c in [r - 1] + list(range(1, r - 1)):
            if shape[c] % g:
                continue
            split = shape[:c] + (g, shape[c] // g) + shape[c + 1:]
            reduced = [d for d in range(1, r + 1) if d != c]
            if _is_axes_partition(labels.reshape(split), reduced):
                out.append(Candidate("group_norm", {"num_groups": g, "channel_axis": c}, (c,)))
    if r >= 3 and axes_part and [d for d in range(r) if d not in free and shape[d] > 1] == [1]:
        out.append(Candidate("layer_norm2d", {}, (1,)))
    return out


def bn_axis(labels: np.ndarray) -> Optional[int]:
    """The axis a if the groups are 'everything with the same index along a'."""
    free = [d for d in range(labels.ndim) if not _const_along(labels, d)]
    if len(free) == 1 and _is_axes_partition(labels, [d for d in range(labels.ndim)
                                                      if d != free[0]]):
        return free[0]
    return None


# -- affine operands -------------------------------------------------------------------
def _trace_data(v: Value) -> Tuple[Value, np.ndarray]:
    """(root, index map): ``v`` is data movement (reshape/transpose/broadcast_in_dim) of
    ``root``; the map gives, per element of ``v``, the root flat index it holds."""
    chain = []
    while v.node is not None and v.node.op in ("reshape", "transpose", "broadcast_in_dim"):
        chain.append(v.node)
        v = v.node.inputs[0]
    idx = np.arange(v.type.size).reshape(v.shape)
    for n in reversed(chain):
        idx = apply_shape_op(n, idx)
    return v, idx


@dataclass(frozen=True)
class ParamPlan:
    root: Value                 # the data gamma/beta is read from
    inner: Tuple[int, ...]      # root reshaped to this (size-1 where it is broadcast)
    target: Tuple[int, ...]     # the op's operand shape: x_shape[keep]

    @property
    def broadcast(self) -> bool:
        return self.inner != self.target


def param_plan(v: Value, x_shape, keep) -> Optional[ParamPlan]:
    """How to make the op's gamma/beta (shape ``x_shape[keep]``) from a factor ``v`` that
    broadcasts against x: only if v varies along the ``keep`` dims alone, and reads its
    root's elements in row-major order (possibly broadcast along some of those dims)."""
    r = len(x_shape)
    if len(v.shape) > r or not v.type.is_static:
        return None
    root, idx = _trace_data(v)
    try:
        full = np.broadcast_to(idx, tuple(x_shape))
    except ValueError:
        return None
    if not all(_const_along(full, d) for d in range(r) if d not in keep):
        return None
    sub = full[tuple(slice(None) if d in keep else 0 for d in range(r))]
    varying = [i for i in range(sub.ndim) if not _const_along(sub, i)]
    core = sub[tuple(slice(None) if i in varying else 0 for i in range(sub.ndim))]
    if not np.array_equal(np.ravel(core), np.arange(root.type.size)):
        return None
    target = tuple(sub.shape)
    inner = tuple(d if i in varying else 1 for i, d in enumerate(target))
    return ParamPlan(root, inner, target)


def build_param(app, plan: ParamPlan) -> Value:
    """The op's gamma/beta operand from its plan (reusing an existing value if it fits)."""
    src = plan.root
    if tuple(src.shape) != plan.inner:
        src = app.add("reshape", src, shape=plan.inner)
    if plan.broadcast:
        src = app.add("broadcast_in_dim", src, shape=plan.target,
                      dims=tuple(range(len(plan.target))))
    return src


# -- flax's running statistics ------------------------------------------------------------
def shortest_float(c: float, dtype) -> float:
    """The shortest decimal that rounds to the same ``dtype`` value (0.99, not 0.99000001)."""
    return float(np.format_float_positional(np.asarray(c, dtype=dtype.np)[()], unique=True))


@dataclass(frozen=True)
class RunningUpdate:
    value: Value     # the updated running statistic (an add node's output)
    running: Value   # the old running statistic
    momentum: float


def running_update(an: Analysis, v: Value, want: str, groups_like: Stat,
                   channel_reps: np.ndarray) -> Optional[RunningUpdate]:
    """``v == m·running + (1 - m)·stat`` with ``stat`` the batch ``want`` ('mean'/'var') over
    the very groups of the norm, one per channel in channel order."""
    n = v.node
    if n is None or n.op != "add" or v.shape != channel_reps.shape:
        return None
    terms = []
    for t in n.inputs:
        if t.node is None or t.node.op != "mul":
            return None
        a, b = t.node.inputs
        ca, cb = an.scalar(a), an.scalar(b)
        if (ca is None) == (cb is None):
            return None
        terms.append((ca, b) if ca is not None else (cb, a))
    for (m, running), (k, stat_v) in (terms, terms[::-1]):
        s = an.stat(stat_v)
        if (s is None or s.kind != want or s.eps is not None or s.base.id != groups_like.base.id
                or not np.array_equal(s.groups, groups_like.groups)
                or not np.array_equal(np.broadcast_to(s.at, v.shape), channel_reps)):
            continue
        if running.shape != v.shape or running.dtype != v.dtype or an.stat(running) is not None:
            continue
        mom = shortest_float(m, v.dtype)
        one_minus = np.asarray(1.0 - mom, dtype=v.dtype.np)
        if 0.0 <= mom <= 1.0 and one_minus == np.asarray(k, dtype=v.dtype.np):
            return RunningUpdate(v, running, mom)
    return None
