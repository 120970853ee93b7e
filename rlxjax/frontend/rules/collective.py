"""Frontend rules: ``psum`` / ``pmax`` / ``pmin`` over the axes of a ``vmap``.

``jax.vmap(f, axis_name="b")`` with ``lax.psum(x, "b")`` inside ``f`` (equinox's
``BatchNorm``, ``pmean`` in per-example code) leaves a ``psum`` whose ``axes`` are the
*positional* batch axes of its operand: a plain reduction over them (JAX's own batching
rule for collectives). A collective over a *named* device axis (``pmap``, ``shard_map``:
its ``axes`` hold the name) communicates between devices, which a single Core ML program
has none of: a clear error.
"""
from __future__ import annotations

from ...ir import DType
from ..registry import rule
from .reduction import _reduce_bool

_REDUCE = {"psum": "reduce_sum", "pmax": "reduce_max", "pmin": "reduce_min"}


@rule(*_REDUCE)
def _collective(ctx, eqn, *xs):
    name = eqn.primitive.name
    axes = tuple(eqn.params.get("axes", ()))
    named = [a for a in axes if not isinstance(a, int)]
    if named:
        raise ctx.unsupported(
            f"{name} over the named axis {named[0]!r} (a pmap / shard_map device axis: one "
            "Core ML program runs on one device); collectives over the axes of a "
            "jax.vmap(..., axis_name=...) are supported")
    if eqn.params.get("axis_index_groups") is not None:
        raise ctx.unsupported(f"{name} with axis_index_groups")
    axes = tuple(sorted(int(a) for a in axes))
    op = _REDUCE[name]
    outs = []
    for x in xs:
        if not axes:
            outs.append(x)
        elif x.dtype == DType.bool:
            if op == "reduce_sum":  # JAX converts bools to int32 first; never seen here
                raise ctx.unsupported(f"{name} of bool")
            outs.append(_reduce_bool(ctx, x, axes, op))
        else:
            outs.append(ctx.add(op, x, axes=axes))
    return outs
