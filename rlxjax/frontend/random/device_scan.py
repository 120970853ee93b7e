"""``random="device"``: a scan that draws (after scan.py has split it, the *host
scan*: key arithmetic and draws only, its stacked results read by the device scan).

In device mode a key's value does not matter - every draw is a fresh Core ML draw of its
distribution - so the host scan's steps are independent draws: the scan is re-traced as
one ``vmap`` of its body over its ``length`` steps (its key / counter carries broadcast
to every step, its xs mapped, its consts shared), so each draw in the body becomes one
batched draw of shape ``[length, ...]``, which device.py recognises and makes with
one Core ML random op before the device scan reads it step by step. A draw from a const
key (no per-step key) stays one draw shared by every step, as JAX's numbers are.

Only scans whose carries are keys or integers (key arithmetic, counters) are re-traced:
a float carry computed from draws (a random walk) needs the steps in order, and stays
refused. Host values that are not draws (a counter stacked per step) are still computed
on the host by the original scan.
"""
from __future__ import annotations

from typing import List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from ... import _jax_compat as jc
from . import inputs, liveness


CARRIED = ("draws inside 'scan' and carries a value computed from draws from step to step "
           "(random='device' makes all steps' draws at once, before the loop, which a "
           "carry of draws - a random walk - cannot use)")


def _key_or_int(aval) -> bool:
    return liveness.is_key(aval) or np.dtype(aval.dtype).kind in "biu"


def as_vmap(eqn) -> Optional[jc.ClosedJaxpr]:
    """The host scan ``eqn`` as a closed jaxpr of its operands computing its stacked
    results (ys; its final carries are the host's), its steps one vmap; None when a carry
    is neither a key nor an integer."""
    p = eqn.params
    body, nc, nk, length = p["jaxpr"], p["num_consts"], p["num_carry"], p["length"]
    if not all(_key_or_int(v.aval) for v in eqn.invars[nc:nc + nk]):
        return None

    def run(*args):
        consts, carry, xs = args[:nc], args[nc:nc + nk], args[nc + nk:]
        if p["reverse"]:
            xs = [jnp.flip(x, 0) for x in xs]
        carry = [jnp.broadcast_to(c, (length,) + tuple(jnp.shape(c))) for c in carry]

        def step(carry, xs):
            outs = inputs._inline_eval(body.jaxpr, body.consts,
                                       [*consts, *carry, *xs], outer=eqn.source_info)
            return outs[nk:]

        ys = jax.vmap(step, axis_size=length)(carry, list(xs))
        return [jnp.flip(y, 0) for y in ys] if p["reverse"] else list(ys)

    structs: List = [inputs._struct(v.aval) for v in eqn.invars]
    return jax.make_jaxpr(run)(*structs)
