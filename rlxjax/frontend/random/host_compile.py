"""The host part of ``random="inputs"`` as two XLA programs, so that compiling it is quick.

Nearly all of the host part's compile time is XLA optimising the **integer** half of the
draws: threefry's rounds (``random_bits``), key splits and folds, counters' arithmetic.
Integer arithmetic gives the same bits at every optimisation level, so that half is
compiled with XLA's backend optimisation off (``xla_backend_optimization_level=0``: a
dropout model's host part compiles about 10x faster). Float arithmetic is not (LLVM fuses
multiply-adds differently: ``normal``'s ``erf_inv`` polynomial changes in its last bits), so
every equation that reads or makes a float - the bits turned into numbers, ``bernoulli``'s
comparison - runs in a second program compiled as ``jax.jit`` compiles it: the draws stay
JAX's own, bit for bit (tests/random/test_host_compile.py).

- **stage 1**: the equations whose operands and results are all integers, bools or keys
  (and whose nested jaxprs, if any, hold no float), computed from the host's arguments and
  constants only;
- **stage 2**: the rest, reading stage 1's results.

Each stage is compiled once per signature of the arguments, on the first call (``Staged``
keeps the executables), so a program pays it once; ``shared`` keeps the staged functions
of identical host parts (same equations, same constants), so a gradient and a training step
of one loss compile their host part once.
"""
from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Sequence

import jax
import numpy as np

from ... import _jax_compat as jc
from .liveness import is_key, subjaxprs

#: compiler options of stage 1 (integers only: exact at any optimisation level)
FAST = {"xla_backend_optimization_level": 0}


def _exact_kind(aval) -> bool:
    return is_key(aval) or np.dtype(aval.dtype).kind in "biu"


def _integer_only(eqn) -> bool:
    atoms = list(eqn.invars) + list(eqn.outvars)
    if not all(_exact_kind(v.aval) for v in atoms):
        return False
    return all(_integer_only(e) for sub in subjaxprs(eqn) for e in sub.eqns)


def _run(env, eqns) -> None:
    read = lambda v: v.val if isinstance(v, jc.Literal) else env[v]  # noqa: E731
    for eqn in eqns:
        for v, o in zip(eqn.outvars, jc.eval_equation(eqn, [read(x) for x in eqn.invars])):
            env[v] = o


class Staged:
    """``fn(*leaves) -> [values of outvars]`` computed by the two stages (see above)."""

    def __init__(self, fj, consts, invars, eqns, outvars):
        self.consts = dict(zip(fj.constvars, consts))
        first, rest, known = [], [], set(invars) | set(fj.constvars)
        for eqn in eqns:
            ins = [v for v in eqn.invars if not isinstance(v, jc.Literal)]
            if _integer_only(eqn) and all(v in known for v in ins):
                first.append(eqn)
                known.update(eqn.outvars)
            else:
                rest.append(eqn)
        self.first, self.rest = first, rest
        made = {o for e in first for o in e.outvars}
        read_later = [v for e in rest for v in e.invars
                      if not isinstance(v, jc.Literal) and v in made]
        read_later += [v for v in outvars if not isinstance(v, jc.Literal) and v in made]
        self.carried: List = list(dict.fromkeys(read_later))  # stage 1 -> stage 2 / results
        self.invars, self.outvars = list(invars), list(outvars)
        self._compiled: Dict[Any, tuple] = {}

    def _stage1(self, *leaves):
        env = dict(self.consts)
        env.update(zip(self.invars, leaves))
        _run(env, self.first)
        return [env[v] for v in self.carried]

    def _stage2(self, leaves, carried):
        env = dict(self.consts)
        env.update(zip(self.invars, leaves))
        env.update(zip(self.carried, carried))
        _run(env, self.rest)
        return [v.val if isinstance(v, jc.Literal) else env[v] for v in self.outvars]

    def _compile(self, leaves):
        one = jax.jit(self._stage1).lower(*leaves).compile(compiler_options=FAST)
        mid = jax.eval_shape(self._stage1, *leaves)
        two = jax.jit(self._stage2).lower(list(leaves), mid).compile()
        return one, two

    def __call__(self, *leaves):
        sig = tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves)
        if sig not in self._compiled:
            self._compiled[sig] = self._compile(leaves)
        one, two = self._compiled[sig]
        return two(list(leaves), one(*leaves))


_SHARED: Dict[str, Staged] = {}


def _fingerprint(fj, consts, invars, eqns, outvars) -> str:
    """The host part's identity: its equations (primitive, parameters, operands numbered
    by first appearance, types) and its constants' bytes."""
    h = hashlib.sha256()
    ids: Dict[Any, int] = {}

    def atom(v) -> str:
        if isinstance(v, jc.Literal):
            return f"lit({v.val!r}:{v.aval})"
        if v not in ids:
            ids[v] = len(ids)
        return f"v{ids[v]}:{v.aval}"

    const_of = dict(zip(fj.constvars, consts))
    for v in list(fj.constvars) + list(invars):
        h.update(atom(v).encode())
    for v in fj.constvars:
        c = const_of[v]
        a = np.asarray(jax.random.key_data(c)) if is_key(jax.typeof(c)) else np.asarray(c)
        h.update(str((a.shape, a.dtype)).encode() + np.ascontiguousarray(a).tobytes())
    for eqn in eqns:
        params = sorted((k, str(p)) for k, p in eqn.params.items())
        h.update(f"{eqn.primitive.name}{params}({','.join(map(atom, eqn.invars))})->"
                 f"({','.join(map(atom, eqn.outvars))})\n".encode())
    h.update(",".join(map(atom, outvars)).encode())
    return h.hexdigest()


def shared(fj, consts, invars, eqns, outvars) -> Staged:
    """The ``Staged`` host function of these equations, one per identical host part."""
    try:
        key = _fingerprint(fj, consts, invars, eqns, outvars)
    except Exception:  # (a jaxpr that does not print): no sharing, still correct
        return Staged(fj, consts, invars, eqns, outvars)
    if key not in _SHARED:
        _SHARED[key] = Staged(fj, consts, invars, eqns, outvars)
    return _SHARED[key]
