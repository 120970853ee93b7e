"""Every MIL op type the Core ML lowering can emit is cross-checked against coremltools'
value_inference (tests/coreml/interpreter/test_reference_*.py), or listed with the reason it cannot be
and the test that checks it instead.

The emitted set is found statically: every ``b.op("type", ...)`` / ``Ew.unary|binary|
compare("type", ...)`` / ``op_with_blocks("type", ...)`` / ``_Op("type", ...)`` call in
rlxjax/coreml with a literal type, plus the call sites whose type is computed, each resolved
here from the tables it reads (a new computed site fails the test until it is added to
``_computed_sites()``). A dynamic scan of compiled programs (a small MLP workload, every norm, pooling,
argmax, cumsum, gather, sort, matmul; forward in fp32 and fp16 and gradients) must find
nothing outside the static set, which checks the scanner itself.
"""
from __future__ import annotations

import ast
import os

import jax
import pytest

import rlxjax
from _crosscheck import CHECKED
from rlxjax.coreml.interpreter.ops import MIL_OP_IMPLS
from test_reference_ops import OPS_WITHOUT_VALUE_INFERENCE
import test_reference_shape_ops  # noqa: F401  (fills CHECKED with its cross-checked ops)
import test_reference_constexpr  # noqa: F401  (fills CHECKED: weights decompressed at load)

COREML = os.path.join(os.path.dirname(rlxjax.__file__), "coreml")
EMITTERS = {"op", "unary", "binary", "compare", "op_with_blocks", "_Op", "constexpr"}

#: emitted ops that are not single-op value computations, so coremltools' value_inference
#: has nothing to say about them: reason and the tests that check them instead.
CHECKED_OTHERWISE = {
    "cond": "control flow (nested blocks; value_inference does not evaluate blocks): "
            "tests/frontend/test_control_flow.py runs lax.cond / lax.switch programs on the "
            "reference backend against JAX",
    "while_loop": "control flow (nested blocks): tests/frontend/test_control_flow.py runs "
                  "lax.while_loop / fori_loop / scan programs against JAX",
    "read_state": "reads a Core ML state buffer (iOS18), no value to infer from constants: "
                  "tests/training/test_train_mlstate.py trains with state buffers against optax",
    "write_state": "writes a Core ML state buffer (no output): "
                   "tests/training/test_train_mlstate.py",
}


def _computed_sites():
    """(module file, enclosing function) -> set of op types that site can emit."""
    from rlxjax.coreml.registry import LOWERINGS
    from rlxjax.coreml import flexible
    from rlxjax.coreml.rules import elementwise as ew, reduction

    def registered(fn):
        return {op for op, f in LOWERINGS.items() if f is fn}

    compare = {ew._DIRECT_BINARY[c] for c in ew._COMPARE}
    return {
        ("rules/elementwise.py", "_direct_unary"): set(ew._DIRECT_UNARY.values()),
        ("rules/elementwise.py", "_direct_binary"):
            {m for r, m in ew._DIRECT_BINARY.items() if r not in ew._COMPARE},
        ("rules/elementwise.py", "_compare"): compare,
        ("rules/elementwise.py", "_logical"): set(ew._LOGICAL.values()),
        ("rules/reduction.py", "_reduce"): registered(reduction._reduce),
        ("rules/reduction.py", "_arg"): {"reduce_" + op for op in registered(reduction._arg)},
        ("flexible.py", "arith"): set(flexible._ARITH.values()),  # flexible dim expressions
        ("rules/activation.py", "_reduce_keep"): {"reduce_max", "reduce_log_sum_exp",
                                                  "reduce_sum"},
    }


#: forwarding helpers whose type argument is their caller's (callers are scanned)
FORWARDERS = {("builder.py", "op"), ("builder.py", "op_with_blocks"),
              ("builder.py", "constexpr"),
              ("rules/common.py", "unary"), ("rules/common.py", "binary"),
              ("rules/common.py", "compare"), ("rules/bitwise.py", "unary"),
              ("rules/bitwise.py", "binary"), ("rules/bitwise.py", "compare")}


def _scan():
    """-> (literal op types, {(file, function): call count} of computed sites)."""
    literal, computed = set(), {}
    for folder, _, files in os.walk(COREML):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(folder, f)
            rel = os.path.relpath(path, COREML).replace(os.sep, "/")
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            stack = []

            def visit(node):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    stack.append(node.name)
                    for c in ast.iter_child_nodes(node):
                        visit(c)
                    stack.pop()
                    return
                if isinstance(node, ast.Call) and node.args:
                    fn = node.func
                    name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", None)
                    if name in EMITTERS:
                        first = node.args[0]
                        if isinstance(first, ast.Constant) and isinstance(first.value, str):
                            literal.add(first.value)
                        else:
                            key = (rel, stack[-1] if stack else "<module>")
                            computed[key] = computed.get(key, 0) + 1
                for c in ast.iter_child_nodes(node):
                    visit(c)

            visit(tree)
    return literal, computed


def emitted_ops():
    literal, computed = _scan()
    sites = _computed_sites()
    unknown = sorted(set(computed) - set(sites) - FORWARDERS)
    assert not unknown, (f"MIL op emitted with a computed type at {unknown}: add the site to "
                         "_computed_sites() in tests/coreml/interpreter/test_emitted_ops.py")
    stale = sorted(set(sites) - set(computed))
    assert not stale, f"_computed_sites() lists sites that no longer exist: {stale}"
    out = set(literal) | {"const"}
    for ops in sites.values():
        out |= ops
    return out


def test_every_emitted_op_is_cross_checked_or_listed():
    emitted = emitted_ops()
    runnable = set(MIL_OP_IMPLS) | {"cond", "while_loop"}  # the interpreter runs block ops itself
    assert not emitted - runnable, \
        f"emitted ops the reference backend cannot run: {sorted(emitted - runnable)}"
    covered = CHECKED | set(OPS_WITHOUT_VALUE_INFERENCE) | set(CHECKED_OTHERWISE)
    assert not emitted - covered, (
        f"emitted MIL ops neither cross-checked against coremltools' value_inference in "
        f"tests/coreml/interpreter nor listed with their substitute check: {sorted(emitted - covered)}")
    assert not set(CHECKED_OTHERWISE) & CHECKED, "listed as checked otherwise but cross-checked"


def _small_programs():
    """Programs covering every family, small enough to compile fast."""
    import jax.numpy as jnp
    import numpy as np

    import rlxjax.nn as rnn
    from models import workloads

    loss, params, batch = workloads()["mlp_layernorm"]
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(2, 3, 4)
    g, b4 = np.ones(4, np.float32), np.zeros(4, np.float32)

    def norms(x):
        return (rnn.layer_norm(x, g, b4) + rnn.rms_norm(x, g, b4)
                + rnn.group_norm(x, g[:3], b4[:3], num_groups=3, channel_axis=1)
                + rnn.batch_norm_train(x, g, b4, running_mean=b4, running_var=g)[0]
                + rnn.ada_layer_norm(x, x[:, :1], x[:, :1]).sum()
                + rnn.layer_norm2d(x, g[:3], b4[:3]))

    def misc(x):
        pooled = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2), (1, 1, 1), "VALID")
        return (jnp.sum(pooled) + jnp.argmax(x, axis=-1).sum() + jnp.cumsum(x, axis=1).sum()
                + jnp.where(x > 0, jnp.exp(x), jnp.tanh(x)).mean() + (x @ x[0].T).sum()
                + jnp.take(x, jnp.array([2, 0]), axis=2).sum() + jnp.sort(x, axis=-1).sum())

    # (function, args, precisions of the forward, compile the gradient too)
    return [(loss, (params, *batch), (), True), (norms, (x,), ("fp32", "fp16"), False),
            (lambda x: jnp.sum(norms(x)), (x,), (), True), (misc, (x,), ("fp32",), False),
            (lambda x: jnp.sum(misc(x)), (x,), (), True)]


# ~22 s: seven programs of every family compiled; the static scan's own tests stay in the default run
@pytest.mark.slow
def test_compiled_programs_stay_inside_the_static_set():
    emitted = emitted_ops()
    seen = set()
    for fun, args, precisions, grad in _small_programs():
        for precision in precisions:
            fwd = rlxjax.coreml_jit(fun, precision=precision,
                                    backend="reference").lower(*args).compile()
            seen |= set(fwd.op_histogram(include_const=True))
        if grad:
            g = rlxjax.coreml_grad(fun, backend="reference").lower(*args).compile()
            seen |= set(g.op_histogram(include_const=True))
    assert {"reduce_max", "real_div", "matmul"} <= seen, sorted(seen)
    assert not seen - emitted, f"the static scan missed {sorted(seen - emitted)}"
