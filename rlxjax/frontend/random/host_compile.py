"""The host part of ``random="inputs"`` as two stages, so that its first call is quick.

Nearly all of the host part's compile time was XLA compiling the **integer** half of the
draws: threefry's rounds (``random_bits``), key splits and folds, counters' arithmetic -
XLA's CPU compile time grows with the number of kernels, one or more per draw. Integer
arithmetic gives the same bits however it is computed, so that half (**stage 1**: the
equations whose operands and results are all integers, bools or keys, and whose nested
jaxprs hold no float, computed from the host's arguments and constants only) is

- computed by **numpy** (host_numpy.py: no compile at all) when every one of its equations
  has a numpy rule and every key is a threefry key - dropout, ``normal``, ``uniform``,
  ``randint``, split / folded keys, nnx counters. After ``NUMPY_CALLS`` calls of one
  signature, XLA's compiled stage 1 (below) takes over: it is quicker per call;
- else **batched and compiled quickly by XLA**: the equations of one signature (primitive,
  parameters, operand types) at one depth from the arguments - the ``random_fold_in`` of
  every dropout layer, then the ``random_bits`` of every dropout layer of one shape, then
  their shifts - are one ``jax.vmap``-ed equation (``schedule``; not for rbg keys, whose
  batched bits differ), compiled with XLA's backend optimisation off and its older loop
  emitter (``FAST``), which compiles many small kernels far more quickly.

Float arithmetic is not exact under another compilation (LLVM fuses multiply-adds
differently: ``normal``'s ``erf_inv`` polynomial changes in its last bits), so every
equation that reads or makes a float - the bits turned into numbers, ``bernoulli``'s
comparison - is **stage 2**, one program compiled as ``jax.jit`` compiles it, reading stage
1's results: the draws stay JAX's own, bit for bit (tests/random/test_host_compile.py,
tests/random/test_host_numpy.py).

Stage 2 (and XLA's stage 1) is compiled once per signature of the arguments, on the first
call (``Staged`` keeps the executables); ``shared`` keeps the staged functions of identical
host parts (same equations, same constants), so a gradient and a training step of one loss
compile their host part once. bench/random_host_compile.py measures all of it.
"""
from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Sequence

import jax
import numpy as np

from ... import _jax_compat as jc
from . import host_numpy
from .liveness import is_key, subjaxprs

#: compiler options of stage 1 (integers only: exact at any optimisation level)
FAST = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
#: calls of one signature whose stage 1 numpy computes (no compile) before XLA's compiled,
#: batched stage 1 (quicker per call: ~2 ms against ~5 ms for 37 dropout draws) takes over
NUMPY_CALLS = 100


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


def _threefry_dtype():
    return jax.eval_shape(lambda: jax.random.key(0, impl="threefry2x32")).dtype


#: primitives whose batched form (``jax.vmap``) draws other bits than one call per row
_NOT_VMAP_INVARIANT = frozenset({"rng_bit_generator"})


def _batchable(eqn, threefry) -> bool:
    """Whether ``eqn`` batched by ``jax.vmap`` gives each row's own result: integer
    arithmetic and threefry keys do; ``rbg`` / ``unsafe_rbg`` keys (XLA's
    ``rng_bit_generator``) do not, so neither do equations touching them."""
    if eqn.primitive.name in _NOT_VMAP_INVARIANT or any(True for _ in subjaxprs(eqn)):
        return False
    return all(v.aval.dtype == threefry for v in list(eqn.invars) + list(eqn.outvars)
               if is_key(v.aval))


def _signature(eqn):
    """What equations must share to be computed as one batched equation."""
    params = sorted((k, str(p)) for k, p in eqn.params.items())
    return (eqn.primitive.name, str(params), tuple(str(v.aval) for v in eqn.invars))


def schedule(eqns) -> List[list]:
    """``eqns`` (integer only, in program order) as steps of one or more equations: the
    equations of one signature at one depth from the arguments (so none reads another's
    result), e.g. the ``random_bits`` of every dropout layer of one shape, form one step,
    computed as one batched equation (when batching keeps each row's bits: ``_batchable``)."""
    if any(e.effects for e in eqns):
        return [[e] for e in eqns]
    depth: Dict[Any, int] = {}
    groups: Dict[Any, list] = {}
    threefry = _threefry_dtype()
    for eqn in eqns:
        d = 1 + max((depth.get(v, 0) for v in eqn.invars if not isinstance(v, jc.Literal)),
                    default=0)
        depth.update((o, d) for o in eqn.outvars)
        alone = not _batchable(eqn, threefry)
        groups.setdefault((d, id(eqn) if alone else _signature(eqn)), []).append(eqn)
    return [groups[k] for k in sorted(groups, key=lambda k: k[0])]


class _Row:
    """Row ``i`` of a batched step's result ``base``, sliced only where read alone."""

    __slots__ = ("base", "i")

    def __init__(self, base, i):
        self.base, self.i = base, i


def _value(x):
    return x.base[x.i] if isinstance(x, _Row) else x


def _column(vals):
    """(vmap axis, operand) of one operand of a batched step: not batched when every
    equation reads the same value; a batched result as it is when the step reads all its
    rows in order; else the values stacked."""
    first = vals[0]
    if all(v is first for v in vals):
        return None, _value(first)
    if (isinstance(first, _Row) and first.base.shape[0] == len(vals)
            and all(isinstance(v, _Row) and v.base is first.base and v.i == i
                    for i, v in enumerate(vals))):
        return 0, first.base
    vals = [_value(v) for v in vals]
    if all(isinstance(v, (int, float, bool, np.generic)) for v in vals):
        return 0, np.stack(vals)
    return 0, jax.numpy.stack(vals)


def _run_steps(env, steps) -> None:
    for step in steps:
        read = lambda v: v.val if isinstance(v, jc.Literal) else env[v]  # noqa: E731
        if len(step) == 1:
            eqn = step[0]
            env.update(zip(eqn.outvars, jc.eval_equation(
                eqn, [_value(read(x)) for x in eqn.invars])))
            continue
        cols = [_column([read(e.invars[j]) for e in step])
                for j in range(len(step[0].invars))]
        if all(a is None for a, _ in cols):  # the same equation on the same values
            outs = jc.eval_equation(step[0], [c for _, c in cols])
            for eqn in step:
                env.update(zip(eqn.outvars, outs))
            continue
        outs = jax.vmap(lambda *a: jc.eval_equation(step[0], list(a)),
                        in_axes=tuple(a for a, _ in cols))(*[c for _, c in cols])
        for i, eqn in enumerate(step):
            env.update((v, _Row(o, i)) for v, o in zip(eqn.outvars, outs))


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
        self.steps = schedule(first)
        made = {o for e in first for o in e.outvars}
        read_later = [v for e in rest for v in e.invars
                      if not isinstance(v, jc.Literal) and v in made]
        read_later += [v for v in outvars if not isinstance(v, jc.Literal) and v in made]
        self.carried: List = list(dict.fromkeys(read_later))  # stage 1 -> stage 2 / results
        self.invars, self.outvars = list(invars), list(outvars)
        self._compiled: Dict[Any, tuple] = {}
        self.numpy = host_numpy.supported(first)  # stage 1 by numpy (host_numpy.py)

    def _stage1(self, *leaves):
        env = dict(self.consts)
        env.update(zip(self.invars, leaves))
        _run_steps(env, self.steps)
        # rows sliced here: stage 2 reading the batched results whole compiles 10x slower
        return [_value(env[v]) for v in self.carried]

    def _stage2(self, leaves, carried):
        env = dict(self.consts)
        env.update(zip(self.invars, leaves))
        env.update(zip(self.carried, carried))
        _run(env, self.rest)
        return [v.val if isinstance(v, jc.Literal) else env[v] for v in self.outvars]

    def _stage1_numpy(self, leaves):
        env = {v: host_numpy.to_numpy(c) for v, c in self.consts.items()}
        env.update((v, host_numpy.to_numpy(x)) for v, x in zip(self.invars, leaves))
        host_numpy.run(env, self.first)
        return [host_numpy.to_jax(v, env[v]) for v in self.carried]

    def _compile(self, leaves):
        """[stage 1 executable (None: numpy's), stage 2 executable, calls by numpy]."""
        if self.numpy:
            try:
                mid = self._stage1_numpy(leaves)
                return [None, jax.jit(self._stage2).lower(list(leaves), mid).compile(), 0]
            except Exception:  # noqa: BLE001 (a rule short of this case: XLA computes it)
                self.numpy = False
        mid = jax.eval_shape(self._stage1, *leaves)
        two = jax.jit(self._stage2).lower(list(leaves), mid).compile()
        return [self._compile_stage1(leaves), two, 0]

    def _compile_stage1(self, leaves):
        return jax.jit(self._stage1).lower(*leaves).compile(compiler_options=FAST)

    def __call__(self, *leaves):
        sig = tuple((np.shape(x), str(getattr(x, "dtype", type(x)))) for x in leaves)
        if sig not in self._compiled:
            self._compiled[sig] = self._compile(leaves)
        entry = self._compiled[sig]
        if entry[0] is None:
            entry[2] += 1
            if entry[2] > NUMPY_CALLS:  # a long run: XLA's stage 1 is quicker per call
                entry[0] = self._compile_stage1(leaves)
        one, two = entry[0], entry[1]
        mid = self._stage1_numpy(leaves) if one is None else one(*leaves)
        return two(list(leaves), mid)


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
