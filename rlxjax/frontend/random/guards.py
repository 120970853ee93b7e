"""``random="inputs"``: a ``while_loop`` bounded by an *assumption*, checked on every call.

loops.py bounds a sampling loop's steps by interval arithmetic; an integer argument has
no known range, so a loop whose step count is computed from one (keras-hub's samplers run
``max_length - min(sum(int(padding_mask)))`` steps: a padding mask passed as int32 or
float32, as tokenizers give it) has no bound. ``assumed_bound`` finds one assuming every
integer of unknown range in the function is ``>= 0`` (a mask of 0s and 1s, a length, a
position: ``max_length - index <= max_length``), and returns it with a ``Guard``: the
loop's actual bound (``max(n) - min(i0)`` of its ``i < n`` condition) computed by JAX
from the call's arguments, before the program runs. A call whose loop could run more
steps than the program was compiled for is refused (ArgumentError) instead of reading
draws that were not made; within the bound the results are JAX's, as for a bound found
without the assumption.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import jax
from ... import _jax_compat as jc
from ...errors import ArgumentError
from . import liveness, loops

_MOST = 1 << 16  # an assumed bound above this is no bound (a host scan of its draws)


@dataclass
class Guard:
    """The loop's actual step bound on a call's arguments, checked against ``steps``."""

    leaves: List[int]   # the argument leaves it reads (indices into the call's leaves)
    fn: Callable        # jitted: those leaves -> the most steps the loop can run
    steps: int          # what the program was compiled for
    extra: int          # 1 for 'i <= n', else 0
    line: Optional[str]  # the user's line of the loop

    def check(self, leaves: Sequence) -> None:
        top, start = self.fn(*[leaves[i] for i in self.leaves])
        need = int(top) - int(start) + self.extra
        if need > self.steps:
            at = f" at {self.line}" if self.line else ""
            raise ArgumentError(
                f"random='inputs': the while_loop{at} may run {need} steps on these "
                f"arguments; its program draws for at most {self.steps}, a bound found "
                "assuming the integers its step count is computed from are >= 0 (e.g. a "
                "padding mask of 0s and 1s, a length). Pass such values (a bool padding "
                "mask), or give the loop a bound of its own")

    def shifted(self, n: int) -> "Guard":
        if any(i < n for i in self.leaves):
            raise ArgumentError("random='inputs': a while_loop's step count is computed "
                                "from the parameters or optimizer state; compute it from "
                                "the batch")
        return Guard([i - n for i in self.leaves], self.fn, self.steps, self.extra,
                     self.line)


def _ancestors(eqns, targets) -> List:
    """The equations of ``eqns`` (in order) that ``targets`` are computed by."""
    producer = {o: e for e in eqns for o in e.outvars}
    want, todo, seen = set(), list(targets), set()
    while todo:
        v = todo.pop()
        if isinstance(v, jc.Literal) or v in seen:
            continue
        seen.add(v)
        e = producer.get(v)
        if e is not None and id(e) not in want:
            want.add(id(e))
            todo.extend(e.invars)
    return [e for e in eqns if id(e) in want]


def _eval(eqns, env) -> None:
    read = lambda v: v.val if isinstance(v, jc.Literal) else env[v]  # noqa: E731
    for e in eqns:
        for v, o in zip(e.outvars, jc.eval_equation(e, [read(x) for x in e.invars])):
            if not isinstance(v, jc.DropVar):
                env[v] = o


def _inputs_of(eqns, targets) -> set:
    """The variables ``targets`` read that no equation of ``eqns`` computes."""
    made = {o for e in eqns for o in e.outvars}
    ins = {v for e in eqns for v in e.invars if not isinstance(v, jc.Literal)}
    ins.update(v for v in targets if not isinstance(v, jc.Literal))
    return {v for v in ins if v not in made}


def assumed_bound(eqn, fj, consts, kept: Sequence[int]) -> Optional[Tuple[int, Guard]]:
    """``(steps, guard)`` for the while ``eqn`` of the flattened jaxpr ``fj`` (argument
    leaves ``kept``), its intervals found assuming unknown integers are ``>= 0``, from
    the loop's ``i < n`` conditions (loops.conditions) whose ``n`` does not change inside
    the loop. None when none is found."""
    p = eqn.params
    cnc, bnc = p["cond_nconsts"], p["body_nconsts"]
    cj, bj = p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr
    carries = eqn.invars[cnc + bnc:]
    outer = loops.Intervals(fj, consts, assume=True)
    fixed = set(cj.constvars) | set(cj.invars[:cnc])
    fixed |= {cj.invars[cnc + k] for k in range(len(carries))
              if bj.outvars[k] is bj.invars[bnc + k]}
    best = None
    for steps, n, k, extra in loops.conditions(eqn, outer):
        if steps > _MOST or (best is not None and steps >= best[0]):
            continue
        n_eqns = _ancestors(cj.eqns, [n])
        if not _inputs_of(n_eqns, [n]) <= fixed:  # n must not change inside the loop
            continue
        best = (steps, n, k, extra, n_eqns)
    if best is None:
        return None
    steps, n, k, extra, n_eqns = best
    outer_of = {cj.invars[j]: eqn.invars[j] for j in range(cnc)}
    outer_of.update({cj.invars[cnc + j]: carries[j] for j in range(len(carries))})
    used = [outer_of[v] for v in _inputs_of(n_eqns, [n]) if v in outer_of]
    targets = used + [carries[k]]
    f_eqns = [e for e in _ancestors(fj.eqns, targets) if e is not eqn]
    f_ins = [v for v in fj.invars if v in _inputs_of(f_eqns, targets)]
    pos = [list(fj.invars).index(v) for v in f_ins]

    def most_steps(*args):
        env = dict(zip(fj.constvars, consts))
        env.update(zip(f_ins, args))
        _eval(f_eqns, env)
        read = lambda v: v.val if isinstance(v, jc.Literal) else env[v]  # noqa: E731
        cenv = dict(zip(cj.constvars, p["cond_jaxpr"].consts))
        cenv.update({cv: read(ov) for cv, ov in outer_of.items()
                     if isinstance(ov, jc.Literal) or ov in env})
        _eval(n_eqns, cenv)
        top = n.val if isinstance(n, jc.Literal) else cenv[n]
        return jax.numpy.max(top), jax.numpy.min(read(carries[k]))

    line, _ = liveness.where([eqn])
    return steps, Guard([kept[i] for i in pos], jax.jit(most_steps), steps, extra, line)
