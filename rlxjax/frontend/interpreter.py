"""jaxpr -> RLX graph: an environment-passing interpreter over the jaxpr's equations.

Nested jaxprs (jit, closed_call, custom_jvp/vjp calls, remat) are inlined by their rules in
rules/control.py; this module knows nothing about individual primitives.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from jax.extend import core as jex_core

from ..errors import RlxError, UnsupportedPrimitiveError
from ..ir import Dyn, Graph, TensorType, Value, dtype_from_numpy
from .registry import RULES
from .rules.random import reject_prng_key


def source_line(eqn) -> Optional[str]:
    """'file.py:12 (fn)' of the user's frame that emitted this equation, if known."""
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(eqn.source_info)
    except Exception:  # JAX internals moved: degrade to no location rather than fail
        return None


def aval_type(aval) -> TensorType:
    shape = tuple(d if isinstance(d, (int, np.integer)) else Dyn(str(d)) for d in aval.shape)
    return TensorType(shape, dtype_from_numpy(aval.dtype))


class Lowering:
    """State of one jaxpr -> graph translation."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.source: Optional[str] = None
        self.primitive: Optional[str] = None

    # Helpers for rules ---------------------------------------------------------------
    def add(self, op: str, *inputs: Value, **params) -> Value:
        return self.graph.add_node(op, inputs, params, self.source).output

    def add_multi(self, op: str, inputs: Sequence[Value], **params):
        return self.graph.add_node(op, inputs, params, self.source).outputs

    def constant(self, value, dtype=None) -> Value:
        arr = np.asarray(value, dtype=dtype)
        dtype_from_numpy(arr.dtype)
        return self.graph.add_node("constant", (), {"value": arr}, self.source).output

    def unsupported(self, detail: str = "") -> UnsupportedPrimitiveError:
        return UnsupportedPrimitiveError(self.primitive or "?", self.source, detail)

    # The interpreter -------------------------------------------------------------------
    def eval_jaxpr(self, jaxpr, consts: Sequence[Any], args: Sequence[Value]) -> List[Value]:
        env: Dict[Any, Value] = {}

        def read(atom) -> Value:
            if isinstance(atom, jex_core.Literal):
                return self.constant(np.asarray(atom.val, dtype=atom.aval.dtype))
            return env[atom]

        for var, c in zip(jaxpr.constvars, consts):
            reject_prng_key(c, "a value the function closes over")
            env[var] = c if isinstance(c, Value) else self.constant(np.asarray(c))
        if len(args) != len(jaxpr.invars):
            raise RlxError(f"internal: jaxpr takes {len(jaxpr.invars)} args, got {len(args)}")
        for var, a in zip(jaxpr.invars, args):
            env[var] = a
        for eqn in jaxpr.eqns:
            outs = self.eval_eqn(eqn, [read(a) for a in eqn.invars])
            for var, v in zip(eqn.outvars, outs):
                if not isinstance(var, jex_core.DropVar):
                    env[var] = v
        return [read(a) for a in jaxpr.outvars]

    def eval_eqn(self, eqn, inputs: List[Value]) -> List[Value]:
        name = eqn.primitive.name
        saved = (self.source, self.primitive)
        # Equations inside library jaxprs (jnp.linalg, flax) carry no user frame: report
        # the user's line of the enclosing call instead.
        self.source, self.primitive = source_line(eqn) or saved[0], name
        try:
            fn = RULES.get(name)
            if fn is None:
                raise self.unsupported()
            out = fn(self, eqn, *inputs)
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            self._check_outputs(eqn, outs)
            return outs
        finally:
            self.source, self.primitive = saved

    def _check_outputs(self, eqn, outs: List[Value]) -> None:
        if len(outs) != len(eqn.outvars):
            raise RlxError(f"internal: rule for {eqn.primitive.name} returned {len(outs)} "
                           f"values for {len(eqn.outvars)} outputs")
        for var, v in zip(eqn.outvars, outs):
            want = aval_type(var.aval)
            if v.type != want:
                raise RlxError(f"internal: rule for {eqn.primitive.name} at {self.source} "
                               f"produced {v.type}, JAX says {want}")
