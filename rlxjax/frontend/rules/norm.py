"""Frontend rules: the rlxjax.nn norm primitives map one-to-one onto RLX norm ops."""
from __future__ import annotations

from ..registry import rule

# primitive name -> (RLX op, params copied from the equation)
_NORMS = {
    "rlx_layer_norm": ("layer_norm", ("axis", "eps", "has_gamma", "has_beta")),
    "rlx_rms_norm": ("rms_norm", ("axis", "eps", "has_gamma", "has_beta")),
    "rlx_group_norm": ("group_norm", ("num_groups", "eps", "channel_axis", "has_gamma",
                                      "has_beta")),
    "rlx_batch_norm": ("batch_norm", ("eps", "axis", "has_gamma", "has_beta")),
    "rlx_batch_norm_train": ("batch_norm_train", ("eps", "axis", "momentum", "has_gamma",
                                                  "has_beta")),
    "rlx_layer_norm2d": ("layer_norm2d", ("eps", "has_gamma", "has_beta")),
    "rlx_ada_layer_norm": ("ada_layer_norm", ("kind", "eps")),
    "rlx_gated_residual": ("gated_residual", ()),
}


def _typed(name, v):
    if name == "eps" or name == "momentum":
        return float(v)
    if name.startswith("has_"):
        return bool(v)
    if name == "kind":
        return str(v)
    return int(v)


for _prim, (_op, _names) in _NORMS.items():

    @rule(_prim)
    def _norm(ctx, eqn, *inputs, _op=_op, _names=_names):
        params = {n: _typed(n, eqn.params[n]) for n in _names}
        outs = ctx.add_multi(_op, inputs, **params)
        return list(outs) if len(outs) > 1 else outs[0]
