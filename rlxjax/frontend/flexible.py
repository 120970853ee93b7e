"""Flexible dimensions from JAX's symbolic ones (``jax.export.symbolic_shape``; docs/flexible.md).

A program input may have dims that are JAX symbols (``b``), bounded by the scope's
constraints (``"b <= 128"``); they become Core ML flexible inputs (``RangeDim``). In the
RLX graph a symbolic dim is an ``ir.Dyn`` named by JAX's expression ('b', '64*b'); the
bounds of an input symbol ride on its ``Dyn``. Here the frontend:

* checks the inputs (``input_dims``): every symbolic dim of an input is a plain symbol (an
  expression such as ``2*b`` names no size Core ML can feed) and gets its bounds;
* turns the symbolic dims in an equation's parameters into ``Dyn`` (``plain_params``):
  JAX objects stay in the frontend;
* translates ``dim_as_value`` (a dim used as a number: ``jnp.mean`` over a flexible axis
  divides by it) into the RLX op ``dim_size``, which the lowering computes from the
  inputs' runtime shapes.
"""
from __future__ import annotations

import math
from typing import Dict, Tuple

import jax

from .. import _jax_compat as jc
from ..errors import DynamicShapeError, RlxError
from ..ir import Dyn
from .registry import rule


def _is_sym(d) -> bool:
    return not isinstance(d, int) and jc.is_symbolic_dim(d)


def input_dims(dyn_args, names, path_name) -> Dict[str, Tuple[int, int]]:
    """symbol -> (lower, upper) (upper -1: unbounded) for the symbolic dims of the input
    leaves; refuses a dim that is an expression rather than one symbol, naming the input."""
    bounds: Dict[str, Tuple[int, int]] = {}
    for path, leaf in jax.tree_util.tree_flatten_with_path(tuple(dyn_args))[0]:
        shape = getattr(leaf, "shape", None) or ()
        for axis, d in enumerate(shape):
            if not _is_sym(d):
                continue
            name = str(d)
            if not name.isidentifier():
                where = path_name(names[path[0].idx], path[1:])
                raise DynamicShapeError(
                    f"input '{where}' axis {axis} has the symbolic dimension '{name}', an "
                    "expression: a Core ML flexible input has one size per flexible axis. "
                    "Give each input axis a plain symbol (jax.export.symbolic_shape('b, 64')) "
                    "and compute derived sizes inside the function.")
            lo, hi = jc.symbolic_bounds(d)
            bounds[name] = (max(int(lo), 1), -1 if hi == math.inf else int(hi))
    return bounds


def input_type_dims(shape, bounds):
    """The RLX dims of an input aval's ``shape``: a symbol as a ``Dyn`` with its bounds."""
    return tuple(Dyn(str(d), bounds.get(str(d))) if _is_sym(d) else d for d in shape)


def _plain(v):
    if isinstance(v, tuple):
        out = tuple(_plain(x) for x in v)
        return out if any(a is not b for a, b in zip(out, v)) else v
    if not isinstance(v, (int, float, str, bool, type(None))) and jc.is_symbolic_dim(v):
        return Dyn(str(v))
    return v


def plain_params(eqn):
    """``eqn`` with the symbolic dims in its parameters (shapes of broadcast_in_dim, reshape,
    iota, ...) as ``Dyn``; ``eqn`` itself when it has none."""
    params = eqn.params
    new = {k: _plain(v) for k, v in params.items()}
    if all(new[k] is params[k] for k in params):
        return eqn
    return eqn.replace(params=new)


@rule("dim_as_value")
def _dim_as_value(ctx, eqn):
    d = eqn.params["dim"]  # a Dyn by now (plain_params)
    return ctx.add("dim_size", dim=d.name if isinstance(d, Dyn) else str(d))


def refuse_if_flexible(ctx, eqn, inputs, exc) -> None:
    """Raise DynamicShapeError for a rule that failed (``exc``) on an equation with
    flexible dims (``Dyn`` or JAX's symbolic ones); return if it has none (the failure is
    another one)."""
    if isinstance(exc, DynamicShapeError):  # already says which op (an inner equation)
        return
    avals = [v.type for v in inputs] + [v.aval for v in eqn.outvars]
    for t in avals:
        for axis, d in enumerate(getattr(t, "shape", ())):
            if isinstance(d, Dyn) or (not isinstance(d, int) and jc.is_symbolic_dim(d)):
                where = f" at {ctx.source}" if ctx.source else ""
                # an rlxjax error's text is for the user; a Python one's
                # ("unsupported operand type(s) for -: 'Dyn' and 'int'") is not
                why = (f" ({str(exc).splitlines()[0]})" if isinstance(exc, RlxError)
                       and str(exc) else "")
                raise DynamicShapeError(
                    f"{eqn.primitive.name}{where} does not support the flexible dimension "
                    f"'{d}' (axis {axis} of {t}){why}: its translation needs that size at "
                    "compile time. Keep that axis "
                    "static (a concrete size), or express the computation with ops that "
                    "do not depend on its size (docs/flexible.md).") from exc
