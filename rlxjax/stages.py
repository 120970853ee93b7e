"""The compile pipeline, stage by stage: the functions every compile calls, in order.

Every compile - ``coreml_jit``, ``coreml_grad``, a stateful function, a training step
(training/pipeline.py) - is these functions called in this order, each on what the one
before returned; none calls back into its caller::

    structs(...)        the arguments as ShapeDtypeStructs (flexible= axes as symbols)
    trace(...)          jaxpr -> RLX graph (frontend), then the recognisers (BEFORE_AD)
    <a transform>       the caller's: grad (grad_api.py), states (stateful.py), the train
                        graph (training/program.py); a function Traced -> Traced
    finish(traced)      AFTER_AD
    to_format(...)      BEFORE_LOWERING, the format-neutral Program, the format's compile
    metadata.describe   every rlxjax.* key of the program, once, after the format compiled

The pass lists are transforms/pipeline.py's; the formats are rlxjax/formats/'s.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import jax

from . import calling, flexible as _flexible, formats, frontend
from .errors import ArgumentError
from .formats.backends import resolve_backend
from .frontend import Traced, arg_names
from .frontend.random.inputs import check_mode as check_random_mode
from .program import Program
from .transforms import pipeline


def resolve_options(target, precision: str, backend, random: Optional[str], format: str):
    """The options every compiled function takes, checked once where the user gives them:
    (target resolved, backend resolved)."""
    if precision not in ("fp32", "fp16"):
        raise ArgumentError(f"precision must be 'fp32' or 'fp16', got {precision!r}")
    target = formats.resolve_target(target, format)  # once: a Target from here on
    backend = resolve_backend(backend, format)
    check_random_mode(random)
    if random == "device" and not formats.REGISTRY[format].random_ops:
        raise ArgumentError(f"random='device' draws with the format's own random ops, and "
                            f"format={format!r} has none (Core AI has no random ops): use "
                            "random='inputs' (the draws are made by JAX on the host and fed "
                            "to the program, exactly JAX's numbers)")
    return target, backend


def leaf_struct(x) -> jax.ShapeDtypeStruct:
    """A leaf to trace with: JAX's dtype (a PRNG key, uint32, ...); the frontend refuses
    those that are program inputs but no Core ML type, naming them."""
    if isinstance(x, jax.ShapeDtypeStruct):
        return x
    shape, dtype = calling.leaf_sig(x)
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def structs(dyn: Sequence, names: Sequence[str], flexible=None, fun=None, n_args: int = 0):
    """(the dynamic arguments ``dyn`` as ShapeDtypeStruct trees, named ``names``; the
    enumerated sizes of flexible= axes). ``flexible`` names arguments of ``fun`` (called
    with ``n_args`` arguments) by name or position (rlxjax/flexible.py)."""
    specs = jax.tree_util.tree_map(leaf_struct, list(dyn))
    if not flexible:
        return specs, {}
    by_name = _flexible.by_name(flexible, arg_names(fun, n_args))
    return _flexible.symbolic_structs(specs, list(names), by_name)


def signature(dyn: Sequence, names: Sequence[str], flexible=None, fun=None,
              n_args: int = 0) -> tuple:
    """What a program compiled for ``dyn`` depends on: its tree, and each leaf's shape and
    dtype (a flexible axis by its symbol: one program for all its sizes)."""
    leaves, treedef = jax.tree_util.tree_flatten(list(dyn))
    if flexible:
        sig = _flexible.cache_key(structs(dyn, names, flexible, fun, n_args)[0])
    else:
        sig = tuple((tuple(x.shape), x.dtype) if isinstance(x, jax.ShapeDtypeStruct)
                    else calling.leaf_sig(x) for x in leaves)
    return treedef, sig


def trace(fun, specs, names, *, random: Optional[str], fmt) -> Traced:
    """``fun`` traced on ``specs`` into an RLX graph, its composites recognised (the
    ``BEFORE_AD`` passes), ready for a transform."""
    traced = frontend.trace(fun, specs, names, random=random)
    pipeline.run_passes(traced.graph, pipeline.BEFORE_AD,  # transforms/pipeline.py
                        attention_bool_masks=fmt.attention_bool_masks)
    return traced


def finish(traced: Traced) -> Traced:
    """The passes after the transforms (``AFTER_AD``: remat and custom calls inlined,
    dead code, simplification)."""
    pipeline.run_passes(traced.graph, pipeline.AFTER_AD)
    return traced


def to_format(traced: Traced, fmt, target, precision: str, *, states=None, enumerated=None,
              keep_weight_layout: bool = False) -> Tuple[Program, object]:
    """(the format-neutral ``Program``, the format's ``Executable``): the passes that need
    the precision (``BEFORE_LOWERING``), then ``fmt.compile``. No metadata yet: the caller
    writes it next, once (``metadata.describe``), with what its compile adds."""
    pipeline.run_passes(traced.graph, pipeline.BEFORE_LOWERING,  # "mixed": the graph's types
                        precision="fp32" if precision == "mixed" else precision)
    if not fmt.lowers_remat_barrier:
        pipeline.run_passes(traced.graph, ("drop_remat_barriers",))
    program = Program(traced, target, precision, states=states, enumerated=enumerated or {})
    return program, fmt.compile(program, keep_weight_layout=keep_weight_layout)
