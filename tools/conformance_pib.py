"""Out-of-bounds ``PROMISE_IN_BOUNDS`` gathers and scatters: a valid difference.

The gradient of a gather / scatter with ``mode=PROMISE_IN_BOUNDS`` and out-of-bounds
indices differs from ``jax.grad``, validly (tools/conformance.py).

JAX documents the mode (``lax.GatherScatterMode``): "The user promises that indices are in
bounds. [...] In practice, with the current XLA implementation this means that
out-of-bounds gathers will be clamped but out-of-bounds scatters will be discarded.
Gradients will not be correct if indices are out-of-bounds." JAX's transpose of such a
gather is a scatter-add with the same mode, which XLA *drops* where the forward gather
*clamped* (and the transpose of such a scatter-add a gather that clamps what the forward
dropped), so ``jax.grad`` is not the derivative of the values JAX computes. rlxjax
computes the same forward values as XLA (gathers clamp, scatters drop) and differentiates
them.

The difference is accepted only when it is exactly that: rlxjax's gradient must equal
``jax.grad`` of the same function with every ``PROMISE_IN_BOUNDS`` gather made ``CLIP``
and every such scatter made ``FILL_OR_DROP`` -- the modes with XLA's forward values and
correct gradients.
"""
from __future__ import annotations

EXPLANATION = ("PROMISE_IN_BOUNDS with out-of-bounds indices: JAX documents its gradients "
               "are not correct there; rlxjax's equals jax.grad of the values XLA computes "
               "(the gathers as mode=clip, the scatters as mode=drop)")


def _consistent_jaxpr(jaxpr):
    from jax import lax
    from jax.extend import core as jcore
    mode = lax.GatherScatterMode
    eqns, changed = [], False
    for e in jaxpr.eqns:
        params = dict(e.params)
        if params.get("mode") == mode.PROMISE_IN_BOUNDS:
            params["mode"] = mode.CLIP if e.primitive.name == "gather" else mode.FILL_OR_DROP
            changed = True
        for k, v in e.params.items():
            if isinstance(v, jcore.ClosedJaxpr):
                inner, c = _consistent_jaxpr(v.jaxpr)
                params[k] = jcore.ClosedJaxpr(inner, v.consts)
                changed = changed or c
            elif isinstance(v, jcore.Jaxpr):
                params[k], c = _consistent_jaxpr(v)
                changed = changed or c
        eqns.append(e.replace(params=params))
    return jaxpr.replace(eqns=eqns), changed


def consistent_grad(loss, argnums, args):
    """``jax.grad`` of ``loss`` with the promise-in-bounds modes replaced (see the module
    docstring), or None when ``loss`` has no such gather / scatter."""
    import jax
    from jax._src import core

    closed = jax.make_jaxpr(loss)(*args)
    jaxpr, changed = _consistent_jaxpr(closed.jaxpr)
    if not changed:
        return None

    def fixed(*xs):
        return core.eval_jaxpr(jaxpr, closed.consts, *xs)[0]
    return jax.jit(jax.grad(fixed, argnums=argnums))(*args)


def promise_in_bounds_difference(loss, argnums, args, got, compare, tol):
    """The explanation when ``got`` (rlxjax's gradient, which differs from ``jax.grad``)
    is the gradient of XLA's values under promise-in-bounds modes, else None."""
    try:
        want = consistent_grad(loss, argnums, args)
    except Exception:  # noqa: BLE001 - no consistent reference: not this difference
        return None
    if want is None or compare(got, want, *tol) is not None:
        return None
    return EXPLANATION
