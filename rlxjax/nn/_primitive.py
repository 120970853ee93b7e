"""Build a JAX primitive from a ``jax.numpy`` reference.

``define_primitive(name, impl, ...)`` registers everything JAX needs so that the primitive
is a single equation in a jaxpr and still works under every JAX transformation:

* eager impl: ``jax.jit`` of the reference, cached per params (one XLA compile per new
  shape, instead of one per reference op when run op by op);
* abstract eval: given (default: one output with ``x``'s shape and dtype);
* MLIR lowering: ``mlir.lower_fun`` of the reference (so ``jax.jit`` works on any backend);
* JVP: the primal output is the primitive itself (so ``make_jaxpr(grad(f))`` still shows
  it), the tangent is ``jax.jvp`` of the reference with symbolic zeros instantiated;
  the reference's tangent map is built from linear standard primitives, so reverse mode
  (transpose) needs nothing more;
* batching: a per-primitive *policy* may rewrite the batched call into a call of the same
  primitive (e.g. batch dim moved to the front, axis shifted); when it declines (returns
  ``None``) the rule falls back to ``jax.vmap`` of the reference, which is always correct.

``impl(*operands, **params)`` is the reference in operand form: exactly the operands that
``bind`` receives, in order, and the primitive's params as keyword arguments.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
from .._jax_compat import Primitive, ShapedArray, ad, mlir, register_batcher

# policy(args, dims, params) -> (new_args, new_params, post) | None, where ``post`` maps
# the primitive's output(s) on ``new_args`` to the batched output(s) with batch dim 0.
# vmap's batch dim of an unbatched operand (jax 0.10 has no public name for it).
NOT_MAPPED = None

BatchPolicy = Callable[[tuple, tuple, dict], Optional[tuple]]


def x_like_abstract_eval(x, *rest, **params):
    return ShapedArray(x.shape, x.dtype)


def define_primitive(name: str, impl: Callable, *, multiple_results: bool = False,
                     abstract_eval: Callable = x_like_abstract_eval,
                     batch_policy: Optional[BatchPolicy] = None) -> Primitive:
    prim = Primitive(name)
    prim.multiple_results = multiple_results

    def _lowering_fun(*args, **params):
        out = impl(*args, **params)
        return list(out) if multiple_results else out

    @functools.lru_cache(maxsize=None)
    def _jitted(items):
        return jax.jit(functools.partial(_lowering_fun, **dict(items)))

    def _impl(*args, **params):
        return _jitted(tuple(sorted(params.items())))(*args)

    def _jvp(primals, tangents, **params):
        tangents = tuple(ad.instantiate_zeros(t) for t in tangents)
        out = prim.bind(*primals, **params)
        _, t_out = jax.jvp(functools.partial(impl, **params), tuple(primals), tangents)
        return out, (list(t_out) if multiple_results else t_out)

    def _fallback(args, dims, params):
        in_axes = tuple(None if d is NOT_MAPPED else d for d in dims)
        out = jax.vmap(functools.partial(impl, **params), in_axes=in_axes)(*args)
        if multiple_results:
            out = list(out)
            return out, [0] * len(out)
        return out, 0

    def _batch(args, dims, **params):
        if all(d is NOT_MAPPED for d in dims):
            out = prim.bind(*args, **params)
            return (out, [NOT_MAPPED] * len(out)) if multiple_results else (out, NOT_MAPPED)
        plan = batch_policy(tuple(args), tuple(dims), dict(params)) if batch_policy else None
        if plan is None:
            return _fallback(args, dims, params)
        new_args, new_params, post = plan
        out = post(prim.bind(*new_args, **new_params))
        if multiple_results:
            out = list(out)
            return out, [0] * len(out)
        return out, 0

    prim.def_impl(_impl)
    prim.def_abstract_eval(abstract_eval)
    mlir.register_lowering(prim, mlir.lower_fun(_lowering_fun, multiple_results=multiple_results))
    ad.primitive_jvps[prim] = _jvp
    register_batcher(prim, _batch)
    prim.reference = impl  # operand-form reference, for tools (e.g. the rlxjax frontend)
    return prim


def x_only_policy(transform: Callable) -> BatchPolicy:
    """Policy for "only x (operand 0) is batched": move its batch dim to the front and let
    ``transform(x_front, params) -> (x_new, params_new, post) | None`` adapt the call."""

    def policy(args, dims, params):
        if dims[0] is NOT_MAPPED or any(d is not NOT_MAPPED for d in dims[1:]):
            return None
        x = jnp.moveaxis(args[0], dims[0], 0)
        plan = transform(x, params)
        if plan is None:
            return None
        x_new, params_new, post = plan
        return (x_new, *args[1:]), params_new, post

    return policy


def shift_axes(*names: str) -> BatchPolicy:
    """x-only policy: a leading batch dim leaves the op intact if the named axis params
    shift by one (ops whose semantics only look at axes >= ``axis``)."""

    def transform(x, params):
        p = dict(params)
        for n in names:
            p[n] = p[n] + 1
        return x, p, lambda out: out

    return x_only_policy(transform)


def merge_into_axis0() -> BatchPolicy:
    """x-only policy for ops that treat axis 0 as independent samples: fold the vmapped
    dim into axis 0 (``[B, N, ...] -> [B*N, ...]``), bind, and unfold."""

    def transform(x, params):
        b, n = x.shape[0], x.shape[1]
        x2 = x.reshape((b * n,) + x.shape[2:])
        return x2, params, lambda out: out.reshape((b, n) + out.shape[1:])

    return x_only_policy(transform)
