"""Arguments whose NaN signs the answer depends on, and which Core ML cannot read.

XLA's ``top_k`` ranks floats in their total order, where a NaN with the sign bit set
(-NaN) comes below -inf and +NaN above +inf. MIL has no bit cast and every float op keeps a
NaN a NaN, so a Core ML program cannot tell -NaN from +NaN: rlxjax ranks every NaN as +NaN
(as ``np.nan``, ``jnp.nan`` and the NaNs Apple's ARM arithmetic makes are). ``lax.sort``
makes all NaNs equal before comparing, so only ``top_k`` (and ``approx_top_k``, which rlxjax
computes exactly) depends on the sign; so does ``jnp.signbit`` (a float32 -> int32
``bitcast_convert_type`` read for its sign, rules/bitcast.py), which rlxjax computes as
False for every NaN.

So that this is never a silently wrong answer, ``sensitive_args`` finds the arguments whose
values may flow into the operand of such an equation (conservatively: through any
equation, every input of an equation reaches each of its outputs, and an equation with a
nested jaxpr that holds a ``top_k`` makes all its inputs reach it); each call of the
compiled function checks those arguments and refuses one holding a -NaN with an
ArgumentError (``check``) that names the argument, the ``top_k`` and the user's line. A
program fed from Swift gets the +NaN ranking (docs/numerics.md).
"""
from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

from .. import _jax_compat as jc
from ..errors import ArgumentError
from .random.liveness import subjaxprs

#: primitives whose result depends on the sign of a NaN operand (a bitcast compiles only
#: as jnp.signbit's sign read: rules/bitcast.py)
SIGN_SENSITIVE = ("top_k", "approx_top_k", "bitcast_convert_type")
_WHAT = {"bitcast_convert_type": "jnp.signbit (a bitcast read for its sign bit)"}


def _holds_sensitive(jaxprs, names=SIGN_SENSITIVE) -> bool:
    return any(e.primitive.name in names or _holds_sensitive(subjaxprs(e), names)
               for j in jaxprs for e in j.eqns)


def _where(eqn, nested=False) -> str:
    line = jc.summarize_source(eqn.source_info)
    if nested and eqn.params.get("name") == "signbit":  # jnp.signbit's own jit
        what = "jnp.signbit"
    elif nested:
        inner = "lax.top_k" if _holds_sensitive(subjaxprs(eqn), ("top_k", "approx_top_k")) \
            else "jnp.signbit"
        what = f"a {inner} inside {eqn.primitive.name}"
    else:
        what = _WHAT.get(eqn.primitive.name, f"lax.{eqn.primitive.name}")
    return what + (f" at {line}" if line else "")


def sensitive_args(jaxpr, leaves: Sequence[int]) -> Dict[int, str]:
    """{argument leaf index: where its values meet a top_k} for the float arguments of
    ``jaxpr`` (whose invars are the argument leaves ``leaves``, then any host inputs)."""
    env = {v: {leaf} for v, leaf in zip(jaxpr.invars, leaves)
           if np.dtype(v.aval.dtype).kind == "f"}
    found: Dict[int, str] = {}
    for eqn in jaxpr.eqns:
        srcs = set().union(*(env.get(v, ()) for v in eqn.invars
                             if not isinstance(v, jc.Literal)))
        if not srcs:
            continue
        name = eqn.primitive.name
        nested = False
        if name in SIGN_SENSITIVE and np.dtype(eqn.invars[0].aval.dtype).kind == "f":
            reach = env.get(eqn.invars[0], set())
        elif _holds_sensitive(subjaxprs(eqn)):
            reach, nested = srcs, True
        else:
            reach = set()
        for leaf in reach:
            found.setdefault(leaf, _where(eqn, nested))
        for o in eqn.outvars:
            env[o] = srcs
    return found


def has_negative_nan(a) -> bool:
    a = np.asarray(a)
    return a.dtype.kind == "f" and a.size > 0 and bool(np.any(np.isnan(a) & np.signbit(a)))


def check(name: str, where: str, a) -> None:
    """Refuse an argument holding a -NaN that reaches a top_k (``where``)."""
    if has_negative_nan(a):
        raise ArgumentError(
            f"argument '{name}' holds a NaN with its sign bit set (-NaN; x86 arithmetic "
            f"such as 0/0 makes these), and its values reach {where}, whose result depends "
            "on that sign (XLA ranks -NaN below -inf; signbit(-NaN) is True), but Core ML "
            "cannot read a NaN's sign and reads every NaN as +NaN. Make the NaNs positive first, e.g. np.where(np.isnan(x), np.nan, x): "
            "then JAX and the program agree (docs/numerics.md)")
