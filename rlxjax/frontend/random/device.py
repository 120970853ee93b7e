"""``random="device"``: live ``jax.random`` draws become Core ML's own random ops.

The split is ``random="inputs"``'s (inputs.py): the host part is what is computed
only from keys, uint32 arguments and constants, and each host value the device reads is a
program input. Here, every such value computed from a draw is computed on the device
instead, from a Core ML random op, and the key stops being a program input (the compiled
function still takes it, checks its shape and dtype, and ignores its value; key
arithmetic that only feeds draws disappears). The numbers are Core ML's, fresh on every
call (MIL ``seed = -1``); the distributions are JAX's:

Every float draw of ``jax.random`` is made of uniform bits turned into a float in
``[1, 2)`` (``random_bits`` -> ``shift_right_logical`` by ``width - nmant`` -> ``or``
with the bits of 1.0 -> ``bitcast_convert_type`` -> ``sub 1.0``): a uniform on ``[0, 1)``.
That chain is recognised and replaced by a device draw; what JAX computes from the uniform
(``normal``'s ``erf_inv``, ``bernoulli``'s comparison, ``categorical``'s Gumbel noise,
``truncated_normal``'s inverse CDF and clip) is replayed after it on the device, so the
distribution is JAX's by construction. Where that replay is a whole known distribution,
the draw is its Core ML op instead:

- ``uniform(minval, maxval)`` (``u * (max - min) + min``, clamped) -> MIL ``random_uniform``
  with ``low = minval``, ``high = maxval``;
- ``normal`` (``sqrt(2) * erf_inv(uniform(nextafter(-1, 0), 1))``) -> ``random_normal``;
- ``bernoulli(p)`` (``uniform(0, 1) < p``, ``p`` a constant) -> ``random_bernoulli``.

Draws whose bits are used otherwise (``randint``, ``permutation``, ``bits``, ``choice``
without replacement, ``gamma``'s loops, ...) are refused, naming the ``jax.random``
function and pointing to ``random="inputs"``. Host values that are not draws (a uint32
index or counter read as such) stay program inputs computed on the host, as in inputs mode.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import jax
import numpy as np

from ... import _jax_compat as jc
from ...errors import UnsupportedPrimitiveError
from ...ir import dtype_from_numpy
from ..registry import rule
from . import device_scan, inputs, liveness
from .inputs import HostPart

_RANDOM = inputs._RANDOM

# -- the device draw: a JAX primitive that only ever exists in the device part's jaxpr ---
draw_p = jc.Primitive("rlx_random_draw")


def _abstract(*, dist, shape, dtype, a, b):
    return jc.ShapedArray(tuple(shape), np.dtype(bool) if dist == "bernoulli" else dtype)


draw_p.def_abstract_eval(_abstract)

#: the MIL op each device distribution lowers to, and the names of its parameters
MIL_OPS = {"uniform": ("random_uniform", "low", "high"),
           "normal": ("random_normal", "mean", "stddev"),
           "bernoulli": ("random_bernoulli", "prob", None)}


@rule("rlx_random_draw")
def _draw_rule(ctx, eqn):
    p = eqn.params
    shape = tuple(p["shape"]) or (1,)  # MIL's random ops want rank >= 1
    dtype = dtype_from_numpy(np.dtype(p["dtype"]))
    if p["dist"] == "uniform":
        v = ctx.add("random_uniform", shape=shape, dtype=dtype, low=p["a"], high=p["b"],
                    seed=-1)
    elif p["dist"] == "normal":
        v = ctx.add("random_normal", shape=shape, dtype=dtype, mean=p["a"], std=p["b"],
                    seed=-1)
    else:
        mask = ctx.add("bernoulli", shape=shape, dtype=dtype, prob=p["a"], seed=-1)
        v = ctx.add("gt", mask, ctx.constant(np.zeros((), dtype.np)))
    return ctx.add("reshape", v, shape=()) if not p["shape"] else v


# -- symbolic values of the host part ---------------------------------------------------
class _Key:
    """Computed from keys or uint32 arguments and no draw (``random``: from a key)."""

    def __init__(self, random: bool):
        self.random = random


class _Bits:
    """Random bits on their way to a uniform float (``stage`` steps of JAX's chain done)."""

    def __init__(self, eqn, shape, width, stage=0, shift=None, ones=None, dtype=None):
        self.eqn, self.shape, self.width = eqn, shape, width
        self.stage, self.shift, self.ones, self.dtype = stage, shift, ones, dtype


class _Draw:
    """A value computed from one uniform draw by a chain of equations with constants."""

    def __init__(self, var, eqn, parent=None, args=None, pos=None, shape=None, dtype=None):
        self.var, self.eqn, self.parent, self.args, self.pos = var, eqn, parent, args, pos
        self.shape, self.dtype = shape, dtype


_SYM = (_Key, _Bits, _Draw)


def _refuse(eqn, what: str, draw=None, fn=None) -> UnsupportedPrimitiveError:
    """``draw``: the equation that drew, for the jax.random function when ``eqn`` (the
    user's own use of the bits) was not made by one."""
    line, via = liveness.where([eqn])
    fn = fn or liveness.random_function([eqn]) or (
        liveness.random_function([draw]) if draw is not None else None)
    at = (f" at {line}" if line else "") + (f", via {via}" if via else "")
    name = fn or f"JAX primitive '{eqn.primitive.name}'"
    return UnsupportedPrimitiveError(eqn.primitive.name, line, message=(
        f"random='device': {name}{at} {what}. Core ML's random ops draw uniform, normal and "
        "Bernoulli values (and what JAX computes from a uniform: categorical, "
        "truncated_normal); compile with random='inputs' to compute this draw on the host "
        "with jax.random (JAX's numbers, fed as a program input)."))


def _scalar(x) -> Optional[float]:
    """The one value of a constant array (None: not constant or not all equal)."""
    if isinstance(x, _SYM) or isinstance(x, jax.core.Tracer):
        return None
    a = np.asarray(x)
    if a.size == 0 or a.dtype.kind not in "fiub":
        return None
    first = a.reshape(-1)[0]
    return float(first) if np.all(a == first) else None


class _Interpreter:
    """Runs the host equations that ``targets`` depend on, with keys and draws symbolic
    and everything else (constants) concrete; ``value`` materialises a draw on the device
    (inside the device part's trace)."""

    def __init__(self, parts, targets):
        self.parts = parts
        need, todo = set(), list(targets)
        while todo:
            v = todo.pop()
            e = parts.producer.get(v) or self._const_producer(v)
            if e is None or id(e) in need:
                continue
            need.add(id(e))
            todo.extend(x for x in e.invars if not isinstance(x, jc.Literal))
        self.eqns = [e for e in parts.in_order if id(e) in need]
        self.uses: Dict[Any, int] = {}
        for e in self.eqns:
            for x in e.invars:
                if not isinstance(x, jc.Literal):
                    self.uses[x] = self.uses.get(x, 0) + 1
        for v in parts.needed + parts.host_outs:
            self.uses[v] = self.uses.get(v, 0) + 1
        self.draws: List[Dict[str, Any]] = []  # package metadata rows
        self._cache: Dict[int, Any] = {}
        self.env: Dict[Any, Any] = dict(zip(parts.fj.constvars, parts.consts))
        for v in parts.host_vars:
            self.env[v] = _Key(liveness.is_key(v.aval))
        for e in self.eqns:
            self._step(e)

    def _const_producer(self, v):
        if not hasattr(self, "_producers"):
            self._producers = {o: e for e in self.parts.in_order for o in e.outvars}
        return self._producers.get(v)

    def read(self, v):
        return v.val if isinstance(v, jc.Literal) else self.env[v]

    def _step(self, eqn) -> None:
        ins = [self.read(v) for v in eqn.invars]
        syms = [x for x in ins if isinstance(x, _SYM)]
        prim = eqn.primitive.name
        if not syms:
            with jax.ensure_compile_time_eval():
                outs = jc.eval_equation(eqn, ins)
        elif all(isinstance(x, _Key) for x in syms):
            vm = prim == "scan" and inputs._has_random(eqn) and \
                device_scan.as_vmap(eqn)
            if vm:  # a host scan: its steps' draws made at once (device_scan.py)
                outs = self._inline(eqn, vm, ins)
            elif prim == "random_bits":
                width = int(eqn.params["bit_width"])
                outs = [_Bits(eqn, tuple(eqn.outvars[0].aval.shape), width)]
            elif prim in liveness.DRAWS:
                raise _refuse(eqn, "draws raw random bits, which Core ML cannot make")
            else:
                rnd = (any(x.random for x in syms) or prim in _RANDOM
                       or inputs._has_random(eqn))
                outs = [_Key(rnd) for _ in eqn.outvars]
        elif any(isinstance(x, _Key) for x in syms):
            if prim == "scan" and inputs._has_random(eqn):
                raise _refuse(eqn, device_scan.CARRIED, fn=_inner_function(eqn))
            raise _refuse(eqn, "combines a draw with a value computed from a key or counter")
        elif any(isinstance(x, _Bits) for x in syms):
            outs = [self._bits(eqn, ins)]
        elif (len(syms) == 1 and len(eqn.outvars) == 1 and not eqn.effects
              and not list(liveness.subjaxprs(eqn))):  # a step of one draw's chain
            pos = next(i for i, x in enumerate(ins) if isinstance(x, _Draw))
            outs = [_Draw(eqn.outvars[0], eqn, parent=ins[pos], args=ins, pos=pos)]
        else:  # several draws meet: each is materialised where it is read
            outs = [_Deferred(eqn, ins, i, v) for i, v in enumerate(eqn.outvars)]
        for v, o in zip(eqn.outvars, outs):
            if not isinstance(v, jc.DropVar):
                self.env[v] = o

    def _inline(self, eqn, closed, ins) -> list:
        """``eqn``'s results: its carries keys, its ys ``closed``'s, stepped through here."""
        nk = eqn.params["num_carry"]
        for e in closed.jaxpr.eqns:
            for x in e.invars:
                if not isinstance(x, jc.Literal):
                    self.uses[x] = self.uses.get(x, 0) + 1
        for o, v in zip(closed.jaxpr.outvars, eqn.outvars[nk:]):
            if not isinstance(o, jc.Literal):
                self.uses[o] = self.uses.get(o, 0) + self.uses.get(v, 0)
        self.env.update(zip(closed.jaxpr.constvars, closed.consts))
        self.env.update(zip(closed.jaxpr.invars, ins))
        for e in closed.jaxpr.eqns:
            self._step(e)
        return [_Key(True) for _ in range(nk)] + [self.read(o) for o in closed.jaxpr.outvars]

    def _bits(self, eqn, ins) -> "_Draw":
        b = next(x for x in ins if isinstance(x, _Bits))
        others = [x for x in ins if x is not b]
        prim = eqn.primitive.name
        c = _scalar(others[0]) if len(others) == 1 else None
        if b.stage == 0 and prim == "shift_right_logical" and ins[0] is b and c is not None:
            return _Bits(b.eqn, b.shape, b.width, 1, shift=int(c))
        if b.stage == 1 and prim == "or" and c is not None:
            return _Bits(b.eqn, b.shape, b.width, 2, b.shift, ones=int(c))
        if b.stage == 2 and prim == "bitcast_convert_type" and not others:
            dt = np.dtype(eqn.params["new_dtype"])
            if dt.kind == "f" and dt.itemsize * 8 == b.width and \
                    b.shift == b.width - np.finfo(dt).nmant and \
                    b.ones == int(np.asarray(1, dt).view(f"u{dt.itemsize}")):
                return _Bits(b.eqn, b.shape, b.width, 3, b.shift, b.ones, dt)
        if b.stage == 3 and prim == "sub" and ins[0] is b and c == 1.0:
            return _Draw(eqn.outvars[0], b.eqn, shape=b.shape, dtype=b.dtype)
        raise _refuse(eqn, "uses random bits other than as a uniform float (randint, "
                      "permutation, bits, ...)", draw=b.eqn)

    # -- on the device (inside the device part's trace) ---------------------------------
    def value(self, v):
        """The device value of host value ``v`` (a draw, or computed from draws)."""
        x = self.read(v)
        if isinstance(x, _Draw):
            return self._materialise(x)
        if isinstance(x, _Deferred):
            key = (id(x.eqn), x.index)
            if key not in self._cache:
                args = [self._materialise(a) if isinstance(a, _Draw) else
                        (self.value(a.var) if isinstance(a, _Deferred) else a)
                        for a in x.args]
                outs = jc.eval_equation(x.eqn, args)
                for i, o in enumerate(outs):
                    self._cache[(id(x.eqn), i)] = o
            return self._cache[key]
        return x

    def _materialise(self, d: _Draw):
        if id(d) in self._cache:
            return self._cache[id(d)]
        chain = [d]
        while chain[0].parent is not None and id(chain[0].parent) not in self._cache:
            chain.insert(0, chain[0].parent)
        start = 0
        if chain[0].parent is None:  # the uniform itself: recognise what follows it
            k = 1
            while k < len(chain) and self.uses.get(chain[k - 1].var, 0) == 1:
                k += 1
            k, value = self._recognise(chain[:k], d)
            self._cache[id(chain[k])] = value
            start = k + 1
        for node in chain[start:]:
            args = list(node.args)  # (the others are constants)
            args[node.pos] = self._cache[id(node.parent)]
            self._cache[id(node)] = jc.eval_equation(node.eqn, args)[0]
        return self._cache[id(d)]

    def _recognise(self, chain, target):
        """(index in ``chain`` of the value drawn, its device value): the longest prefix
        of the uniform's chain that is one Core ML distribution."""
        root = chain[0]
        eqns = [n.eqn for n in chain[1:]]
        names = [e.primitive.name for e in eqns]
        dt = np.dtype(root.dtype)
        lo, hi, k = 0.0, 1.0, 0
        if names[:3] == ["mul", "add", "max"]:
            r = _scalar(chain[1].args[1 - chain[1].pos])
            m = _scalar(chain[2].args[1 - chain[2].pos])
            c = _scalar(chain[3].args[1 - chain[3].pos])
            if r is not None and m is not None and c == m and r >= 0:
                lo, hi, k = m, float(dt.type(m) + dt.type(r)), 3
        shape = tuple(chain[k].var.aval.shape)
        dist, a, b = "uniform", lo, hi
        if (k == 3 and names[3:5] == ["erf_inv", "mul"] and hi == 1.0
                and lo == float(np.nextafter(dt.type(-1), dt.type(0)))
                and _close(_scalar(chain[5].args[1 - chain[5].pos]), math.sqrt(2), dt)):
            dist, a, b, k = "normal", 0.0, 1.0, 5
        elif (lo, hi) == (0.0, 1.0) and names[k:k + 1] == ["lt"] and chain[k + 1].pos == 0:
            p = _scalar(chain[k + 1].args[1])
            if p is not None:
                dist, a, b, k = "bernoulli", min(max(p, 0.0), 1.0), 0.0, k + 1
        shape = tuple(chain[k].var.aval.shape) if dist == "bernoulli" else shape
        self._record(root, dist, a, b, shape, dt, [target.eqn, chain[k].eqn, root.eqn])
        with jc.at_source(chain[k].eqn.source_info):
            return k, draw_p.bind(dist=dist, shape=shape, dtype=dt, a=float(a), b=float(b))

    def _record(self, root, dist, a, b, shape, dt, eqns) -> None:
        # the jax.random function: seen from the value read (a cached jitted _uniform's
        # equations may carry another call's frames, jax 0.8), else from the draw
        op, pa, pb = MIL_OPS[dist]
        line, _ = liveness.where([root.eqn])
        params = {pa: a} if pb is None else {pa: a, pb: b}
        made_by = next((f for f in map(liveness.random_function, ([e] for e in eqns))
                        if f), None)
        self.draws.append(dict(made_by=made_by,
                               op=op, shape=list(shape), dtype=dt.name, params=params,
                               source=line))


class _Deferred:
    """An output of an equation reading several draws: computed on the device when read."""

    def __init__(self, eqn, args, index, var):
        self.eqn, self.args, self.index, self.var = eqn, args, index, var


def _close(x, want, dt) -> bool:
    return x is not None and abs(x - want) <= 4 * float(np.finfo(dt).eps) * want


def _device_value_kind(x) -> str:
    if isinstance(x, (_Draw, _Deferred)):
        return "device"
    if isinstance(x, _Key) and not x.random:
        return "host"
    return "refuse"


def _no_draw(v, parts, eqn, what: str) -> UnsupportedPrimitiveError:
    """``v`` (``what``) is computed from a key, but not by a draw Core ML can make."""
    loop = _loop_with_draw(v, parts)
    if loop is not None and liveness.random_function([loop]) is None:  # the user's loop
        return _refuse(loop, f"draws inside '{loop.primitive.name}' (random='device' makes "
                       "the draws outside loops and branches: draw all steps' numbers "
                       "before the loop, e.g. jax.random.normal(k, (steps, ...)), and index "
                       "them)", fn=_inner_function(loop))
    return _refuse(eqn, f"computes {what} from a key without a draw Core ML can make",
                   fn=_function(v, parts))


def _inner_function(eqn) -> Optional[str]:
    """The jax.random function of the first draw inside ``eqn``'s body."""
    for sub in liveness.subjaxprs(eqn):
        chain = liveness.find(sub, liveness.DRAWS)
        if chain:
            return liveness.random_function(chain)
    return None


def _loop_with_draw(v, parts):
    """The scan / while / cond among the equations computing ``v`` that draws inside."""
    todo, seen = [v], set()
    while todo:
        eqn = parts.producer.get(todo.pop())
        if eqn is None or id(eqn) in seen:
            continue
        seen.add(id(eqn))
        if inputs._has_random(eqn) and eqn.primitive.name in ("scan", "while", "cond"):
            return eqn
        todo.extend(x for x in eqn.invars if not isinstance(x, jc.Literal))
    return None


def _function(v, parts) -> Optional[str]:
    """The jax.random function nearest among the equations that computed ``v``."""
    return inputs._made_by(v, parts.producer, {})[0]


# -- the split -------------------------------------------------------------------------
class DeviceHostPart(HostPart):
    """The host part of a ``random="device"`` program: what still runs on the host (uint32
    values read as such, results computed only from keys), and the device's draws (for
    the package metadata)."""

    draws: List[Dict[str, Any]]

    def run(self, leaves):
        self.check(leaves)
        if not self.inputs and all(k is None for k in self.outputs):
            return [], []  # the usual case: nothing left on the host
        return super().run(leaves)

    def shifted(self, n: int) -> "DeviceHostPart":
        if self.inputs or any(k is not None for k in self.outputs):
            base = super().shifted(n)
        else:  # keys among the parameters are ignored like any other
            base = HostPart([i - n for i in self.leaves if i >= n], self.fn, self.inputs,
                            self.outputs, self.parts)
        out = DeviceHostPart(base.leaves, base.fn, base.inputs, base.outputs, base.parts,
                             [g.shifted(n) for g in self.guards])
        out.draws = self.draws
        return out

    def payload(self, rows) -> dict:
        """The ``rlxjax.random`` metadata: the mode, the draws, the host's inputs (if any)."""
        return dict(mode="device", draws=self.draws, inputs=rows)


def split(closed, names, dropped):
    """``inputs.split`` with the drawn program inputs computed on the device.
    Returns ``(device_closed, dropped, host)``, ``host`` a DeviceHostPart (None when
    nothing is random)."""
    try:
        device, dropped, host = inputs.split(closed, names, dropped)
    except UnsupportedPrimitiveError as e:  # what cannot be split: same in both modes
        msg = str(e)
        if not msg.startswith("random='inputs'"):
            raise
        raise UnsupportedPrimitiveError(e.primitive, e.source, message=(
            "random='device'" + msg[len("random='inputs'"):])) from None
    if host is None:
        return device, dropped, None
    parts = host.parts
    probe = _Interpreter(parts, parts.needed + parts.host_outs)
    kinds = []
    for v, spec in zip(parts.needed, host.inputs):
        kind = _device_value_kind(probe.read(v))
        if kind == "refuse":
            reader = next(e for e in parts.fj.eqns if any(x is v for x in e.invars))
            raise _no_draw(v, parts, parts.producer.get(v) or reader,
                           f"program input '{spec.name}'")
        kinds.append(kind)
    on_device = [k == "device" for k in kinds]
    kept = [v for v, d in zip(parts.needed, on_device) if not d]
    # results computed only from draws are the device's too; others (a new key) the host's
    res = [None if k is None else parts.host_outs[k] for k in host.outputs]
    res_kinds = [None if v is None else _device_value_kind(probe.read(v)) for v in res]
    for v, kind in zip(res, res_kinds):
        if kind == "refuse" and not liveness.not_an_input(v.aval):  # (a key: the host's)
            raise _no_draw(v, parts, parts.producer[v], "a result")
    drawn_res = [kind == "device" for kind in res_kinds]
    host_outs = [v for v, d in zip(res, drawn_res) if v is not None and not d]
    outputs = [None if v is None or d else host_outs.index(v) for v, d in zip(res, drawn_res)]
    n_dev = len(device.jaxpr.invars) - len(parts.needed)
    draws: List[Dict[str, Any]] = []

    def run(*args):
        wanted = [v for v, d in zip(parts.needed, on_device) if d] + \
            [v for v, d in zip(res, drawn_res) if d]
        interp = _Interpreter(parts, wanted)
        rest = iter(args[n_dev:])
        vals = [interp.value(v) if d else next(rest) for v, d in zip(parts.needed, on_device)]
        outs = iter(jc.jaxpr_as_fun(device)(*args[:n_dev], *vals))
        results = [next(outs) if v is None else interp.value(v)
                   for v, d in zip(res, drawn_res) if v is None or d]
        draws[:] = interp.draws
        return results

    structs = [inputs._struct(v.aval) for v in device.jaxpr.invars[:n_dev]] + \
        [inputs._struct(v.aval) for v in kept]
    new = jax.make_jaxpr(run)(*structs)
    new = jc.dce_closed_jaxpr(new, [True] * len(structs))[0]
    fn = host.fn
    if len(kept) != len(parts.needed) or len(host_outs) != len(parts.host_outs):
        fn = inputs._host_fn(parts.fj, parts.consts, parts.host_vars, parts.in_order,
                             kept + host_outs)
    host_inputs = [spec for spec, d in zip(host.inputs, on_device) if not d]
    out = DeviceHostPart(host.leaves, fn, host_inputs, outputs, parts, host.guards)
    out.draws = draws
    return new, dropped, out
