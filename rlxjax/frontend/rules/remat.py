"""``jax.checkpoint`` / ``jax.remat`` (primitive ``checkpoint``, ``remat2`` in the jaxpr)
and ``checkpoint_name`` (primitive ``name``).

A checkpoint becomes a ``remat`` node (ir/control.py) whose body computes the function's
outputs and then the values its policy saves: JAX's own policy object is asked about each
equation of the body, nested calls' included (``jax.checkpoint_policies.nothing_saveable``,
``everything_saveable``, ``dots_saveable`` / ``checkpoint_dots``,
``dots_with_no_batch_dims_saveable``, ``save_only_these_names`` with ``checkpoint_name``,
``save_any_names_but_these``, a policy of your own); offloading policies (host memory)
are refused. The grad transform recomputes the rest in the backward pass
(transforms/vjp/control.py). Where no gradient is taken the body is inlined.
"""
from __future__ import annotations

from ... import _jax_compat as jc
from ...errors import UnsupportedPrimitiveError
from ...ir import Graph
from ..registry import rule
from .control import _inline, _is_empty


@rule("name")
def _name(ctx, eqn, x):
    """``checkpoint_name``: the identity (a policy reads the name)."""
    return x


def _policy_name(policy) -> str:
    if policy is None:
        return "nothing_saveable"
    return getattr(policy, "__name__", None) or type(policy).__name__


@rule("checkpoint", "remat", "remat2")
def _checkpoint(ctx, eqn, *args):
    jaxpr = eqn.params.get("jaxpr")
    if jaxpr is None:
        raise ctx.unsupported("checkpoint without a jaxpr")
    policy = eqn.params.get("policy")
    if (ctx.custom_rules is None or not any(v.dtype.is_float for v in args)
            or any(_is_empty(v.type) for v in args)):
        return _inline(ctx, jaxpr, args)
    g = Graph("remat")
    sub = type(ctx)(g, ctx.custom_rules)
    sub.source, sub.primitive, sub.in_library = ctx.source, ctx.primitive, ctx.in_library
    ins = [g.add_input(f"in{i}", v.type) for i, v in enumerate(args)]
    seen = {v.id for v in ins}
    saved = []

    def saving(e, outs):
        verdict = jc.remat_verdict(policy, e)
        if verdict == "offload":
            raise UnsupportedPrimitiveError(
                "checkpoint", ctx.source,
                f"its policy ({_policy_name(policy)}) offloads '{e.primitive.name}' to "
                "host memory, which Core ML has no place for: use a policy that saves or "
                "recomputes (save_only_these_names, dots_saveable, nothing_saveable)")
        if verdict == "save":
            for v in outs:
                if v.dtype.is_float and v.id not in seen:
                    seen.add(v.id)
                    saved.append(v)

    sub.remat_saving = saving
    outs = _inline(sub, jaxpr, ins)
    for i, v in enumerate(outs):
        g.add_output(f"out{i}", v)
    for j, v in enumerate(saved):
        g.add_output(f"saved{j}", v)
    if sub.made_empty:
        from ...transforms.rewrite import dce

        dce(g)
    results = ctx.add_multi("remat", args, body=g, num_out=len(outs),
                            policy=_policy_name(policy))
    return list(results[:len(outs)])
