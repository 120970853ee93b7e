"""Control flow: ops that carry regions (closed sub-graphs, ``Node.regions``).

A region is a ``Graph`` whose inputs are exactly the values passed to it: regions never
read values of the enclosing graph directly, so every pass that works on one graph (DCE,
substitution, the grad transform) sees all of a region op's dependencies as its inputs.
Each op's record names its regions (``defop(..., regions=...)``); its ``infer`` reads them
from its third argument.

- ``cond(index, *operands; branches)``: runs ``branches[index]`` on the operands (the
  index is clamped into range, as ``lax.switch`` does); every branch has the same
  signature.
- ``while(*cond_consts, *body_consts, *init; cond, body, n_cond_consts, n_body_consts,
  trip_count?)``: ``cond(cond_consts, carry) -> bool[]``, ``body(body_consts, carry) ->
  carry``. ``trip_count``, when given, says the loop runs at most that many times (a
  counted loop of the legalize stage, transforms/legalize/linalg_base.py): a format may
  use it (Core AI guards such loops with a second counter, coreai/control.py).
- ``scan(*consts, *init, *xs; body, length, reverse, num_consts, num_carry)``:
  ``body(consts, carry, x_t) -> (carry, y_t)``; outputs are the final carry and the
  ``y_t`` stacked along a new leading axis of size ``length``.
"""
from __future__ import annotations

from typing import List, Sequence

from .graph import Graph
from .ops import _require, defop
from .schema import BOOL, INT, STR, Param
from .types import DType, TensorType


def _in_types(g: Graph) -> List[TensorType]:
    return [v.type for _, v in g.inputs]


def _out_types(g: Graph) -> List[TensorType]:
    return [v.type for _, v in g.outputs]


def _sig(types: Sequence[TensorType]) -> str:
    return "(" + ", ".join(map(str, types)) + ")"


@defop("cond", "control", None, params={}, regions=("branches",))
def _cond(ts, p, r):
    branches = r["branches"]
    _require(isinstance(branches, tuple) and len(branches) >= 1
             and all(isinstance(g, Graph) for g in branches), "cond needs branch graphs")
    _require(len(ts) >= 1 and ts[0].rank == 0 and ts[0].dtype == DType.i32,
             f"cond index must be i32[], got {ts[0] if ts else 'nothing'}")
    operands = list(ts[1:])
    outs = _out_types(branches[0])
    for k, g in enumerate(branches):
        _require(_in_types(g) == operands,
                 f"cond branch {k} takes {_sig(_in_types(g))}, operands are {_sig(operands)}")
        _require(_out_types(g) == outs,
                 f"cond branch {k} returns {_sig(_out_types(g))}, branch 0 {_sig(outs)}")
    return outs


@defop("while", "control", None, regions=("cond", "body"), params={
    "n_cond_consts": Param(INT), "n_body_consts": Param(INT),
    "trip_count": Param(INT, required=False, doc="at most this many iterations")})
def _while(ts, p, r):
    cond, body = r["cond"], r["body"]
    nc, nb = p["n_cond_consts"], p["n_body_consts"]
    _require(isinstance(cond, Graph) and isinstance(body, Graph), "while needs graphs")
    _require(0 <= nc and 0 <= nb and nc + nb <= len(ts), "while: bad const counts")
    cc, bc, carry = list(ts[:nc]), list(ts[nc:nc + nb]), list(ts[nc + nb:])
    _require(_in_types(cond) == cc + carry,
             f"while cond takes {_sig(_in_types(cond))}, given {_sig(cc + carry)}")
    _require(_out_types(cond) == [TensorType((), DType.bool)],
             f"while cond must return bool[], returns {_sig(_out_types(cond))}")
    _require(_in_types(body) == bc + carry,
             f"while body takes {_sig(_in_types(body))}, given {_sig(bc + carry)}")
    _require(_out_types(body) == carry,
             f"while body returns {_sig(_out_types(body))}, carry is {_sig(carry)}")
    return carry


@defop("scan", "control", None, regions=("body",), params={
    "length": Param(INT), "reverse": Param(BOOL),
    "num_consts": Param(INT), "num_carry": Param(INT),
    "saved_carries": Param(BOOL, required=False, default=False,
                           doc="the body also returns its per-step carries")})
def _scan(ts, p, r):
    body, length = r["body"], p["length"]
    nc, nk = p["num_consts"], p["num_carry"]
    _require(isinstance(body, Graph), "scan needs a body graph")
    _require(isinstance(length, int) and length >= 1, f"scan length must be >= 1, got {length}")
    _require(isinstance(p["reverse"], bool), "scan needs reverse=bool")
    consts, carry, xs = list(ts[:nc]), list(ts[nc:nc + nk]), list(ts[nc + nk:])
    for x in xs:
        _require(x.rank >= 1 and x.shape[0] == length,
                 f"scan: xs {x} does not have leading dimension {length}")
    x_t = [x.with_shape(tuple(x.shape[1:])) for x in xs]
    _require(_in_types(body) == consts + carry + x_t,
             f"scan body takes {_sig(_in_types(body))}, given {_sig(consts + carry + x_t)}")
    outs = _out_types(body)
    _require(outs[:nk] == carry,
             f"scan body returns carry {_sig(outs[:nk])}, carry is {_sig(carry)}")
    ys = [y.with_shape((length,) + tuple(y.shape)) for y in outs[nk:]]
    return carry + ys


@defop("custom_vjp", "control", None, regions=("primal",), params={
    "rule": Param(INT), "name": Param(STR)})
def _custom_vjp(ts, p, r):
    """A call with its own derivative rule (jax.custom_jvp / custom_vjp): the ``primal``
    region computes it; ``rule`` (an int) names the rule in the side table of the trace
    that made the node (``frontend.custom_rules.CustomRules``), from which the grad
    transform asks for the backward region ``(inputs, cotangents of the float outputs) ->
    cotangents of the float inputs``, built by JAX from the user's rule only then: the
    rule is a JAX object, and JAX objects stay out of the IR."""
    primal = r["primal"]
    _require(isinstance(primal, Graph) and isinstance(p["rule"], int),
             "custom_vjp needs a primal region and an int rule")
    _require(_in_types(primal) == list(ts),
             f"custom_vjp primal takes {_sig(_in_types(primal))}, given {_sig(ts)}")
    return _out_types(primal)


@defop("remat", "control", None, regions=("body",), params={
    "num_out": Param(INT), "policy": Param(STR)})
def _remat(ts, p, r):
    """``jax.checkpoint``: ``body(*inputs) -> (*outputs, *residuals)``. The first
    ``num_out`` results are the checkpointed function's; the rest are the values its
    ``policy`` (the JAX policy's name, for messages) saves for the backward pass. The VJP
    (transforms/vjp/control.py) recomputes everything else; after the grad transform the
    node is inlined (transforms/regions.py ``inline_remat``)."""
    body = r["body"]
    _require(isinstance(body, Graph), "remat needs a body region")
    _require(_in_types(body) == list(ts),
             f"remat body takes {_sig(_in_types(body))}, given {_sig(ts)}")
    _require(0 <= p["num_out"] <= len(body.outputs), "remat num_out out of range")
    return _out_types(body)


@defop("remat_barrier", "shape", None, params={}, differentiable=False)
def _remat_barrier(ts, p):
    """The identity on its inputs, which no pass merges with or looks through: what a
    ``remat`` VJP recomputes reads its inputs through one, so that CSE cannot replace the
    recomputation by the forward pass's values (and keep those live until the backward
    pass, which is what checkpointing avoids)."""
    return list(ts)
