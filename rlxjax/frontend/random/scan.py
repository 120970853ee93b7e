"""``random="inputs"``: a ``scan`` that draws random numbers *and* computes on device
values (dropout inside an ``nn.RNN`` cell) becomes two scans.

- the **host scan** runs, over the scan's keys and counters (its host consts, carries and
  xs), every body equation computed from them alone (key arithmetic, the draws), and
  stacks, step by step, each host value the rest of the body reads;
- the **device scan** is the rest of the body, reading those stacked values as extra xs.

inputs.split then sees a host scan (all its inputs host: the host part runs it with
JAX) and a device scan without randomness whose stacked host values are program inputs
(one per value, all steps at once: shape ``[length, ...]``). The draws are JAX's own, as
the one scan makes them. A carry is host when its initial value is and the body computes
its new value from host values only (a key split each step; found by iterating to a fixed
point). Equations computed from constants run on both sides. What still mixes (a draw
from a key computed from device values, a nested call reading both) is refused.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import jax

from ... import _jax_compat as jc

HOST, NEUTRAL, DEVICE = "h", "n", "d"


def _classify(jaxpr, flags, is_random, has_random, refuse):
    """Each equation's side: (host vars, neutral vars, [(eqn, side)]). What mixes host and
    device values in an equation that draws raises ``refuse(eqn, what)``."""
    host = {v for v, f in zip(jaxpr.invars, flags) if f == HOST}
    neutral = set(jaxpr.constvars) | {v for v, f in zip(jaxpr.invars, flags) if f == NEUTRAL}
    sides = []
    for eqn in jaxpr.eqns:
        ins = [v for v in eqn.invars if not isinstance(v, jc.Literal)]
        if is_random(eqn) or any(v in host for v in ins):
            if all(v in host or v in neutral for v in ins):
                host.update(eqn.outvars)
                sides.append((eqn, HOST))
                continue
            if is_random(eqn):
                raise refuse(eqn, "draws from a key computed from device values")
        elif all(v in neutral for v in ins) and not eqn.effects and not has_random(eqn):
            neutral.update(eqn.outvars)
            sides.append((eqn, NEUTRAL))
            continue
        if has_random(eqn):
            raise refuse(eqn, "draws random numbers inside an operation that also "
                              "computes on device values, which rlxjax cannot split")
        sides.append((eqn, DEVICE))
    return host, neutral, sides


def side_of(jaxpr, flags, nc: int, nk: int, is_random, has_random, refuse):
    """The body's classification with the carries' sides at their fixed point."""
    flags = list(flags)
    while True:
        host, neutral, sides = _classify(jaxpr, flags, is_random, has_random, refuse)
        new = list(flags)
        for i in range(nc, nc + nk):
            out = jaxpr.outvars[i - nc]
            out_host = not isinstance(out, jc.Literal) and out in host
            if new[i] == NEUTRAL:
                new[i] = DEVICE  # (a carry changes: it is one side's)
            if new[i] == HOST and not out_host:
                new[i] = DEVICE
        if new == flags:
            return flags, host, neutral, sides
        flags = new


def read(env, v):
    """A jaxpr variable's value in ``env`` (a literal's own)."""
    return v.val if isinstance(v, jc.Literal) else env[v]


def split_body(sides, host):
    """A loop body's split (``side_of``'s ``sides`` and ``host`` values): (is_host, its host
    equations, its device equations, the host values device equations read, in order)."""
    is_host = lambda v: not isinstance(v, jc.Literal) and v in host  # noqa: E731
    host_eqns = [e for e, s in sides if s != DEVICE]
    dev_eqns = [e for e, s in sides if s != HOST]
    needed: List = []
    for e in (e for e, s in sides if s == DEVICE):
        for v in e.invars:
            if is_host(v) and v not in needed:
                needed.append(v)
    return is_host, host_eqns, dev_eqns, needed


def _at(eqn):
    """Bind under ``eqn``'s source info: the two scans keep the user's line."""
    info = eqn.source_info
    return jc._source_info_util.user_context(info.traceback, name_stack=info.name_stack)


def _run(jaxpr, consts, env: Dict, eqns, bind) -> None:
    env.update(zip(jaxpr.constvars, consts))
    for eqn in eqns:
        vals = [v.val if isinstance(v, jc.Literal) else env[v] for v in eqn.invars]
        for v, o in zip(eqn.outvars, bind(eqn, vals)):
            if not isinstance(v, jc.DropVar):
                env[v] = o


def split_scan(eqn, ins: List, flags: Sequence[str], is_random, has_random, bind,
               refuse) -> List:
    """Bind ``eqn`` (a scan) as a host scan and a device scan on the values ``ins``
    (``flags``: each operand's side); returns the scan's results. ``bind(eqn, values)``
    binds a body equation (calls inlined, so the draws keep their shape for
    meta.py); ``refuse(eqn, what)`` makes the error for what cannot split."""
    p = eqn.params
    body = p["jaxpr"]
    bj, nc, nk = body.jaxpr, p["num_consts"], p["num_carry"]
    flags, host, _, sides = side_of(bj, flags, nc, nk, is_random, has_random, refuse)
    is_host, host_eqns, dev_eqns, needed = split_body(sides, host)
    # host values the device side reads: by device equations (needed), as a device carry / ys
    k_out, y_out = bj.outvars[:nk], bj.outvars[nk:]
    for i, v in enumerate(k_out):
        if flags[nc + i] != HOST and is_host(v) and v not in needed:
            needed.append(v)
    host_ys = [v for v in y_out if is_host(v)]

    def pick(side, lo, hi):
        return [k for k in range(lo, hi) if flags[k] in side]

    hc, hk, hx = pick((HOST, NEUTRAL), 0, nc), pick((HOST,), nc, nc + nk), \
        pick((HOST, NEUTRAL), nc + nk, len(ins))
    dc, dk, dx = pick((DEVICE, NEUTRAL), 0, nc), pick((DEVICE, NEUTRAL), nc, nc + nk), \
        pick((DEVICE, NEUTRAL), nc + nk, len(ins))

    def host_body(carry, xs):
        env = {bj.invars[k]: ins[k] for k in hc}
        env.update(zip([bj.invars[k] for k in hk], carry))
        env.update(zip([bj.invars[k] for k in hx], xs))
        _run(bj, body.consts, env, host_eqns, bind)
        return ([read(env, k_out[k - nc]) for k in hk],
                [read(env, v) for v in needed + host_ys])

    opts = dict(length=p["length"], reverse=p["reverse"], unroll=p.get("unroll", 1))
    with _at(eqn):
        h_carry, h_ys = jax.lax.scan(host_body, [ins[k] for k in hk], [ins[k] for k in hx],
                                     **opts)
    stacked, h_ys = h_ys[:len(needed)], h_ys[len(needed):]

    def device_body(carry, xs):
        env = {bj.invars[k]: ins[k] for k in dc}
        env.update(zip([bj.invars[k] for k in dk], carry))
        env.update(zip([bj.invars[k] for k in dx], xs[:len(dx)]))
        env.update(zip(needed, xs[len(dx):]))
        _run(bj, body.consts, env, dev_eqns, bind)
        return ([read(env, k_out[k - nc]) for k in dk],
                [read(env, v) for v in y_out if not is_host(v)])

    with _at(eqn):
        d_carry, d_ys = jax.lax.scan(device_body, [ins[k] for k in dk],
                                     [ins[k] for k in dx] + list(stacked), **opts)
    h_carry, d_carry, h_ys, d_ys = map(iter, (h_carry, d_carry, h_ys, d_ys))
    carries = [next(h_carry) if flags[nc + i] == HOST else next(d_carry) for i in range(nk)]
    return carries + [next(h_ys) if is_host(v) else next(d_ys) for v in y_out]
