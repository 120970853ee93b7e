"""Every JAX internal rlxjax uses, in one place, for each supported JAX line (0.8 - 0.10).

rlxjax reads jaxprs, so it depends on JAX's jaxpr data types and on a few extension
hooks. Where a name moved between releases, this module finds it; the rest of the package
imports from here and never from ``jax._src``, ``jax.core``, ``jax.extend`` or
``jax.interpreters`` directly. When JAX moves something again, this is the one file to
change; ``tests/frontend/test_jax_compat.py`` checks that each name here resolves on the JAX
installed.

What moved (release where the public name appeared):
- ``DropVar``: ``jax.extend.core.DropVar`` from 0.10; before that only
  ``jax.core.DropVar`` (deprecated in 0.10) and ``jax._src.core.DropVar``.
- ``Primitive.get_bind_params``: returns ``(subfuns, params)`` on 0.8, only the params
  from 0.9 (``equation_binder``).
- Primitives emitted differ by line (0.10 adds e.g. ``stack``, ``tile``, ``philox*``): a
  rule for a primitive a line never emits is simply unused, so rules need no version test.
"""
from __future__ import annotations

import jax
from jax import core as _jax_core
from jax.extend import core as _jex_core
from jax.extend import source_info_util as _source_info_util
from jax.interpreters import ad, batching, mlir  # noqa: F401  (re-exported)

#: The JAX release lines rlxjax is tested on (pyproject.toml's range says the same; CI runs
#: the suite on the first and the last, .ci/run).
SUPPORTED_LINES = ((0, 8), (0, 9), (0, 10))
#: This JAX's release line, e.g. (0, 9).
LINE = tuple(jax.__version_info__[:2])

# -- jaxpr data types --------------------------------------------------------------------
Jaxpr = _jex_core.Jaxpr
ClosedJaxpr = _jex_core.ClosedJaxpr
Literal = _jex_core.Literal
Var = _jex_core.Var
Primitive = _jex_core.Primitive

try:  # jax >= 0.10
    DropVar = _jex_core.DropVar
except AttributeError:  # jax 0.8, 0.9: not yet public in jax.extend.core
    from jax._src.core import DropVar  # noqa: F401

# -- avals -------------------------------------------------------------------------------
ShapedArray = _jax_core.ShapedArray

#: ``jaxpr_as_fun(closed_jaxpr)``: the closed jaxpr as a function JAX can trace (vmap)
jaxpr_as_fun = _jex_core.jaxpr_as_fun


# -- source locations --------------------------------------------------------------------
def exclude_from_source_lines(path: str) -> None:
    """Frames under ``path`` are never an equation's user frame (as JAX's own are not)."""
    _source_info_util.register_exclusion(path)


def is_library_function(closed_jaxpr) -> bool:
    """Whether a call's jaxpr was traced from a function in a file JAX never reports as the
    user's (JAX's own, rlxjax's): its equations' user frames lie outside it, in the caller
    stack of whichever trace made the (cached) jaxpr, possibly another call site."""
    jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
    src = getattr(getattr(jaxpr, "debug_info", None), "func_src_info", None)
    if not src or " at " not in src:
        return False
    path = src.rsplit(" at ", 1)[1].rsplit(":", 1)[0]
    try:
        from jax._src import source_info_util as _internal  # noqa: PLC0415
        excluded = _internal._exclude_paths
    except (ImportError, AttributeError):  # JAX moved it: keep the inner lines
        return False
    return any(path.startswith(p) for p in excluded if "/jax/" in p or "rlxjax" in p)


def summarize_source(source_info):
    """'file.py:12 (fn)' of the user's frame recorded in an equation's ``source_info``."""
    return _source_info_util.summarize(source_info)


def source_frames(source_info):
    """Every frame of the traceback recorded in an equation's ``source_info``, innermost
    first, as ``(file, function, line, is_user)``: ``is_user`` is JAX's own test (not
    JAX's code, nor a path given to ``exclude_from_source_lines``)."""
    from jax._src import source_info_util as siu  # not in jax.extend's subset

    tb = getattr(source_info, "traceback", None)
    if tb is None:
        return []
    codes, lastis = tb.raw_frames()
    out = []
    for code, lasti in zip(codes, lastis):
        f = siu.raw_frame_to_frame(code, lasti)
        out.append((f.file_name, f.function_name, f.start_line,
                    siu.is_user_filename(f.file_name)))
    return out


# -- lax functions with no public name ---------------------------------------------------
def logaddexp():
    """lax-level logaddexp (what ``lax.cumlogsumexp`` combines with; not in ``jax.lax``)."""
    from jax._src.lax.other import logaddexp as f

    return f


# -- extension hooks ---------------------------------------------------------------------
def register_batcher(prim, rule):
    """vmap rule ``rule(args, dims, **params) -> (out, out_dims)`` for ``prim``.

    Since jax 0.4.36 ``batching.primitive_batchers`` is a deprecated shim around
    ``fancy_primitive_batchers``, whose rules also receive the axis data (unused here)."""
    batching.fancy_primitive_batchers[prim] = \
        lambda axis_data, args, dims, **params: rule(args, dims, **params)


# -- dead-code elimination -----------------------------------------------------------------
def dce_closed_jaxpr(closed, keep_inputs):
    """JAX's own dead-code elimination of a closed jaxpr, all outputs used: equations whose
    results reach no output are removed, nested jaxprs included (jit, cond, scan,
    custom_jvp/vjp, remat each have a rule; a ``while`` is kept whole if any of its
    results is used); equations with effects (io_callback, state) are always kept.
    ``keep_inputs[i]``: keep input ``i`` even if unused. Returns the new closed jaxpr,
    holding only the constants it uses, and which inputs it kept."""
    from jax._src.interpreters import partial_eval as pe

    jaxpr = closed.jaxpr
    instantiate = [False] * len(jaxpr.constvars) + [bool(k) for k in keep_inputs]
    new, used_consts, used_inputs = pe.dce_jaxpr_consts(
        jaxpr, [True] * len(jaxpr.outvars), instantiate)
    consts = [c for c, u in zip(closed.consts, used_consts) if u]
    return ClosedJaxpr(new, consts), [bool(u) for u in used_inputs]


# -- re-binding an equation --------------------------------------------------------------
def eval_equation(eqn, args, source_info=None):
    """The results (a list) of ``eqn`` applied to ``args``, bound as ``jax.core.eval_jaxpr``
    does: under the equation's recorded source info (or ``source_info``: so a re-traced
    equation keeps the user's line) and its context."""
    info = source_info or eqn.source_info
    name_stack = _source_info_util.current_name_stack() + eqn.source_info.name_stack
    with _source_info_util.user_context(info.traceback, name_stack=name_stack), \
            eqn.ctx.manager:
        out = equation_binder(eqn)(*args)
    return list(out) if eqn.primitive.multiple_results else [out]


def equation_binder(eqn):
    """``bind(*args)`` that re-binds ``eqn``'s primitive with its params, as
    ``jax.core.eval_jaxpr`` does (so JAX applies e.g. a custom_jvp/vjp rule under jax.vjp).

    ``Primitive.get_bind_params`` returns ``(subfuns, params)`` up to jax 0.8 and only the
    params (subfuns inside them) from jax 0.9."""
    prim = eqn.primitive
    bind_params = prim.get_bind_params(eqn.params)
    if isinstance(bind_params, tuple):  # jax 0.8
        subfuns, bind_params = bind_params
        return lambda *args: prim.bind(*subfuns, *args, **bind_params)
    return lambda *args: prim.bind(*args, **bind_params)


def at_source(source_info):
    """A context in which newly bound equations record ``source_info``'s traceback (the
    user's line), as a re-traced equation does (frontend/random/device.py's draws)."""
    return _source_info_util.user_context(source_info.traceback)


# -- symbolic dimensions (jax.export shape polymorphism) ---------------------------------
def is_symbolic_dim(d) -> bool:
    """Whether ``d`` (a dim of an aval or an equation parameter) is a symbolic expression
    (``jax.export.symbolic_shape``) rather than a concrete int."""
    return jax.export.is_symbolic_dim(d)


def symbolic_bounds(d):
    """(lower, upper) bounds of symbolic dim ``d`` under its scope's constraints (upper
    ``math.inf`` when unbounded), as JAX's own shape checks decide them."""
    from jax._src.export import shape_poly as _sp

    return _sp._bounds_decision(d, _sp.BoundsPrecision.BEST)


#: what JAX raises when a symbolic dim is used where a constant is needed (int(b), b < 3)
try:  # public from jax 0.9
    InconclusiveDimensionOperation = jax.errors.InconclusiveDimensionOperation
except AttributeError:  # jax 0.8
    from jax._src.core import InconclusiveDimensionOperation  # noqa: F401


# -- jax.checkpoint policies -------------------------------------------------------------
def remat_verdict(policy, eqn) -> str:
    """What a ``jax.checkpoint`` policy decides for one equation of the checkpointed
    function, asked as JAX's partial evaluation asks it: ``"save"``, ``"recompute"`` or
    ``"offload"`` (an ``Offloadable``, host memory)."""
    from jax._src.interpreters import partial_eval as pe  # noqa: PLC0415  (no public name)

    if policy is None:  # jax.checkpoint without a policy: nothing_saveable
        return "recompute"
    verdict = policy(eqn.primitive, *[v.aval for v in eqn.invars], **eqn.params)
    if isinstance(verdict, pe.Offloadable):
        return "offload"
    if verdict is True or verdict is pe.Saveable:
        return "save"
    return "recompute"
