"""``random="inputs"``: every live random draw becomes a program input computed on the host.

A function's jaxpr splits in two parts:

- the **host part**: every equation computed only from PRNG keys and uint32 arguments
  (the leaves that cannot be Core ML inputs) and from the keys that ``jax.random.key`` /
  ``PRNGKey`` makes from constants: key arithmetic, the draws, and what turns the random
  bits into numbers (``uniform``'s bit tricks, ``normal``'s ``erf_inv``, ``bernoulli``'s
  comparison), plus counters' arithmetic (an nnx RNG count + 1);
- the **device part**: everything else, compiled to Core ML as usual.

Each host value a device equation reads becomes a program input ("random input", named
after its ``jax.random`` function, e.g. ``random.bernoulli``); on each call the host runs
its part (JAX's own computation of the host equations, fed the call's key and counter
arguments: host_compile.py), so the program sees exactly JAX's numbers: results equal ``jax.jit``'s bit for
bit wherever the device part computes exactly. Results of the host part the function
returns (a new key, an incremented counter) come back from the host directly.

Calls (``jit``, ``closed_call``, ``checkpoint``) are inlined first (a re-trace keeping every
equation's source line), so a draw inside ``jax.jit`` or a flax module splits like one at
top level. An equation that mixes both parts and cannot be split (a ``scan`` / ``cond`` /
``while`` carrying a key next to device values, a ``custom_jvp`` function taking a key),
a draw from a key computed from device values, and random uint32 bits read by the device
are refused with a message naming the equation and the user's line. uint32 values from
counters read by the device are carried as int32 (checked < 2**31 on each call).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np

from ... import _jax_compat as jc
from ...errors import (ArgumentError, RlxError, UnsupportedDTypeError,
                      UnsupportedPrimitiveError)
from ...ir import dtype_from_numpy
from .. import uint32
from . import guards as guards_, host_compile, liveness, loops, meta, scan

_CALLS = ("pjit", "jit", "closed_call", "core_call", "remat", "checkpoint", "remat2")
_RANDOM = set(liveness.DRAWS) | set(liveness.KEY_ARITHMETIC)
MODES = (None, "inputs", "device")


@dataclass
class HostInput:
    """One program input the host computes on each call (package metadata row)."""

    name: str                  # graph input name ('random.bernoulli')
    shape: Tuple[int, ...]
    dtype: str                 # JAX dtype computed on the host ('bool', 'float32', 'uint32')
    made_by: Optional[str]     # 'jax.random.bernoulli'
    source: Optional[str]      # the user's line of the draw
    # {'distribution': 'bernoulli', 'p': 0.7}: what an app fills it with (meta.py)
    distribution: Optional[Dict[str, Any]] = None

    def row(self) -> Dict[str, Any]:
        return dict(name=self.name, shape=list(self.shape), dtype=self.dtype,
                    made_by=self.made_by, source=self.source,
                    **(self.distribution or {}))


@dataclass
class HostPart:
    """What the host computes on each call of a ``random="inputs"`` program."""

    leaves: List[int]          # the argument leaves it reads (indices into the leaves)
    fn: Callable               # jitted: those leaves -> (program inputs..., host results...)
    inputs: List[HostInput]    # the program inputs it computes (graph inputs after the leaves)
    outputs: List[Optional[int]]  # per function result leaf: host result index, or None
    # the split's equations, for random="device" (device.py): SplitParts
    parts: Any = None
    # loops bounded by an assumption, checked on each call (guards.py)
    guards: List[Any] = field(default_factory=list)

    def check(self, leaves: Sequence[Any]) -> None:
        """Refuse a call on which a loop could run more steps than the program draws for."""
        for g in self.guards:
            g.check(leaves)

    def run(self, leaves: Sequence[Any]):
        """(program input arrays, host results) for one call's argument leaves."""
        self.check(leaves)
        vals = self.fn(*[leaves[i] for i in self.leaves])
        n = len(self.inputs)
        ins = []
        for spec, v in zip(self.inputs, vals[:n]):
            a = np.asarray(v)
            if spec.dtype == "uint32":
                if a.size and int(a.max()) > uint32.LIMIT:
                    raise ArgumentError(
                        f"program input '{spec.name}' (uint32, computed on the host from "
                        f"{spec.source or 'the arguments'}) holds {int(a.max())} >= 2**31: "
                        "Core ML carries uint32 as int32 only below 2**31")
                a = a.astype(np.int32)
            ins.append(a)
        # JAX's own values, as jax.jit returns them: a read-only numpy view broke nnx's
        # in-place counter update (count[...] += 1) when the state went back into JAX
        outs = list(vals[n:])
        return ins, outs

    def merge(self, device_outs: Sequence[Any], host_outs: Sequence[Any]) -> list:
        """The function's result leaves from the program's and the host's results."""
        if all(k is None for k in self.outputs):
            return list(device_outs)  # (also after a transform replaced the results)
        it = iter(device_outs)
        return [next(it) if k is None else host_outs[k] for k in self.outputs]

    def require_device_loss(self, what: str) -> None:
        """Transforms (gradients, training) differentiate the first result: it must be the
        device's. Other results (aux) may be the host's: a new key, an advanced counter."""
        if self.outputs and self.outputs[0] is not None:
            raise ArgumentError(
                f"random='inputs' with {what}: the loss is computed only from keys / "
                "counters (on the host), so it has no gradient; return a loss computed "
                "from the parameters")

    def with_outputs(self, outputs: List[Optional[int]]) -> "HostPart":
        """The same host part for a transformed function whose result leaves are
        ``outputs`` (host result index, or None for the program's): a gradient or training
        transform keeps the host's aux results (a new nnx RNG state) where they were."""
        new = copy.copy(self)  # (a subclass keeps its own fields: device.py's)
        new.outputs = list(outputs)
        return new

    def shifted(self, n: int) -> "HostPart":
        """The same host part for argument leaves numbered from ``n`` (the first ``n``
        leaves left out of the call, as a training step in mlstate mode does)."""
        if any(i < n for i in self.leaves):
            raise ArgumentError("random='inputs': a PRNG key or counter among the "
                                "parameters or optimizer state; pass it in the batch")
        return HostPart([i - n for i in self.leaves], self.fn, self.inputs, self.outputs,
                        self.parts, [g.shifted(n) for g in self.guards])

    def metadata(self) -> List[Dict[str, Any]]:
        return [i.row() for i in self.inputs]


@dataclass
class SplitParts:
    """What ``split`` worked from, kept for ``random="device"`` (device.py), which
    computes the drawn program inputs on the device instead."""

    fj: Any                    # the flattened jaxpr
    consts: list
    host_vars: list            # its host argument variables (keys, uint32 leaves)
    in_order: list             # host and constant-only equations, in program order
    needed: list               # the host values the device reads (the program inputs)
    host_outs: list            # the host values the function returns
    drawn: set                 # host values computed from a draw
    producer: dict             # host value -> its equation
    device: Any                # the device part (closed jaxpr: device leaves, needed)


def check_mode(random) -> None:
    if random not in MODES:
        raise ArgumentError(f"random={random!r}: choose None (live randomness is an error), "
                            "'inputs' (draws computed on the host by jax.random, fed "
                            "as program inputs) or 'device' (draws made by Core ML's random "
                            "ops on the device: the same distributions, not JAX's numbers)")


# -- inlining calls ----------------------------------------------------------------------
def _call_jaxpr(eqn):
    if eqn.primitive.name not in _CALLS:
        return None
    sub = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
    if isinstance(sub, jc.ClosedJaxpr):
        return sub.jaxpr, sub.consts
    return (sub, []) if isinstance(sub, jc.Jaxpr) else None


def _has_user_frame(eqn) -> bool:
    return any(f[3] for f in liveness.frames(eqn))


class _Resplit(Exception):
    """Raised splitting: re-flatten with ``eqn`` (a scan or a bounded while drawing next
    to device values) split in two by scan.py / loops.py, given each operand's side
    (``flags``); for a while, its bound and which of its results are read (``loop``)."""

    def __init__(self, eqn, flags, loop=None, guard=None):
        super().__init__("internal: a loop to split")
        self.eqn, self.flags, self.loop, self.guard = eqn, list(flags), loop, guard


def _is_random(eqn) -> bool:
    return eqn.primitive.name in _RANDOM


def _inline_eval(jaxpr, consts, args, outer=None, resplit=None, library=False):
    """Evaluate ``jaxpr`` binding its equations, calls inlined. ``outer``: the source info
    of the call being inlined, for equations whose own has no user frame (the body of a
    jitted library function, e.g. jax.random's, traced once and cached): their user's
    line, and the jax.random function that led to them, are the call's; so are those of
    a library function's body (``library``: jax.random's ``_uniform``, traced once, keeps
    the user frames of whichever call traced it first)."""
    env = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    read = lambda v: v.val if isinstance(v, jc.Literal) else env[v]  # noqa: E731
    for eqn in jaxpr.eqns:
        ins = [read(v) for v in eqn.invars]
        info = outer if outer is not None and (library or not _has_user_frame(eqn)) \
            else None
        call = _call_jaxpr(eqn)
        if call:  # a library function's cached jaxpr keeps another call's user frames
            outs = _inline_eval(*call, ins, outer=info or eqn.source_info, resplit=resplit,
                                library=library or jc.is_library_function(call[0]))
        elif resplit is not None and eqn is resplit.eqn and resplit.loop is not None:
            outs = loops.split_while(eqn, ins, resplit.flags, *resplit.loop, _is_random,
                                     _has_random, _bind_inlined, _refuse)
        elif resplit is not None and eqn is resplit.eqn:
            outs = scan.split_scan(eqn, ins, resplit.flags, _is_random, _has_random,
                                   _bind_inlined, _refuse)
        else:
            outs = jc.eval_equation(eqn, ins, info)
        for v, o in zip(eqn.outvars, outs):
            if not isinstance(v, jc.DropVar):
                env[v] = o
    return [read(v) for v in jaxpr.outvars]


def _bind_inlined(eqn, ins):
    call = _call_jaxpr(eqn)
    if not call:
        return jc.eval_equation(eqn, ins)
    return _inline_eval(*call, ins, outer=eqn.source_info,
                        library=jc.is_library_function(call[0]))


def _struct(aval):
    return jax.ShapeDtypeStruct(tuple(aval.shape), aval.dtype)


def _flatten(closed, resplit=None):
    """``closed`` with every call inlined (re-traced: fresh variables, same source lines),
    and the scan ``resplit`` names split into a host and a device scan."""
    structs = [_struct(v.aval) for v in closed.jaxpr.invars]
    return jax.make_jaxpr(lambda *a: _inline_eval(closed.jaxpr, closed.consts, a,
                                                  resplit=resplit))(*structs)


# -- splitting -----------------------------------------------------------------------------
def _refuse(eqn, what: str):
    line, via = liveness.where([eqn])
    fn = liveness.random_function([eqn])
    prim = eqn.primitive.name
    at = (f" at {line}" if line else "") + (f", via {via}" if via else "")
    name = f"{fn} (JAX primitive '{prim}')" if fn else f"JAX primitive '{prim}'"
    return UnsupportedPrimitiveError(prim, line, message=(
        f"random='inputs': {name}{at} {what}. Draw the random numbers outside that "
        "operation (e.g. split the keys and draw before a loop, pass the draws in), or "
        "compute them on the host and pass them as an argument."))


def _has_random(eqn) -> bool:
    return any(liveness.find(sub, _RANDOM) for sub in liveness.subjaxprs(eqn))


def split(closed, names: Sequence[str], dropped: dict):
    """Split the pruned ``closed`` (taking the leaves not in ``dropped``) into its device
    part (a closed jaxpr taking the device leaves, then the host inputs) and its host part.
    Returns ``(device_closed, dropped, host)``, ``host`` None when nothing is random."""
    kept = [i for i in range(len(names)) if i not in dropped]
    jaxpr = closed.jaxpr
    host_leaf = [liveness.not_an_input(v.aval) for v in jaxpr.invars]
    if not any(host_leaf) and not liveness.find(jaxpr, _RANDOM):
        return closed, dropped, None
    flat = _flatten(closed)
    checks = []  # loops bounded by an assumption (guards.py)
    for _ in range(64):  # a re-flatten per scan drawing next to device values
        try:
            device, dropped, host = _split_flat(flat, jaxpr, names, dropped, kept, host_leaf)
            host.guards = checks
            return device, dropped, host
        except _Resplit as r:  # split that scan in two (scan.py)
            if r.guard is not None:
                checks.append(r.guard)
            flat = _flatten(flat, r)
    raise RlxError("internal: random='inputs' keeps splitting scans")


def _split_flat(flat, jaxpr, names, dropped, kept, host_leaf):
    fj = flat.jaxpr
    host = {v for v, h in zip(fj.invars, host_leaf) if h}
    neutral = set(fj.constvars)  # computed from constants only: usable on both sides
    drawn = set()                # host values computed from a draw
    host_eqns, device_eqns = [], []
    for eqn in fj.eqns:
        ins = [v for v in eqn.invars if not isinstance(v, jc.Literal)]
        prim = eqn.primitive.name
        if prim in _RANDOM or any(v in host for v in ins):
            if all(v in host or v in neutral for v in ins):
                host_eqns.append(eqn)
                host.update(eqn.outvars)
                if prim in liveness.DRAWS or any(v in drawn for v in ins):
                    drawn.update(eqn.outvars)
                continue
            if prim in _RANDOM:
                raise _refuse(eqn, "draws from a key computed from device values")
        elif all(v in neutral for v in ins) and not eqn.effects and not _has_random(eqn):
            neutral.update(eqn.outvars)
            continue
        if _has_random(eqn):
            side = [_side(v, host, neutral) for v in eqn.invars]
            if prim == "scan" and scan.DEVICE in side:
                raise _Resplit(eqn, side)
            if prim == "while" and scan.DEVICE in side:
                steps, used, guard = _while_bound(fj, flat.consts, eqn, kept)
                raise _Resplit(eqn, side, (steps, used), guard)
            raise _refuse(eqn, "draws random numbers inside an operation that also "
                          "computes on device values, which rlxjax cannot split")
        device_eqns.append(eqn)
    # program inputs: host values the device reads, in order of first read
    needed: List[Any] = []
    for eqn in device_eqns:
        for v in eqn.invars:
            if not isinstance(v, jc.Literal) and v in host and v not in needed:
                needed.append(v)
    producer = {o: e for e in host_eqns for o in e.outvars}
    arg_of = {v: names[i] for v, i, h in zip(fj.invars, kept, host_leaf) if h}
    inputs = [_host_input(v, producer, drawn, device_eqns, arg_of) for v in needed]
    _unique_names(inputs)
    meta.annotate(inputs, needed, fj, flat.consts)
    is_host = lambda v: not isinstance(v, jc.Literal) and v in host  # noqa: E731
    host_outs = [v for v in fj.outvars if is_host(v)]
    outputs = [host_outs.index(v) if is_host(v) else None for v in fj.outvars]
    dev_ids, host_ids = {id(e) for e in device_eqns}, {id(e) for e in host_eqns}
    in_order = [e for e in fj.eqns if id(e) not in dev_ids]  # host and neutral
    host_vars = [v for v, h in zip(fj.invars, host_leaf) if h]
    fn = _host_fn(fj, flat.consts, host_vars, in_order, needed + host_outs)
    dev_vars = [v for v, h in zip(fj.invars, host_leaf) if not h]
    dev_order = [e for e in fj.eqns if id(e) not in host_ids]  # device and neutral
    dev_outs = [v for v in fj.outvars if not is_host(v)]
    device = _device_closed(fj, flat.consts, dev_vars, needed, dev_order, dev_outs)
    new_dropped = dict(dropped)
    for i, var, h in zip(kept, jaxpr.invars, host_leaf):
        if h:
            new_dropped[i] = (names[i], tuple(var.aval.shape), var.aval.dtype)
    host_leaves = [i for i, h in zip(kept, host_leaf) if h]
    parts = SplitParts(fj, flat.consts, host_vars, in_order, needed, host_outs, drawn,
                       producer, device)
    return device, new_dropped, HostPart(host_leaves, fn, inputs, outputs, parts)


def _while_bound(fj, consts, eqn, kept) -> Tuple[int, List[bool], Any]:
    """(at most how many steps the while ``eqn`` of ``fj`` runs, which of its results
    are read, the Guard checking a bound found by assumption or None); refused when the
    steps have no bound (loops.py, guards.py)."""
    steps, guard = loops.bound(eqn, loops.Intervals(fj, consts)), None
    if steps is None:
        found = guards_.assumed_bound(eqn, fj, consts, kept)
        if found is None:
            raise _refuse(eqn, loops.UNBOUNDED)
        steps, guard = found
    read = {v for e in fj.eqns for v in e.invars if not isinstance(v, jc.Literal)}
    read.update(v for v in fj.outvars if not isinstance(v, jc.Literal))
    return steps, [not isinstance(v, jc.DropVar) and v in read for v in eqn.outvars], guard


def _side(v, host, neutral) -> str:
    """Which part operand ``v`` belongs to; a literal (unhashable: never a set member)
    is usable on both sides."""
    if isinstance(v, jc.Literal) or v in neutral:
        return scan.NEUTRAL
    return scan.HOST if v in host else scan.DEVICE


def _made_by(v, producer, arg_of) -> Tuple[Optional[str], Optional[str]]:
    """(the jax.random function, else the argument) behind host value ``v``: the nearest
    among the equations it was computed by (``x[:, perm]`` reads a broadcast of
    permutation's; ``dynamic_slice`` a normalised copy of a uint32 index argument)."""
    todo, seen, arg = [v], set(), None
    while todo:
        u = todo.pop(0)
        arg = arg or arg_of.get(u)
        eqn = producer.get(u)
        if eqn is None or id(eqn) in seen:
            continue
        seen.add(id(eqn))
        fn = liveness.random_function([eqn])
        if eqn.primitive.name == "scan" and not isinstance(u, jc.Literal):
            body = eqn.params["jaxpr"].jaxpr  # a host scan (scan.py): its draw
            out = body.outvars[list(eqn.outvars).index(u)]
            fn = _made_by(out, {o: e for e in body.eqns for o in e.outvars}, {})[0]
        if fn:
            return fn, None
        todo.extend(x for x in eqn.invars if not isinstance(x, jc.Literal))
    return None, arg


def _host_input(v, producer, drawn, device_eqns, arg_of) -> HostInput:
    reader = next(e for e in device_eqns if any(x is v for x in e.invars))
    eqn = producer.get(v)
    src = eqn or reader
    if liveness.is_key(v.aval):
        raise _refuse(reader, "reads a PRNG key next to device values (Core ML has no key "
                      "type)")
    if uint32.is_u32(v.aval) and v in drawn:
        raise _refuse(reader, "reads random uint32 bits (Core ML has no uint32): turn them "
                      "into numbers with jax.random.uniform / randint / bits on the host side")
    if not uint32.is_u32(v.aval):
        try:
            dtype_from_numpy(v.aval.dtype)
        except UnsupportedDTypeError as e:
            raise _refuse(reader, f"reads a host value of dtype {v.aval.dtype} ({e})") from None
    shape, dtype = tuple(v.aval.shape), np.dtype(v.aval.dtype).name
    if v in arg_of:  # a uint32 argument read as it is
        return HostInput(arg_of[v], shape, dtype, None, None)
    made_by, arg = _made_by(v, producer, arg_of)
    line, _ = liveness.where([src])
    if made_by is None and arg is not None:  # computed from a uint32 argument (an index)
        return HostInput(f"host.{arg}", shape, dtype, None, line)
    short = made_by.rsplit(".", 1)[-1] if made_by else "value"
    return HostInput(f"random.{short}", shape, dtype, made_by, line)


def _unique_names(inputs: List[HostInput]) -> None:
    seen: Dict[str, int] = {}
    for inp in inputs:
        k = seen.get(inp.name, 0)
        seen[inp.name] = k + 1
        if k:
            inp.name = f"{inp.name}_{k}"


def _host_fn(fj, consts, invars, eqns, outvars):
    """The host part's function of its leaves: its integer half by numpy (or batched, quick
    to compile XLA), its float half as jax.jit compiles it (host_compile.py)."""
    return host_compile.shared(fj, consts, invars, eqns, outvars)


def _device_closed(fj, consts, dev_vars, needed, eqns, outvars):
    """The device part as a closed jaxpr taking (device leaves..., host inputs...), without
    the constant computations only the host part reads."""
    n = len(dev_vars)

    def device(*args):
        env = dict(zip(fj.constvars, consts))
        env.update(zip(dev_vars, args[:n]))
        env.update(zip(needed, args[n:]))
        read = lambda v: v.val if isinstance(v, jc.Literal) else env[v]  # noqa: E731
        for eqn in eqns:
            for v, o in zip(eqn.outvars, jc.eval_equation(eqn, [read(x) for x in eqn.invars])):
                if not isinstance(v, jc.DropVar):
                    env[v] = o
        return [read(v) for v in outvars]

    structs = [_struct(v.aval) for v in dev_vars] + [_struct(v.aval) for v in needed]
    closed = jax.make_jaxpr(device)(*structs)
    return jc.dce_closed_jaxpr(closed, [True] * len(structs))[0]
