"""Zero-size tensors: folded away at translation time.

Core ML has no zero-size tensors, but JAX programs make them (JAX's associative_scan JVP
slices empty arrays, ``x[:0]``, ``split`` with a 0 piece, reductions over empty axes).
A zero-size value is fully known from its shape, so the frontend never builds one:

- an equation whose results are all zero-size becomes empty constants (its rule never
  runs); a zero-size result next to non-empty ones (``split``) is replaced the same way;
- an equation with a zero-size operand and a non-empty result is folded:
  * every operand a constant: evaluated by JAX itself (``primitive.bind``), so e.g. a
    reduction over an empty axis gives exactly JAX's identity (0, 1, -inf, ...);
  * ``concatenate`` drops its empty pieces; ``pad`` of an empty operand is the padding
    value broadcast; a scatter with no updates and a ``dynamic_update_slice`` of an empty
    block return the operand unchanged;
  * anything else raises ZeroSizeError naming the primitive.

Zero-size program inputs and outputs are not part of the program (``trace``): an input
becomes an empty constant (it carries no data), an output is an ``EmptyIO`` the host
fills with ``np.zeros(shape, dtype)``; ``Traced.empty_in`` / ``empty_out`` say which
pytree leaves they are (api.py feeds and returns them, rlxjax.load too). Empty constants
that nothing reads are removed by DCE at the end of tracing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
from .. import _jax_compat as jc

from ..errors import ZeroSizeError
from ..ir import constant_value


def _empty(aval) -> bool:
    return any(isinstance(d, (int, np.integer)) and int(d) == 0 for d in aval.shape)


def _has_body(eqn) -> bool:
    """Call and control-flow primitives: their bodies are translated (and folded) as usual."""
    def is_jaxpr(v):
        if isinstance(v, (jc.Jaxpr, jc.ClosedJaxpr)):
            return True
        return isinstance(v, (tuple, list)) and any(is_jaxpr(x) for x in v)

    return any(is_jaxpr(v) for k, v in eqn.params.items() if k != "update_jaxpr")


def error(ctx, what: str) -> ZeroSizeError:
    where = f" at {ctx.source}" if ctx.source else ""
    return ZeroSizeError(f"{what}{where}: Core ML has no zero-size tensors (a dimension of "
                         "0), and rlxjax could not fold this one away. Avoid the empty "
                         "array (e.g. skip the operation when a dimension is 0).")


def _empty_consts(ctx, eqn) -> List:
    ctx.made_empty = True
    return [ctx.constant(np.zeros(tuple(v.aval.shape), v.aval.dtype)) for v in eqn.outvars]


def fold(ctx, eqn, inputs, run) -> Optional[list]:
    """The outputs of ``eqn`` with zero-size values folded away, or None when ``eqn``
    touches no zero-size value (``run()`` applies the primitive's rule)."""
    out_empty = [_empty(v.aval) for v in eqn.outvars]
    in_empty = [v.type.is_static and v.type.size == 0 for v in inputs]
    if not (any(out_empty) or any(in_empty)) or _has_body(eqn):
        return None
    if all(out_empty):
        return _empty_consts(ctx, eqn)
    if not any(in_empty):  # split with an empty piece: run, then swap in empty constants
        outs = list(run())
        consts = _empty_consts(ctx, eqn)
        return [c if e else o for o, c, e in zip(outs, consts, out_empty)]
    consts = [constant_value(v) for v in inputs]
    if all(c is not None for c in consts):
        args = [np.asarray(c).astype(var.aval.dtype) for c, var in zip(consts, eqn.invars)]
        outs = eqn.primitive.bind(*args, **eqn.params)
        outs = outs if eqn.primitive.multiple_results else [outs]
        return [ctx.constant(np.asarray(o)) for o in outs]
    name = eqn.primitive.name
    if name == "concatenate":
        keep = [v for v, e in zip(inputs, in_empty) if not e]
        if len(keep) == 1:
            return [keep[0]]
        return [ctx.add("concatenate", *keep, axis=int(eqn.params["dimension"]))]
    if name == "pad" and in_empty[0]:
        shape = tuple(int(d) for d in eqn.outvars[0].aval.shape)
        return [ctx.add("broadcast_in_dim", inputs[1], shape=shape, dims=())]
    if name.startswith("scatter") and in_empty[2] and not in_empty[0]:
        return [inputs[0]]
    if name == "dynamic_update_slice" and in_empty[1] and not in_empty[0]:
        return [inputs[0]]
    shapes = ", ".join(str(v.type) for v in inputs)
    raise error(ctx, f"'{name}' with a zero-size operand ({shapes}) and a non-empty result")


@dataclass(frozen=True)
class EmptyIO:
    """A zero-size program input or output: no Core ML feature, its value is known from
    its shape (``name`` as the graph would have named it)."""

    name: str
    shape: Tuple[int, ...]
    dtype: str  # numpy name

    def value(self) -> np.ndarray:
        return np.zeros(self.shape, self.dtype)

    def matches(self, arr: np.ndarray) -> bool:
        return tuple(arr.shape) == self.shape and arr.dtype.name == self.dtype


def is_empty_type(t) -> bool:
    return t.is_static and t.size == 0


def interleave(n: int, empties: Dict[int, EmptyIO], values: List) -> List:
    """The ``n`` leaves: ``empties`` at their positions (as empty arrays), ``values`` in
    order at the others."""
    it = iter(values)
    out = [empties[k].value() if k in empties else next(it) for k in range(n)]
    rest = list(it)
    if rest:
        raise ValueError(f"internal: {len(rest)} values left over placing {n} leaves")
    return out


def graph_index(k: int, empties: Dict[int, EmptyIO]) -> Optional[int]:
    """Leaf ``k``'s position among the graph's inputs/outputs (None: an empty leaf)."""
    if k in empties:
        return None
    return k - sum(1 for e in empties if e < k)
