"""The distribution of each ``random="inputs"`` program input, for the package metadata.

An app that runs the saved program fills the random inputs itself: it needs each one's
distribution and parameters, not only the ``jax.random`` function that made it. They are
read from the (call-inlined) jaxpr by the shape of JAX's own implementation, the last
equations of each distribution, with parameters that are constants evaluated by JAX:

=================  ========================================================  ==================
distribution       the input is                                              parameters
=================  ========================================================  ==================
``bernoulli``      ``uniform < p`` (bool; dropout's keep mask)                ``p``
``uniform``        ``max(minval, u * (maxval - minval) + minval)``            ``minval, maxval``
``normal``         ``sqrt(2) * erf_inv(uniform(-1, 1))``: standard normal     ``mean 0, std 1``
``truncated_normal``  a standard normal clamped into (lower, upper)            ``lower, upper``
``gumbel``         ``-log(-log(uniform))``: standard Gumbel (``categorical``  ``loc 0, scale 1``
                   adds it to the logits, then argmax)
``randint``        integers in [minval, maxval)                               ``minval, maxval``
=================  ========================================================  ==================

A draw inside a ``scan`` (scan.py) is an input stacked over the steps, with the
same distribution. A draw converted to another dtype (``randint`` read as float32) keeps its distribution;
the row's ``dtype`` is the input's. Anything else the device reads from the host (a draw your code then scales by a constant,
a permutation's gather indices) is ``derived``: its ``made_by`` and ``source`` say where
it comes from; an app must reproduce that computation. A parameter that varies over the
input (an array ``p``) is given as a nested list.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from ... import _jax_compat as jc
from . import liveness

_STOP = set(liveness.DRAWS) | set(liveness.KEY_ARITHMETIC)


class _Graph:
    """The flattened jaxpr's producers and constant values."""

    def __init__(self, fj, consts):
        self.producer = {o: e for e in fj.eqns for o in e.outvars}
        self.consts = dict(zip(fj.constvars, consts))
        self._memo: Dict[Any, Any] = {}

    def eqn(self, v, prim: Optional[str] = None):
        """The equation making ``v`` (None if a literal / input, or not ``prim``)."""
        if isinstance(v, jc.Literal):
            return None
        e = self.producer.get(v)
        return e if e is not None and (prim is None or e.primitive.name == prim) else None

    def value(self, v, depth: int = 0):
        """``v``'s value if it is computed from constants only (else None), by JAX."""
        if isinstance(v, jc.Literal):
            return np.asarray(v.val)
        if v in self.consts:
            return np.asarray(self.consts[v])
        if v in self._memo:
            return self._memo[v]
        e = self.producer.get(v)
        out = None
        if e is not None and depth < 12 and e.primitive.name not in _STOP and not e.effects:
            ins = [self.value(x, depth + 1) for x in e.invars]
            if all(i is not None for i in ins):
                outs = jc.eval_equation(e, ins)
                out = np.asarray(outs[list(e.outvars).index(v)])
        self._memo[v] = out
        return out

    def from_bits(self, v, steps: int = 6) -> bool:
        """``v`` is computed from ``random_bits`` within ``steps`` equations."""
        e = self.eqn(v)
        if e is None or steps == 0:
            return False
        if e.primitive.name == "random_bits":
            return True
        return any(self.from_bits(x, steps - 1) for x in e.invars)


def _num(a) -> Any:
    """A parameter as JSON: a scalar when every element is equal."""
    if a is None:
        return None
    a = np.asarray(a)
    if a.size and (a == a.flat[0]).all():
        a = a.flat[0]
    return a.item() if a.ndim == 0 else a.tolist()


def _uniform(g: _Graph, v) -> Optional[Dict[str, Any]]:
    e = g.eqn(v, "max")  # max(minval, u * (maxval - minval) + minval)
    add = e and g.eqn(e.invars[1], "add")
    mul = add and g.eqn(add.invars[0], "mul")
    sub = mul and g.eqn(mul.invars[1], "sub")
    if not sub or not g.from_bits(mul.invars[0]):
        return None
    lo, hi = g.value(e.invars[0]), g.value(sub.invars[0])
    if lo is None or hi is None:
        return None
    return {"distribution": "uniform", "minval": _num(lo), "maxval": _num(hi)}


def _standard_normal(g: _Graph, v) -> bool:
    e = g.eqn(v, "mul")  # sqrt(2) * erf_inv(uniform(-1, 1))
    if e is None:
        return False
    for c, x in (e.invars, e.invars[::-1]):
        val = g.value(c)
        inv = g.eqn(x, "erf_inv")
        if val is not None and inv and np.isclose(float(val), np.sqrt(2.0)) and \
                _uniform(g, inv.invars[0]):
            return True
    return False


def _bound(g: _Graph, v):
    """A truncation bound: ``nextafter(stop_gradient(bound), ±inf)``'s bound."""
    e = g.eqn(v, "nextafter")
    return g.value(e.invars[0]) if e else None


def _describe(g: _Graph, v) -> Optional[Dict[str, Any]]:
    e = g.eqn(v)
    if e is None:
        return None
    prim = e.primitive.name
    if prim == "scan":  # scan.py's host scan: each step's draw, stacked
        i, body = list(e.outvars).index(v), e.params["jaxpr"]
        if i < e.params["num_carry"]:
            return None
        return _describe(_Graph(body.jaxpr, body.consts), body.jaxpr.outvars[i])
    if prim == "convert_element_type":  # the same values in another dtype (randint -> f32)
        return _describe(g, e.invars[0])
    if prim == "lt" and np.dtype(v.aval.dtype) == np.bool_ and _uniform(g, e.invars[0]):
        p = g.value(e.invars[1])
        return None if p is None else {"distribution": "bernoulli", "p": _num(p)}
    if prim == "max":
        return _uniform(g, v)
    if prim == "mul" and _standard_normal(g, v):
        return {"distribution": "normal", "mean": 0.0, "std": 1.0}
    if prim == "min":  # min(upper', max(lower', normal))
        inner = g.eqn(e.invars[1], "max")
        if inner and _standard_normal(g, inner.invars[1]):
            lo, hi = _bound(g, inner.invars[0]), _bound(g, e.invars[0])
            if lo is not None and hi is not None:
                return {"distribution": "truncated_normal", "lower": _num(lo),
                        "upper": _num(hi)}
    if prim == "neg":  # -log(-log(uniform))
        log1 = g.eqn(e.invars[0], "log")
        neg = log1 and g.eqn(log1.invars[0], "neg")
        log2 = neg and g.eqn(neg.invars[0], "log")
        if log2 and _uniform(g, log2.invars[0]):
            return {"distribution": "gumbel", "loc": 0.0, "scale": 1.0}
    if prim == "add" and np.dtype(v.aval.dtype).kind == "i" and g.from_bits(e.invars[1], 12):
        return _randint(g, e)
    return None


def _randint(g: _Graph, add) -> Optional[Dict[str, Any]]:
    """``minval + (bits % span)``: the span is ``maxval - minval`` (clamped to the dtype)."""
    lo = g.value(add.invars[0])
    todo, seen = [add.invars[1]], set()
    while todo:
        u = todo.pop()
        e = g.eqn(u)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if e.primitive.name == "sub" and np.dtype(e.outvars[0].aval.dtype).kind == "i":
            hi, lo2 = g.value(e.invars[0]), g.value(e.invars[1])
            if hi is not None and lo is not None and lo2 is not None and \
                    np.array_equal(np.broadcast_to(lo2, np.shape(lo)), lo):
                return {"distribution": "randint", "minval": _num(lo), "maxval": _num(hi)}
        todo.extend(x for x in e.invars if not isinstance(x, jc.Literal))
    return None


def annotate(inputs, needed, fj, consts) -> None:
    """Set each host input's ``distribution`` (a dict: name and parameters)."""
    g = _Graph(fj, consts)
    for inp, v in zip(inputs, needed):
        if inp.made_by is None:  # a uint32 argument (an index), not random
            continue
        inp.distribution = _describe(g, v) or {"distribution": "derived"}
