"""One small graph per RLX op (``sample(op)``): the op applied once to graph inputs, with
parameters that fit its schema. tests/ir/test_op_records.py lowers each on every target the
op's lowering claims (the claims are what docs/primitives.md lists)."""
from __future__ import annotations

import numpy as np

from rlxjax.ir import DType, Dyn, Graph, TensorType
from rlxjax.ir.builder import Builder
from rlxjax.ir.bitwise import BIT_COUNTS, SHIFTS
from rlxjax.ir.ops import ARITH_BINARY, COMPARE, FLOAT_UNARY, LOGIC_BINARY, NUMERIC_UNARY
from rlxjax.ir.special import SPECIAL_BINARY, SPECIAL_TERNARY, SPECIAL_UNARY

F32, I32, BOOL = DType.f32, DType.i32, DType.bool


def _t(*shape, dtype=F32):
    return TensorType(tuple(shape), dtype)


#: op -> (input types, params)
_SIMPLE = {
    **{n: ([_t(2, 3)], {}) for n in FLOAT_UNARY + NUMERIC_UNARY + ("stop_gradient",)},
    "round": ([_t(2, 3)], {"method": "half_even"}),
    "not": ([_t(2, 3, dtype=BOOL)], {}),
    "integer_pow": ([_t(2, 3)], {"y": 3}),
    **{n: ([_t(2, 3), _t(1, 3)], {}) for n in ARITH_BINARY + COMPARE},
    **{n: ([_t(2, 3, dtype=BOOL)] * 2, {}) for n in LOGIC_BINARY},
    "select": ([_t(2, 3, dtype=BOOL), _t(2, 3), _t(2, 3)], {}),
    "clamp": ([_t(), _t(2, 3), _t()], {}),
    "convert": ([_t(2, 3)], {"dtype": I32}),
    **{n: ([_t(2, 3)], {"axes": (1,)})
       for n in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")},
    **{n: ([_t(2, 3)], {"axis": 1, "index_dtype": I32}) for n in ("argmax", "argmin")},
    "reshape": ([_t(2, 3)], {"shape": (3, 2)}),
    "transpose": ([_t(2, 3)], {"perm": (1, 0)}),
    "broadcast_in_dim": ([_t(2, 3)], {"shape": (4, 2, 3), "dims": (1, 2)}),
    "rev": ([_t(2, 3)], {"axes": (0,)}),
    "concatenate": ([_t(2, 3), _t(1, 3)], {"axis": 0}),
    "slice": ([_t(2, 3)], {"start": (0, 1), "limit": (2, 3), "strides": (1, 1)}),
    "split": ([_t(2, 5)], {"axis": 1, "sizes": (2, 3)}),
    "dot_general": ([_t(2, 3), _t(4, 3)], {"contract": ((1,), (1,)), "batch": ((), ())}),
    "pad": ([_t(2, 3), _t()], {"config": ((1, 1, 0), (0, 2, 1))}),
    **{n: ([_t(2, 3, dtype=I32), _t(1, 3, dtype=I32)], {}) for n in SHIFTS},
    **{n: ([_t(2, 3, dtype=I32)], {}) for n in BIT_COUNTS},
    "reduce_precision": ([_t(2, 3)], {"exponent_bits": 5, "mantissa_bits": 7}),
}

_AFFINE = {"eps": 1e-5, "has_gamma": True, "has_beta": True}
_NORMS = {
    "layer_norm": ([_t(2, 4), _t(4), _t(4)], {"axis": 1, **_AFFINE}),
    "rms_norm": ([_t(2, 4), _t(4), _t(4)], {"axis": 1, **_AFFINE}),
    "group_norm": ([_t(2, 4, 3), _t(4), _t(4)],
                   {"num_groups": 2, "channel_axis": 1, **_AFFINE}),
    "batch_norm": ([_t(2, 4)] + [_t(4)] * 4, {"axis": 1, **_AFFINE}),
    "batch_norm_train": ([_t(2, 4)] + [_t(4)] * 4, {"axis": 1, "momentum": 0.9, **_AFFINE}),
    "layer_norm2d": ([_t(1, 4, 2, 2), _t(4), _t(4)], dict(_AFFINE)),
    "ada_layer_norm": ([_t(2, 4), _t(2, 4), _t(1, 4)], {"kind": "layer", "eps": 1e-5}),
    "gated_residual": ([_t(2, 4), _t(2, 4), _t(4)], {}),
}
_GRADS = {"outputs": ("dx", "dgamma", "dbeta")}
_G = {"eps": 1e-5, "has_gamma": True}
_NORM_GRADS = {
    "layer_norm_grad": ([_t(2, 4), _t(4), _t(2, 4)], {"axis": 1, **_G, **_GRADS}),
    "rms_norm_grad": ([_t(2, 4), _t(4), _t(2, 4)], {"axis": 1, **_G, **_GRADS}),
    "group_norm_grad": ([_t(2, 4, 3), _t(4), _t(2, 4, 3)],
                        {"num_groups": 2, "channel_axis": 1, **_G, **_GRADS}),
    "layer_norm2d_grad": ([_t(1, 4, 2, 2), _t(4), _t(1, 4, 2, 2)], {**_G, **_GRADS}),
    "batch_norm_train_grad": ([_t(2, 4), _t(4), _t(2, 4)], {"axis": 1, **_G, **_GRADS}),
    "batch_norm_grad": ([_t(2, 4), _t(4), _t(4), _t(4), _t(2, 4)],
                        {"axis": 1, **_G, "outputs": ("dx", "dgamma", "dbeta", "dmean", "dvar")}),
    "ada_layer_norm_grad": ([_t(2, 4), _t(2, 4), _t(2, 4)],
                            {"kind": "rms", "eps": 1e-5, "shift_shape": (1, 4),
                             "outputs": ("dx", "dscale", "dshift")}),
    "gated_residual_grad": ([_t(2, 4), _t(4), _t(2, 4)], {"outputs": ("dy", "dgate")}),
}
_WIN = {"window": (1, 1, 2, 2), "strides": (1, 1, 2, 2), "dilation": (1, 1, 1, 1)}
_OTHER = {
    "remat_barrier": ([_t(2), _t(3, 2)], {}),
    **{n: ([_t(1, 2, 4, 4)], _WIN)
       for n in ("reduce_window_max", "reduce_window_min", "reduce_window_sum")},
    "select_and_scatter_add": ([_t(1, 2, 2, 2), _t(1, 2, 4, 4)], {**_WIN, "select": "ge"}),
    "select_and_gather_add": ([_t(1, 2, 4, 4), _t(1, 2, 4, 4)], {**_WIN, "select": "le"}),
    "conv": ([_t(1, 2, 5, 5), _t(3, 2, 3, 3)],
             {"strides": (1, 1), "padding": ((1, 1), (1, 1)), "lhs_dilation": (1, 1),
              "rhs_dilation": (1, 1), "feature_groups": 1, "batch_groups": 1}),
    "gather_nd": ([_t(3, 4), _t(2, 1, dtype=I32)], {}),
    "scatter_nd": ([_t(3, 4), _t(2, 1, dtype=I32), _t(2, 4)], {"mode": "add", "unique": False}),
    "cumsum": ([_t(2, 3)], {"axis": 1, "reverse": False}),
    "dynamic_slice": ([_t(3, 4), _t(dtype=I32), _t(dtype=I32)], {"sizes": (2, 2)}),
    "dynamic_update_slice": ([_t(3, 4), _t(2, 2), _t(dtype=I32), _t(dtype=I32)], {}),
    "take_at": ([_t(2, 3, 4), _t(dtype=I32)], {"axis": 1}),
    "bernoulli": ([], {"shape": (2, 3), "dtype": F32, "prob": 0.5, "seed": 0}),
    "random_uniform": ([], {"shape": (2, 3), "dtype": F32, "low": -1.0, "high": 2.0, "seed": 0}),
    "random_normal": ([], {"shape": (2, 3), "dtype": F32, "mean": 0.0, "std": 1.0, "seed": 0}),
    # (compressed schemes: tests/coreml/test_compress.py lowers each on every target it claims)
    "weight": ([], {"value": np.ones((2, 3), np.float32), "name": "w", "scheme": "none"}),
}
_SPECIAL = {
    **{n: ([_t(2, 3)], {}) for n in SPECIAL_UNARY},
    **{n: ([_t(2, 3), _t(1, 3)], {}) for n in SPECIAL_BINARY},
    **{n: ([_t(2, 3), _t(1, 3), _t(2, 1)], {}) for n in SPECIAL_TERNARY},
}
_TRI = {"left_side": True, "lower": True, "transpose_a": False, "unit_diagonal": False}
_LINALG = {
    "cholesky": ([_t(2, 3, 3)], {}),
    "triangular_solve": ([_t(2, 3, 3), _t(2, 3, 4)], _TRI),
    "lu": ([_t(2, 3, 4)], {}),
    "qr": ([_t(2, 4, 3)], {"full_matrices": True}),
    "svd": ([_t(2, 3, 4)], {}),
    "tridiagonal_solve": ([_t(2, 3)] * 3 + [_t(2, 3, 2)], {}),
}
_ACTIVATIONS = {
    "softmax": ([_t(2, 3)], {"axis": 1}),
    "log_softmax": ([_t(2, 3)], {"axis": 0}),
    "gelu": ([_t(2, 3)], {"approximate": False}),
    "silu": ([_t(2, 3)], {}),
    "softmax_grad": ([_t(2, 3), _t(2, 3)], {"axis": 1}),
    "log_softmax_grad": ([_t(2, 3), _t(2, 3)], {"axis": 0}),
    "gelu_grad": ([_t(2, 3), _t(2, 3)], {"approximate": True}),
    "silu_grad": ([_t(2, 3), _t(2, 3)], {}),
    "attention": ([_t(2, 3, 4), _t(2, 5, 4), _t(2, 5, 6), _t(3, 5)],
                  {"scale": 0.3, "has_mask": True}),
    "attention_grad": ([_t(2, 3, 4), _t(2, 5, 4), _t(2, 5, 6), _t(3, 5), _t(2, 3, 6)],
                       {"scale": 0.5, "has_mask": True,
                        "outputs": ("dq", "dk", "dv", "dmask")}),
}
SAMPLED = {**_SIMPLE, **_NORMS, **_NORM_GRADS, **_OTHER, **_SPECIAL, **_LINALG, **_ACTIVATIONS}


def _region(name, in_types, body):
    g = Graph(name)
    xs = [g.add_input(f"a{i}", t) for i, t in enumerate(in_types)]
    for i, v in enumerate(body(Builder(g), *xs)):
        g.add_output(f"r{i}", v)
    return g


def _control(op):
    """(input types, params) of a region op: regions built here."""
    v2 = _t(2)
    if op == "cond":
        branches = tuple(_region(f"b{k}", [v2], lambda b, x, f=f: [b.add(f, x)])
                         for k, f in enumerate(("neg", "exp")))
        return [_t(dtype=I32), v2], {"branches": branches}
    if op == "while":
        cond = _region("cond", [v2], lambda b, x: [
            b.add("lt", b.add("reduce_sum", x, axes=(0,)), b.constant(np.float32(10.0)))])
        body = _region("body", [v2],
                       lambda b, x: [b.add("add", x, b.constant(np.ones(2, np.float32)))])
        return [v2], {"cond": cond, "body": body, "n_cond_consts": 0, "n_body_consts": 0}
    if op == "scan":
        body = _region("body", [v2, v2], lambda b, c, x: [b.add("add", c, x), b.add("mul", c, x)])
        return [v2, _t(3, 2)], {"body": body, "length": 3, "reverse": False, "num_consts": 0,
                                "num_carry": 1}
    if op == "custom_vjp":
        primal = _region("primal", [v2], lambda b, x: [b.add("mul", x, x)])
        return [v2], {"primal": primal, "rule": 0, "name": "square"}
    if op == "remat":  # jax.checkpoint: outputs, then what the policy saves
        body = _region("body", [v2], lambda b, x: [b.add("sin", b.add("mul", x, x)),
                                                   b.add("mul", x, x)])
        return [v2], {"body": body, "num_out": 1, "policy": "save_only_these_names"}
    raise KeyError(op)


CONTROL = ("cond", "while", "scan", "custom_vjp", "remat")


def sample(op: str) -> Graph:
    """A graph computing ``op`` once on its inputs (a constant is added to an input; a
    zero-input op's result is returned beside an input, so every program has one)."""
    g = Graph(f"sample_{op}")
    b = Builder(g)
    if op == "constant":
        x = g.add_input("x", _t(2, 3))
        g.add_output("y", b.add("add", x, b.constant(np.ones((2, 3), np.float32))))
        return g
    if op == "dim_size":  # the runtime size of a flexible input's dim (docs/flexible.md)
        x = g.add_input("x", TensorType((Dyn("b", (1, 8)), 3), DType.f32))
        g.add_output("y", b.add("dim_size", dim="3*b + 1"))
        g.add_output("x", x)
        return g
    in_types, params = _control(op) if op in CONTROL else SAMPLED[op]
    xs = [g.add_input(f"x{i}", t) for i, t in enumerate(in_types)] or [g.add_input("x", _t(2))]
    node = g.add_node(op, xs if in_types else [], params)
    for i, v in enumerate(node.outputs):
        g.add_output(f"y{i}", v)
    if not in_types:
        g.add_output("x", xs[0])
    return g


def sampled_ops():
    return sorted(set(SAMPLED) | set(CONTROL) | {"constant", "dim_size"})
