"""flax nnx hijax Variables (``nnx.var_defaults(hijax=True)``) as plain values.

A hijax Variable is a JAX "high" type: ``nnx.merge`` of a State makes one with the
``new_variable`` primitive, reading it is ``get_variable`` and ``v[...] = x`` is
``set_variable``. Their avals (``AbstractVariable``) have no shape or dtype, so no rule
can translate them. ``lower`` re-traces a jaxpr holding them with each Variable as a box
of its current leaves: ``new_variable`` fills a box, ``get_variable`` reads it,
``set_variable`` replaces its leaves, in program order - what the Variable holds at each
point, so the jaxpr left computes the same values from plain arrays (and rlxjax's own
gradient transform differentiates it like any other). Calls (``jit``) are inlined.

Refused with an UnsupportedPrimitiveError naming the user's line: an update of a Variable
made from the arguments (``nnx.merge`` of a State passed in: ``jax.jit`` writes its new
value back into the argument's Variable, a compiled program cannot), a hijax Variable
returned by the function (return its value, ``v[...]``, or ``nnx.state`` of a model
built without hijax), passed into a loop or branch (``scan`` / ``while`` / ``cond``
operands), or any other primitive reading one.
"""
from __future__ import annotations

from typing import Any, List

import jax

from .. import _jax_compat as jc
from ..errors import UnsupportedPrimitiveError
from .random import liveness

_OPS = ("new_variable", "get_variable", "set_variable")
_CALLS = ("pjit", "jit", "closed_call", "core_call")


class _Box:
    """A hijax Variable during the re-trace: its current leaves; ``from_arg``: made from
    the function's arguments (``nnx.merge`` of a State passed in)."""

    def __init__(self, leaves, from_arg=False):
        self.leaves = list(leaves)
        self.from_arg = from_arg


def _is_high(aval) -> bool:
    return bool(getattr(aval, "is_high", False))


def _sub(eqn):
    sub = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
    if isinstance(sub, jc.ClosedJaxpr):
        return sub.jaxpr, sub.consts
    return (sub, []) if isinstance(sub, jc.Jaxpr) else None


def _holds(jaxpr) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _OPS:
            return True
        if eqn.primitive.name in _CALLS and _sub(eqn) and _holds(_sub(eqn)[0]):
            return True
    return False


def needed(closed) -> bool:
    j = closed.jaxpr
    return _holds(j) or any(_is_high(v.aval) for v in list(j.invars) + list(j.outvars)
                            if not isinstance(v, jc.Literal))


def _refuse(eqn, what: str) -> UnsupportedPrimitiveError:
    line = liveness.where([eqn])[0] if eqn is not None else None  # the user's own line
    prim = eqn.primitive.name if eqn is not None else "get_variable"
    return UnsupportedPrimitiveError(prim, line, message=(
        f"flax nnx hijax Variable (nnx.var_defaults(hijax=True)){' at ' + line if line else ''}"
        f": {what}. rlxjax computes with hijax Variables inside the function (merge, read, "
        "update); return their values (v[...]) rather than the Variables, or build the "
        "model without hijax"))


def _eval(jaxpr, consts, args, inputs) -> List[Any]:
    """Evaluate ``jaxpr`` on ``args``; ``inputs``: ids of the function's argument values."""
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    read = lambda v: v.val if isinstance(v, jc.Literal) else env[v]  # noqa: E731
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if name == "new_variable":
            outs = [_Box(ins, any(id(x) in inputs for x in ins))]
        elif name == "get_variable":
            if not isinstance(ins[0], _Box):
                raise _refuse(eqn, "a Variable passed in as an argument is read")
            outs = list(ins[0].leaves)
        elif name == "set_variable":
            if not isinstance(ins[0], _Box):
                raise _refuse(eqn, "a Variable passed in as an argument is updated")
            if ins[0].from_arg:  # JAX would write the new value back into the argument
                raise _refuse(eqn, "it updates a Variable of an argument (nnx.merge of a "
                                   "State passed in): jax.jit writes the new value back into "
                                   "the argument's Variable, which a compiled program cannot; "
                                   "return the new value and assign it after the call")
            ins[0].leaves = list(ins[1:])
            outs = []
        elif name in _CALLS and _sub(eqn) and _holds(_sub(eqn)[0]):
            outs = _eval(*_sub(eqn), ins, inputs)
        else:
            if any(isinstance(x, _Box) for x in ins):
                raise _refuse(eqn, f"a Variable is an operand of '{name}' (a loop, branch "
                                   "or transform over hijax Variables)")
            outs = jc.eval_equation(eqn, ins)
        for v, o in zip(eqn.outvars, outs):
            if not isinstance(v, jc.DropVar):
                env[v] = o
    return [read(v) for v in jaxpr.outvars]


def lower(closed):
    """``closed`` with its hijax Variables replaced by their values (see above)."""
    j = closed.jaxpr
    for v in j.invars:
        if _is_high(v.aval):
            raise _refuse(None, "a Variable is a program input (pass nnx.split's State; "
                                "rlxjax reads each Variable's value)")
    for v in j.outvars:
        if not isinstance(v, jc.Literal) and _is_high(v.aval):
            producer = next((e for e in j.eqns if v in e.outvars), None)
            raise _refuse(producer, "the function returns a Variable")
    structs = [jax.ShapeDtypeStruct(tuple(v.aval.shape), v.aval.dtype) for v in j.invars]
    return jax.make_jaxpr(lambda *a: _eval(j, closed.consts, a, {id(x) for x in a}))(*structs)
