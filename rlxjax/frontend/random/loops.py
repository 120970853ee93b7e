"""``random="inputs"``: a ``while_loop`` that draws random numbers *and* computes on device
values (every sampling loop: keras-hub's samplers, flax's decode loops) becomes a host
scan and a device while, when rlxjax can bound its number of steps.

- **the bound**: the loop's condition is a conjunction (``and``) holding ``i < n`` (or
  ``i <= n``, ``n > i``) where ``i`` is a carry that starts at a value of known lower
  bound and whose body adds 1 to it, and ``n`` has a known upper bound: the loop runs at
  most ``N = max(n) - min(i0)`` steps (``+ 1`` for ``<=``). Keras' ``while_loop`` with
  ``maximum_iterations`` and ``lax.fori_loop`` with traced bounds make such a counter.
  Bounds are found by interval arithmetic over integer values (``_interval``): literals
  and constants, bool and 8-bit values (a padding mask summed), ``+ - *``, min / max,
  sums and other reductions, indexing and shape ops; an int32 argument has none.
- **the host scan** runs the body's equations computed from keys and counters alone (its
  key carries, the draws) for all ``N`` steps, stacking each host value the rest of the
  body reads; as scan.py's host scan, it is JAX's own numbers, step by step;
- **the device while** is the rest of the body plus a step counter ``t``, reading step
  ``t``'s stacked values; a host carry the function reads after the loop (keras' seed
  state) is stacked at every step too (``N + 1`` values) and picked at the loop's final
  ``t`` on the device; a PRNG key or a uint32 value cannot be (a Core ML program has no
  such output): such a result is refused, as is a condition that reads a key or counter
  carried on the host.

Draws of steps the loop does not reach are made and not read. A loop bounded only by
assuming its integers of unknown range are ``>= 0`` (an int32 padding mask summed) is
bounded so and checked on each call (guards.py); one whose steps cannot be bounded at all
stays refused, with the reason.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np

from ... import _jax_compat as jc
from .. import uint32
from . import liveness, scan
from .scan import DEVICE, HOST, NEUTRAL

Interval = Optional[Tuple[int, int]]
INT_MAX = 2 ** 31 - 1
_SAME = ("convert_element_type", "reshape", "squeeze", "broadcast_in_dim", "slice",
         "dynamic_slice", "gather", "transpose", "expand_dims", "copy", "copy_p",
         "reduce_min", "reduce_max", "rev", "concatenate", "select_n", "dynamic_index",
         "optimization_barrier")
UNBOUNDED = ("draws random numbers inside a while_loop whose number of steps rlxjax "
             "cannot bound (random='inputs' draws every step's numbers before the loop): "
             "give the loop a counter that starts at a known value and steps by 1, with "
             "'i < n' in its condition where n has a known upper bound (a constant, a "
             "shape, a sum of a mask), or use lax.scan / lax.fori_loop with static bounds")


def _dtype_range(aval) -> Interval:
    dt = np.dtype(aval.dtype)
    if dt == np.bool_:
        return (0, 1)
    if dt.kind in "iu" and dt.itemsize == 1:
        info = np.iinfo(dt)
        return (int(info.min), int(info.max))
    return None


def _const_range(val) -> Interval:
    a = np.asarray(val)
    if a.dtype.kind not in "biu" or a.size == 0:
        return None
    return (int(a.min()), int(a.max()))


class Intervals:
    """Integer intervals of a jaxpr's values; ``known(var)`` gives its invars' (or None).
    ``assume``: an integer of unknown range is taken to be in ``[0, 2**31 - 1]`` (a bound
    found so is checked on each call: guards.py)."""

    def __init__(self, jaxpr, consts=(), known=None, assume=False):
        self.producer = {o: e for e in jaxpr.eqns for o in e.outvars}
        self.consts = dict(zip(jaxpr.constvars, consts))
        self.known = known or (lambda v: _dtype_range(v.aval))
        self.assume = assume
        self.memo: Dict = {}

    def of(self, v) -> Interval:
        if isinstance(v, jc.Literal):
            return _const_range(v.val)
        if v in self.memo:
            return self.memo[v]
        self.memo[v] = None  # (a cycle cannot happen in a jaxpr; guards recursion)
        if v in self.consts:
            r = _const_range(self.consts[v])
        elif v in self.producer:
            r = self._rule(self.producer[v], v)
        else:
            r = self.known(v)
        if r is None and self.assume and np.dtype(v.aval.dtype).kind in "iu":
            r = (0, INT_MAX)
        self.memo[v] = r
        return r

    def _rule(self, eqn, v) -> Interval:
        name = eqn.primitive.name
        if np.dtype(v.aval.dtype).kind not in "biu":
            return None
        if name in ("eq", "ne", "lt", "le", "gt", "ge", "and", "or", "not") and \
                np.dtype(v.aval.dtype) == np.bool_:
            return (0, 1)
        ins = [self.of(x) for x in eqn.invars]
        if name == "select_n":
            ins = ins[1:]
        if name == "dynamic_slice" or name == "gather" or name == "dynamic_index":
            ins = ins[:1]
        if name in _SAME:
            if any(r is None for r in ins) or not ins:
                return None
            return (min(r[0] for r in ins), max(r[1] for r in ins))
        if name == "iota":
            return (0, max(0, int(eqn.params["shape"][eqn.params["dimension"]]) - 1))
        if any(r is None for r in ins):
            return None
        if name == "add":
            return (ins[0][0] + ins[1][0], ins[0][1] + ins[1][1])
        if name == "sub":
            return (ins[0][0] - ins[1][1], ins[0][1] - ins[1][0])
        if name == "neg":
            return (-ins[0][1], -ins[0][0])
        if name == "mul":
            ps = [a * b for a in ins[0] for b in ins[1]]
            return (min(ps), max(ps))
        if name in ("max", "min"):
            f = max if name == "max" else min
            return (f(ins[0][0], ins[1][0]), f(ins[0][1], ins[1][1]))
        if name == "clamp":  # clamp(lo, x, hi)
            return (max(ins[0][0], min(ins[1][0], ins[2][0])),
                    min(ins[2][1], max(ins[1][1], ins[0][1])))
        if name == "reduce_sum":
            shape = eqn.invars[0].aval.shape
            n = int(np.prod([shape[a] for a in eqn.params["axes"]]))
            return (n * ins[0][0], n * ins[0][1])
        return None


def _through_converts(jaxpr, v):
    """``v`` with identity / widening integer converts stripped."""
    producer = {o: e for e in jaxpr.eqns for o in e.outvars}
    while not isinstance(v, jc.Literal) and v in producer:
        e = producer[v]
        if e.primitive.name != "convert_element_type" or \
                np.dtype(e.invars[0].aval.dtype).kind not in "iu":
            break
        v = e.invars[0]
    return v


def _conjuncts(jaxpr, v) -> List:
    producer = {o: e for e in jaxpr.eqns for o in e.outvars}
    todo, out = [v], []
    while todo:
        u = todo.pop()
        u = _through_bool_converts(producer, u)
        e = None if isinstance(u, jc.Literal) else producer.get(u)
        if e is not None and e.primitive.name == "and" and np.dtype(u.aval.dtype) == np.bool_:
            todo.extend(e.invars)
        elif e is not None:
            out.append(e)
    return out


def _through_bool_converts(producer, u):
    while not isinstance(u, jc.Literal) and u in producer and \
            producer[u].primitive.name == "convert_element_type" and \
            np.dtype(producer[u].invars[0].aval.dtype) == np.bool_:
        u = producer[u].invars[0]
    return u


def _steps_by_one(bj, nconsts: int, k: int) -> bool:
    """Whether the body's carry ``k`` comes out as itself plus 1."""
    out = _through_converts(bj, bj.outvars[k])
    producer = {o: e for e in bj.eqns for o in e.outvars}
    e = None if isinstance(out, jc.Literal) else producer.get(out)
    if e is None or e.primitive.name != "add":
        return False
    a, b = e.invars
    one = lambda x: isinstance(x, jc.Literal) and np.ndim(x.val) == 0 and x.val == 1  # noqa
    me = bj.invars[nconsts + k]
    return (one(b) and _through_converts(bj, a) is me) or \
        (one(a) and _through_converts(bj, b) is me)


def conditions(eqn, outer: Intervals):
    """The ``(steps, n, k, extra)`` of each ``i < n`` (``<=``: ``extra`` 1) conjunct of the
    ``while`` equation ``eqn``'s condition whose counter ``i`` (carry ``k``) starts at a
    known value and steps by 1 and whose ``n`` has a known upper bound: the loop runs at
    most ``steps`` steps. ``outer`` gives the intervals of the values of the jaxpr holding
    it."""
    p = eqn.params
    cnc, bnc = p["cond_nconsts"], p["body_nconsts"]
    cj, bj = p["cond_jaxpr"].jaxpr, p["body_jaxpr"].jaxpr
    carries = eqn.invars[cnc + bnc:]

    def known_in_cond(v):
        j = cj.invars.index(v)
        if j < cnc:
            return outer.of(eqn.invars[j])
        k = j - cnc  # a carry the body passes through unchanged keeps its initial value
        return outer.of(carries[k]) if bj.outvars[k] is bj.invars[bnc + k] else None

    inner = Intervals(cj, p["cond_jaxpr"].consts, known_in_cond)
    for e in _conjuncts(cj, cj.outvars[0]):
        name = e.primitive.name
        if name not in ("lt", "le", "gt", "ge"):
            continue
        i, n = e.invars if name in ("lt", "le") else e.invars[::-1]
        i = _through_converts(cj, i)
        if isinstance(i, jc.Literal) or i not in cj.invars[cnc:]:
            continue
        k = cj.invars.index(i) - cnc
        if not _steps_by_one(bj, bnc, k):
            continue
        start, top = outer.of(carries[k]), inner.of(n)
        if start is None or top is None:
            continue
        extra = 1 if name in ("le", "ge") else 0
        yield max(0, top[1] - start[0] + extra), n, k, extra


def bound(eqn, outer: Intervals) -> Optional[int]:
    """At most how many steps the ``while`` equation ``eqn`` runs, None if unknown;
    ``outer`` gives the intervals of the values of the jaxpr holding it."""
    return min((c[0] for c in conditions(eqn, outer)), default=None)


def split_while(eqn, ins: List, flags: Sequence[str], steps: int, used: Sequence[bool],
                is_random, has_random, bind, refuse) -> List:
    """Bind ``eqn`` (a while of at most ``steps`` steps) as a host scan and a device while
    on the values ``ins`` (``flags``: each operand's side; ``used``: which results the
    function reads); returns the loop's results."""
    p = eqn.params
    cnc, bnc = p["cond_nconsts"], p["body_nconsts"]
    cond, body = p["cond_jaxpr"], p["body_jaxpr"]
    cj, bj = cond.jaxpr, body.jaxpr
    nk = len(ins) - cnc - bnc
    bflags, host, _, sides = scan.side_of(bj, list(flags[cnc:]), bnc, nk, is_random,
                                          has_random, refuse)
    hk = [k for k in range(nk) if bflags[bnc + k] == HOST]
    read_by_cond = {v for e in cj.eqns for v in e.invars if not isinstance(v, jc.Literal)}
    read_by_cond.update(v for v in cj.outvars if not isinstance(v, jc.Literal))
    for k in hk:
        if cj.invars[cnc + k] in read_by_cond:
            raise refuse(eqn, "draws inside a while_loop whose condition reads a key or "
                              "counter carried on the host")
        aval = bj.outvars[k].aval
        if used[k] and (liveness.is_key(aval) or uint32.is_u32(aval)):
            what = "PRNG key" if liveness.is_key(aval) else "uint32 value (a seed state)"
            raise refuse(eqn, f"draws inside a while_loop and returns the {what} it "
                              "carries: its final value depends on the number of steps, "
                              "known only on the device, and a Core ML program has no "
                              f"{'key' if liveness.is_key(aval) else 'uint32'} output "
                              "(advance it outside the loop, or do not return it)")
    carry_ins = ins[cnc + bnc:]
    if steps == 0:  # never runs
        return list(carry_ins)
    is_host, host_eqns, dev_eqns, needed = scan.split_body(sides, host)
    read = scan.read
    for k in range(nk):
        v = bj.outvars[k]
        if bflags[bnc + k] != HOST and is_host(v) and v not in needed:
            needed.append(v)
    kept = [k for k in hk if used[k]]  # host carries read after the loop
    hc = [j for j in range(bnc) if bflags[j] in (HOST, NEUTRAL)]
    dc = [j for j in range(bnc) if bflags[j] in (DEVICE, NEUTRAL)]
    dk = [k for k in range(nk) if bflags[bnc + k] != HOST]

    def host_body(carry, _):
        env = {bj.invars[j]: ins[cnc + j] for j in hc}
        env.update(zip([bj.invars[bnc + k] for k in hk], carry))
        scan._run(bj, body.consts, env, host_eqns, bind)
        before = [c for k, c in zip(hk, carry) if used[k]]
        return [read(env, bj.outvars[k]) for k in hk], [read(env, v) for v in needed] + before

    with scan._at(eqn):
        h_final, ys = jax.lax.scan(host_body, [carry_ins[k] for k in hk], None, length=steps)
    stacked = ys[:len(needed)]
    final = dict(zip(hk, h_final))
    carried = [jax.numpy.concatenate([y, final[k][None]]) for k, y in
               zip(kept, ys[len(needed):])]
    at = lambda s, t: jax.lax.dynamic_index_in_dim(s, t, 0, keepdims=False)  # noqa: E731

    def dcond(c):
        env = dict(zip(cj.invars[:cnc], ins[:cnc]))
        env.update(zip([cj.invars[cnc + k] for k in dk], c[1:]))
        scan._run(cj, cond.consts, env, cj.eqns, bind)
        return read(env, cj.outvars[0])

    def dbody(c):
        t = c[0]
        env = {bj.invars[j]: ins[cnc + j] for j in dc}
        env.update(zip([bj.invars[bnc + k] for k in dk], c[1:]))
        env.update(zip(needed, [at(s, t) for s in stacked]))
        scan._run(bj, body.consts, env, dev_eqns, bind)
        return [t + 1] + [read(env, bj.outvars[k]) for k in dk]

    with scan._at(eqn):
        out = jax.lax.while_loop(dcond, dbody, [np.int32(0)] + [carry_ins[k] for k in dk])
        t, dev = out[0], iter(out[1:])
        picked = {k: at(s, t) for k, s in zip(kept, carried)}
    return [picked.get(k, final.get(k)) if bflags[bnc + k] == HOST else next(dev)
            for k in range(nk)]
