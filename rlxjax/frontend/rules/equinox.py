"""Frontend rules for equinox's own primitives (``eqx.internal.scan(..., kind=
"checkpointed")``, ``eqx.internal.while_loop``, ``eqx.error_if``'s helpers ...).

equinox defines these primitives for what its transformations need (vmap and autodiff
rules: ``unvmap_any`` reduces over the batch too, ``maybe_set`` writes a loop buffer once per
index, ``select_if_vmap`` selects only under vmap, ``nonbatchable`` refuses a batch) and
lowers each one to XLA as its own implementation (``mlir.register_lowering(p,
mlir.lower_fun(impl))``): ``unvmap_any(x)`` is ``jnp.any(x)``, ``select_if_vmap(p, x, y)``
is ``x``, ``maybe_set(pred, xs, x, i)`` is ``xs.at[i].set(x)``, ``vprim`` is its primitive
under ``jax.vmap``, ``nonbatchable(x)`` is ``x``. By the time rlxjax reads a jaxpr every
vmap and derivative has been applied, so what is left is what ``jax.jit`` compiles: the
same implementation, traced by JAX with the equation's params and inlined here - the
program computes exactly what XLA computes.
"""
from __future__ import annotations

import jax

from ..registry import rule
from .control import _inline

#: equinox's primitives that lower as their implementation (equinox 0.11-0.13)
PRIMITIVES = ("unvmap_any", "unvmap_all", "unvmap_max", "nonbatchable", "select_if_vmap",
              "maybe_set", "vprim")


@rule(*PRIMITIVES)
def _as_implemented(ctx, eqn, *args):
    prim = eqn.primitive
    impl = getattr(prim, "impl", None)
    if impl is None or not getattr(impl, "__module__", "").startswith("equinox"):
        raise ctx.unsupported(f"a primitive named {prim.name!r} that is not equinox's")
    params = dict(eqn.params)

    def fn(*xs):
        out = impl(*xs, **params)
        return list(out) if prim.multiple_results else out

    closed = jax.make_jaxpr(fn)(*[jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype)
                                  for v in eqn.invars])
    return _inline(ctx, closed, args)
