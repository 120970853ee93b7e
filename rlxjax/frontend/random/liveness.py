"""Randomness in a traced function: dead randomness costs nothing, live randomness is named.

Models carry randomness they do not use: flax's ``nn.RNN`` builds its zero initial carry
from a key it never reads, ``nn.Dropout(deterministic=True)`` and ``nnx.Dropout`` in eval
mode hold a key (and nnx a uint32 counter), an evaluation is passed the training key.
Before any frontend rule runs, ``prune`` removes every equation whose result reaches no
output, with JAX's own dead-code elimination (``_jax_compat.dce_closed_jaxpr``: nested
jaxprs included, equations with effects kept). Arguments that cannot be program inputs
(PRNG keys, uint32 arrays) and that nothing live reads are then left out of the program:
the compiled function still takes them (checking their shape and dtype) and ignores them.

What is left is live, and refused with a message that says what and where:

- a random draw (``random_bits``, ``threefry2x32``) or key arithmetic whose result reaches
  an output: UnsupportedPrimitiveError naming the ``jax.random`` function, the user's line
  (the innermost frame outside JAX and installed libraries; the library frame, e.g.
  flax's Dropout, as "via"), the argument the key comes from, and the ways out;
- a PRNG key argument read without a draw (returned, its bits used as numbers):
  UnsupportedDTypeError naming the argument by its pytree path.

A live uint32 argument (a counter, an index) is a program input carried as int32 with the
range [0, 2**31) (frontend/uint32.py proves what is computed from it; each call checks the
value, frontend/__init__.py ``trace`` and ``Compiled``).
"""
from __future__ import annotations

import re
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import jax

from ... import _jax_compat as jc
from ...errors import UnsupportedDTypeError, UnsupportedPrimitiveError
from .. import uint32

#: primitives that draw random bits from a key
DRAWS = ("random_bits", "threefry2x32")
#: primitives that make, split or convert keys (no draw by themselves)
KEY_ARITHMETIC = ("random_seed", "random_wrap", "random_unwrap", "random_split",
                  "random_fold_in", "random_clone")

#: the ways out of a live draw, quoted by every error about one
OPTIONS = (
    "Core ML programs cannot reproduce JAX's threefry random streams. Either pass "
    "random='inputs' (coreml_jit, coreml_grad, coreml_value_and_grad, coreml_train_step: "
    "each draw becomes a program input that the host computes with jax.random from the "
    "keys passed, JAX's numbers exactly), or random='device' (each draw becomes a Core ML "
    "random op: the same distribution, Core ML's numbers, fresh on every call; the key is "
    "ignored), or make the randomness dead (deterministic=True, "
    "nnx's model.eval(): randomness whose result reaches no output is removed and its key "
    "argument ignored), or use rlxjax.nn.dropout(x, rate, deterministic=...), which draws "
    "on the device.")

Dropped = Dict[int, Tuple[str, Tuple[int, ...], object]]  # leaf -> (name, shape, dtype)


def is_key(aval) -> bool:
    """A typed PRNG key array (``jax.random.key``)."""
    return jax.dtypes.issubdtype(aval.dtype, jax.dtypes.prng_key)


def not_an_input(aval) -> bool:
    """Leaves that cannot be Core ML inputs, left out of the program when dead."""
    return is_key(aval) or uint32.is_u32(aval)


def prune(closed, names: Sequence[str], refuse: bool = True):
    """``closed`` without dead code, and the argument leaves left out of the program.

    Returns ``(closed, dropped)``: the pruned jaxpr takes the leaves not in ``dropped``
    (leaf index -> (name, shape, dtype)), in order. With ``refuse``, raises on live
    randomness and on live key / uint32 arguments (module doc); without, leaves them to
    ``random="inputs"`` (inputs.py)."""
    avals = [v.aval for v in closed.jaxpr.invars]
    droppable = [not_an_input(a) for a in avals]
    pruned, used = jc.dce_closed_jaxpr(closed, [not d for d in droppable])
    kept = [i for i, u in enumerate(used) if u]
    jaxpr = pruned.jaxpr
    arg_of = {var: names[i] for var, i in zip(jaxpr.invars, kept) if droppable[i]}
    if refuse:
        _refuse_live_randomness(jaxpr, arg_of)
        for var, i in zip(jaxpr.invars, kept):
            if is_key(avals[i]):  # (a live uint32 argument is an int32 input: trace)
                raise _live_argument(jaxpr, var, names[i], avals[i])
    dropped = {i: (names[i], tuple(avals[i].shape), avals[i].dtype)
               for i, d in enumerate(droppable) if d and not used[i]}
    return pruned, dropped


# -- live randomness ---------------------------------------------------------------------
def subjaxprs(eqn) -> Iterator:
    for v in eqn.params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(x, jc.ClosedJaxpr):
                yield x.jaxpr
            elif isinstance(x, jc.Jaxpr):
                yield x


def find(jaxpr, names) -> Optional[List]:
    """The first equation (program order, depth first) whose primitive is in ``names``,
    as the chain of equations from ``jaxpr``'s level down to it."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in names:
            return [eqn]
        for sub in subjaxprs(eqn):
            found = find(sub, names)
            if found:
                return [eqn] + found
    return None


def _key_arguments(jaxpr, arg_of, eqn) -> List[str]:
    """The key / uint32 arguments whose values flow into top-level equation ``eqn``."""
    env = {v: {n} for v, n in arg_of.items()}
    for e in jaxpr.eqns:
        srcs = set().union(*(env.get(v, ()) for v in e.invars
                             if not isinstance(v, jc.Literal)))
        if e is eqn:
            return sorted(srcs)
        if srcs:
            for o in e.outvars:
                env[o] = srcs
    return []


def _in_library(path: str) -> bool:
    parts = path.replace("\\", "/").split("/")
    return "site-packages" in parts or "dist-packages" in parts


def _fmt(frame) -> str:
    return f"{frame[0]}:{frame[2]} ({frame[1]})"


def frames(eqn):
    try:
        return jc.source_frames(eqn.source_info)
    except Exception:  # JAX internals moved: degrade to no location rather than fail
        return []


def where(chain) -> Tuple[Optional[str], Optional[str]]:
    """(the user's line, the library line it goes through) of the outermost equation:
    its traceback is this trace's (a nested jaxpr may be a cached trace of another call)."""
    user = [f for f in frames(chain[0]) if f[3]]
    if not user:
        return None, None
    own = next((f for f in user if not _in_library(f[0])), None)
    if own is None:
        return _fmt(user[0]), None
    return _fmt(own), (_fmt(user[0]) if user[0] is not own else None)


# jax.random's implementation: jax/_src/random.py (JAX 0.8, 0.9), jax/_src/random/*.py (0.10)
_JAX_RANDOM = re.compile(r"jax/_src/random(\.py$|/)")


def random_function(chain) -> Optional[str]:
    """'jax.random.normal': the outermost jax.random frame that led to the draw."""
    for eqn in chain:
        fns = [f[1] for f in frames(eqn) if _JAX_RANDOM.search(f[0].replace("\\", "/"))]
        if fns:
            return f"jax.random.{fns[-1]}"
    return None


def _refuse_live_randomness(jaxpr, arg_of) -> None:
    chain = find(jaxpr, DRAWS) or find(jaxpr, KEY_ARITHMETIC)
    if chain is None:
        return
    prim = chain[-1].primitive.name
    fn = random_function(chain)
    line, via = where(chain)
    what = f"{fn} (JAX primitive '{prim}')" if fn else f"JAX primitive '{prim}'"
    at = (f" at {line}" if line else "") + (f", via {via}" if via else "")
    if prim in DRAWS:
        kind = "is a live random draw: its result reaches the function's output"
    else:
        kind = ("makes a PRNG key that reaches the function's output (returned, or its "
                "bits used as numbers)")
    args = _key_arguments(jaxpr, arg_of, chain[0])
    origin = (f" Its key comes from argument{'s' if len(args) > 1 else ''} "
              f"{', '.join(repr(a) for a in args)}." if args else "")
    raise UnsupportedPrimitiveError(prim, line, message=f"{what}{at} {kind}.{origin} "
                                    f"{OPTIONS}")


def _first_use(jaxpr, var) -> str:
    """How the top-level jaxpr reads argument ``var``, for an error message."""
    for eqn in jaxpr.eqns:
        if any(v is var for v in eqn.invars):
            prim = eqn.primitive.name
            line, _ = where([eqn])
            use = f"passes it to '{prim}'" + (f" at {line}" if line else "")
            if prim.startswith("custom_"):
                use += (" (JAX keeps every argument of a custom_jvp / custom_vjp function: "
                        "its derivative rule may read it; close over the key or call "
                        "jax.random outside that function)")
            elif prim == "while":
                use += " (a while loop keeps everything it carries)"
            return use
    return "returns it"


def _live_argument(jaxpr, var, name: str, aval) -> UnsupportedDTypeError:
    return UnsupportedDTypeError(
        f"argument '{name}' is a JAX PRNG key ({aval.dtype}) and the function "
        f"{_first_use(jaxpr, var)}, without a random draw that reaches an output: Core ML "
        "has no key type. Keep keys outside the compiled function (a key argument that "
        "nothing live reads is ignored).")
