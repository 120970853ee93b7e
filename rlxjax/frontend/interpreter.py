"""jaxpr -> RLX graph: an environment-passing interpreter over the jaxpr's equations.

Nested jaxprs (jit, closed_call, custom_jvp/vjp calls, remat) are inlined by their rules in
rules/control.py; this module knows nothing about individual primitives.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
from .. import _jax_compat as jc

from ..errors import RlxError, UnsupportedPrimitiveError
from ..ir import DType, Dyn, Graph, TensorType, Value, dtype_from_numpy
from ..ir.builder import Builder
from . import flexible, uint32, zerosize
from .registry import RULES
from .rules.random import reject_prng_key


# rlxjax's own frames are never the user's line (rlxjax.nn called from a model, the compat
# module re-binding a custom rule's primitive): JAX skips them as it skips its own.
# Both spellings of the folder: code objects keep the path as imported, which need not be
# normalised (``sys.path`` holding ``tools/..``).
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jc.exclude_from_source_lines(_HERE)
if os.path.dirname(os.path.dirname(__file__)) != _HERE:
    jc.exclude_from_source_lines(os.path.dirname(os.path.dirname(__file__)))


def source_line(eqn) -> Optional[str]:
    """'file.py:12 (fn)' of the user's frame that emitted this equation, if known."""
    try:
        return jc.summarize_source(eqn.source_info)
    except Exception:  # JAX internals moved: degrade to no location rather than fail
        return None


def aval_type(aval, carry_u32: bool = False) -> TensorType:
    """The RLX type of a JAX aval; with ``carry_u32``, uint32 is carried as int32 (see
    uint32.py: inside a program only, where the values are proven to fit)."""
    shape = tuple(d if isinstance(d, (int, np.integer)) else Dyn(str(d)) for d in aval.shape)
    if carry_u32 and uint32.is_u32(aval):
        return TensorType(shape, DType.i32)
    return TensorType(shape, dtype_from_numpy(aval.dtype))


#: primitives whose rules look at the readers of their result (Lowering.readers)
_READ_BY = ("bitcast_convert_type",)


def _readers(jaxpr) -> Optional[Dict[Any, list]]:
    """{var: the equations reading it} of ``jaxpr``, None when no equation needs it; a
    result of the jaxpr itself counts as read by ``None`` (an unknown reader)."""
    if not any(e.primitive.name in _READ_BY for e in jaxpr.eqns):
        return None
    found: Dict[Any, list] = {}
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if not isinstance(v, jc.Literal):
                found.setdefault(v, []).append(eqn)
    for v in jaxpr.outvars:
        if not isinstance(v, jc.Literal):
            found.setdefault(v, []).append(None)
    return found


class Lowering(Builder):
    """State of one jaxpr -> graph translation: a Builder whose source is the equation
    being translated, with uint32 range proofs on its constants (uint32.py)."""

    def __init__(self, graph: Graph, custom_rules=None):
        self.u32_ranges = uint32.Ranges()  # value id -> proven [lo, hi]
        super().__init__(graph, on_constant=self.u32_ranges.constant)
        # custom_rules.CustomRules of the trace (None: custom calls are inlined, for
        # translations that are never differentiated)
        self.custom_rules = custom_rules
        self.primitive: Optional[str] = None
        self.made_empty = False  # zero-size constants were made (zerosize.py): run DCE
        # inside a library function's call (rules/control.py): report the call's line
        self.in_library = False
        # {var: equations reading it} of the jaxpr being translated, for rules whose
        # exact lowering depends on how their result is read (rules/bitcast.py); None when
        # not computed (only jaxprs holding such a rule's primitive need it)
        self.readers: Optional[Dict[Any, list]] = None
        # inside a jax.checkpoint body: called with (eqn, its outputs) after each equation,
        # to collect what the checkpoint's policy saves (frontend/remat.py)
        self.remat_saving = None

    def unsupported(self, detail: str = "") -> UnsupportedPrimitiveError:
        return UnsupportedPrimitiveError(self.primitive or "?", self.source, detail)

    # The interpreter -------------------------------------------------------------------
    def eval_jaxpr(self, jaxpr, consts: Sequence[Any], args: Sequence[Value]) -> List[Value]:
        env: Dict[Any, Value] = {}
        # Values the function closes over become constants where an equation first reads
        # them, so they carry that equation's source line like every other node.
        closed: Dict[Any, Any] = {}

        def read(atom) -> Value:
            if isinstance(atom, jc.Literal):
                return self.constant(np.asarray(atom.val, dtype=atom.aval.dtype))
            v = env.get(atom)
            if v is None:
                c = closed.pop(atom)
                reject_prng_key(c, "a value the function closes over")
                v = env[atom] = self.constant(np.asarray(c))
            return v

        for var, c in zip(jaxpr.constvars, consts):
            if isinstance(c, Value):
                env[var] = c
            else:
                closed[var] = c
        if len(args) != len(jaxpr.invars):
            raise RlxError(f"internal: jaxpr takes {len(jaxpr.invars)} args, got {len(args)}")
        for var, a in zip(jaxpr.invars, args):
            env[var] = a
        saved, self.readers = self.readers, _readers(jaxpr)
        try:
            for eqn in jaxpr.eqns:
                outs = self.eval_eqn(eqn, read)
                for var, v in zip(eqn.outvars, outs):
                    if not isinstance(var, jc.DropVar):
                        env[var] = v
        finally:
            self.readers = saved
        return [read(a) for a in jaxpr.outvars]

    def eval_eqn(self, eqn, read) -> List[Value]:
        """Translate one equation; ``read`` gives the value of each of its input atoms
        (called under the equation's source line: literals are constants built here)."""
        name = eqn.primitive.name
        saved = (self.source, self.primitive)
        # Equations inside library jaxprs (jnp.linalg, flax) carry no user frame: report
        # the user's line of the enclosing call instead.
        own = None if self.in_library else source_line(eqn)
        self.source, self.primitive = own or saved[0], name
        try:
            inputs = [read(a) for a in eqn.invars]
            eqn = flexible.plain_params(eqn)  # symbolic dims (jax.export) -> ir.Dyn
            fn = RULES.get(name)

            def run():
                if fn is None:
                    raise self.unsupported()
                return fn(self, eqn, *inputs)

            try:
                out = zerosize.fold(self, eqn, inputs, run)  # zero-size values: folded away
                out = run() if out is None else out
            except (TypeError, ValueError, jc.InconclusiveDimensionOperation) as e:
                # a rule met a symbolic dim it cannot take
                flexible.refuse_if_flexible(self, eqn, inputs, e)
                raise
            outs = list(out) if isinstance(out, (list, tuple)) else [out]
            self._check_outputs(eqn, outs)
            if any(uint32.is_u32(v.aval) for v in eqn.outvars):
                uint32.track(self, eqn, inputs, outs)
            if self.remat_saving is not None:
                self.remat_saving(eqn, outs)
            return outs
        finally:
            self.source, self.primitive = saved

    def _check_outputs(self, eqn, outs: List[Value]) -> None:
        if len(outs) != len(eqn.outvars):
            raise RlxError(f"internal: rule for {eqn.primitive.name} returned {len(outs)} "
                           f"values for {len(eqn.outvars)} outputs")
        for var, v in zip(eqn.outvars, outs):
            want = aval_type(var.aval, carry_u32=True)
            if v.type != want:
                raise RlxError(f"internal: rule for {eqn.primitive.name} at {self.source} "
                               f"produced {v.type}, JAX says {want}")
