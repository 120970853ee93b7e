"""The RLX graph prints (ir/printer.py) and parses back (ir/parser.py) exactly: the graphs
of the model zoo, of control flow and of random programs survive the round trip with the
same ops, parameters, types, names, regions, constants and source lines, and compile to
the same ML Program. Graphs stated as text compile and run like the JAX they spell."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import rlxjax
from fuzz_interp import make_inputs, run
from fuzz_programs import programs
from helpers import assert_tree_close, examples
from models import workloads
from rlxjax.api import Lowered
from rlxjax.frontend import Traced
from rlxjax.ir import DType, Dyn, Graph, TensorType, format_graph, verify
from rlxjax.ir.builder import Builder
from rlxjax.ir.parser import IRParseError, parse_graph


def assert_same_graph(a: Graph, b: Graph, where: str = "graph") -> None:
    """Structural equality: names, value ids and types, ops, params, sources, regions."""
    assert a.name == b.name, where
    sig = lambda vs: [(n, v.id, v.type) for n, v in vs]  # noqa: E731
    assert sig(a.inputs) == sig(b.inputs), where
    assert sig(a.outputs) == sig(b.outputs), where
    assert len(a.nodes) == len(b.nodes), where
    for k, (m, n) in enumerate(zip(a.nodes, b.nodes)):
        at = f"{where} node {k} ({m.op})"
        assert (m.op, m.params, m.source) == (n.op, n.params, n.source), at
        assert [v.id for v in m.inputs] == [v.id for v in n.inputs], at
        assert [(v.id, v.type) for v in m.outputs] == [(v.id, v.type) for v in n.outputs], at
        assert list(m.regions) == list(n.regions), at
        for r, s in zip(m.subgraphs(), n.subgraphs()):
            assert_same_graph(r, s, f"{at} region {r.name}")


def round_trip(g: Graph) -> Graph:
    text = format_graph(g, sources=True)
    back = verify(parse_graph(text))
    assert_same_graph(g, back)
    assert format_graph(back, sources=True) == text
    return back


def same_program(lowered: Lowered) -> None:
    """The parsed graph lowers to the very same ML Program as the original."""
    t = lowered._traced
    back = round_trip(t.graph)
    twin = Lowered(Traced(back, t.in_tree, t.out_tree, t.in_types, t.custom_rules),
                   "iOS17", lowered.precision, "reference", states=lowered.states)
    a, b = lowered.compile().spec, twin.compile().spec
    assert a.SerializeToString(deterministic=True) == b.SerializeToString(deterministic=True)


# -- every graph of the model zoo, forward, gradient and training step ------------------------
WORKLOADS = workloads()


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_model_graphs_round_trip(name):
    loss, params, batch = WORKLOADS[name]
    has_aux = name == "batchnorm_train"
    round_trip(rlxjax.coreml_jit(loss).lower(params, *batch).graph)
    same_program(rlxjax.coreml_value_and_grad(loss, has_aux=has_aux).lower(params, *batch))


def test_training_step_graph_round_trips():
    import optax

    loss, params, batch = WORKLOADS["mlp_layernorm"]
    step = rlxjax.coreml_train_step(loss, optax.adam(1e-3))
    state = step.init(params)
    same_program(step.lower(state.params, state.opt_state, *batch))


# -- control flow: regions, nested regions, custom rules ------------------------------------
@jax.custom_jvp
def _safe_log(x):
    return jnp.log(x)


_safe_log.defjvp(lambda p, t: (jnp.log(p[0]), t[0] / jnp.maximum(p[0], 1e-3)))


def _control(w, xs):
    def step(c, x):
        c = jax.lax.switch(jnp.argmax(x) % 3, [lambda c: _safe_log(c * c + 1.0),
                                               lambda c: jax.nn.relu(c - x),
                                               lambda c: jnp.tanh(c) * 2.0], c)
        return c @ w, c.sum()

    c, ys = jax.lax.scan(step, jnp.ones(3), xs)
    n = jax.lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 0.5), (0, c))
    return n[1].sum() + ys.sum()


def test_control_flow_graphs_round_trip():
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((3, 3)) * 0.4).astype(np.float32)
    xs = rng.standard_normal((4, 3)).astype(np.float32)
    fwd = rlxjax.coreml_jit(_control).lower(w, xs)
    assert {"scan", "cond", "while", "custom_vjp"} <= _ops(fwd.graph)
    same_program(fwd)
    grad = rlxjax.coreml_grad(lambda w, xs: jax.lax.scan(
        lambda c, x: (jax.lax.cond(x.sum() > 0, lambda c: _safe_log(c * c + 1.0),
                                   jax.nn.relu, c) @ w, None), jnp.ones(3), xs)[0].sum())
    same_program(grad.lower(w, xs))


def _ops(g: Graph) -> set:
    out = {n.op for n in g.nodes}
    for n in g.nodes:
        for sub in n.subgraphs():
            out |= _ops(sub)
    return out


# -- random programs (tests/fuzz_programs.py) ------------------------------------------------
@settings(max_examples=examples(12), derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
@given(programs())
def test_random_program_graphs_round_trip(case):
    prog, _ = case
    args = make_inputs(prog)
    fun = lambda *a: run(prog, a)  # noqa: E731
    round_trip(rlxjax.coreml_jit(fun).lower(*args).graph)
    if np.asarray(args[0]).dtype == np.float32:
        loss = lambda *a: sum(jnp.sum(o) for o in jax.tree_util.tree_leaves(fun(*a))  # noqa
                              if jnp.issubdtype(o.dtype, jnp.floating))
        if isinstance(loss(*args), jax.Array):
            round_trip(rlxjax.coreml_grad(loss).lower(*args).graph)


# -- exactness of values and names -----------------------------------------------------------
def test_constants_and_names_print_exactly():
    g = Graph("odd name, with = signs")
    bld = Builder(g)
    x = g.add_input('x "quoted" #1', TensorType((3,), DType.f32))
    nan = np.array([np.nan, -np.nan, 1.0], np.float32).view(np.uint32)
    nan[0] |= 0x1234  # a NaN payload survives (as bytes)
    consts = [np.float32(0.1), np.float16(65504), np.array([-0.0, np.inf, -np.inf], np.float32),
              nan.view(np.float32), np.arange(40, dtype=np.float32) / 7,
              np.array([True, False]), np.array([-(2 ** 31), 2 ** 31 - 1], np.int32),
              np.array([[1, 2], [3, 4]], np.int8), np.array([255, 0], np.uint8)]
    for c in consts:
        bld.constant(c)
    y = bld.add("mul", x, bld.constant(np.float32(1e-30)))
    with bld.at('file "with quotes".py:3 (f)'):
        y = bld.add("reduce_sum", bld.add("convert", y, dtype=DType.f16), axes=(0,))
    g.add_output("out = y", y)
    back = round_trip(verify(g))
    for a, b in zip(g.nodes, back.nodes):
        if a.op == "constant":
            va, vb = a.params["value"], b.params["value"]
            assert va.dtype == vb.dtype and va.tobytes() == vb.tobytes()
    assert "b64:" in format_graph(g) and "f32[](0.1)" in format_graph(g)


def test_dynamic_dims_and_plain_params_round_trip():
    g = Graph("dyn")
    b = Builder(g)
    x = g.add_input("x", TensorType((Dyn("batch"), 4), DType.f32))
    y = b.add("transpose", x, perm=(1, 0))
    g.add_output("y", b.add("round", y, method="half_even"))
    round_trip(verify(g))


def test_params_hold_plain_data_only():
    g = Graph()
    b = Builder(g)
    x = g.add_input("x", TensorType((2,), DType.f32))
    with pytest.raises(TypeError, match="plain data"):
        b.add("exp", x, fn=lambda: 0)
    with pytest.raises(TypeError, match="plain data"):
        b.add("exp", x, region=Graph("r"))


# -- graphs stated as text ---------------------------------------------------------------------
def compile_text(text: str):
    g = verify(parse_graph(text))
    n_in, n_out = len(g.inputs), len(g.outputs)
    traced = Traced(g, jax.tree_util.tree_structure(tuple(range(n_in))),
                    jax.tree_util.tree_structure(tuple(range(n_out))),
                    [v.type for _, v in g.inputs])
    return Lowered(traced, "iOS17", "fp32", "reference").compile()


def test_a_graph_stated_as_text_runs_like_jax():
    prog = compile_text("""
        graph f(
            %0: f32[2,3]  # x
            %1: f32[3]  # b
        ) {
            %2: f32[] = constant() {value=f32[](0.5)}
            %3: f32[2,3] = broadcast_in_dim(%1) {dims=(1,), shape=(2, 3)}
            %4: f32[2,3] = add(%0, %3)
            %5: f32[2,3] = mul(%4, %2)
            %6: f32[2,3] = tanh(%5)
            %7: f32[2] = reduce_sum(%6) {axes=(1,)}
            %8: f32[3] = reduce_max(%0) {axes=(0,)}
            return out=%7, peak=%8
        }""")
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 3 - 1
    b = np.array([0.5, -1.0, 2.0], np.float32)
    assert_tree_close(prog(x, b), (jnp.tanh((x + b) * 0.5).sum(1), x.max(0)))


def test_control_flow_stated_as_text_runs_like_jax():
    # switch(i, [2x, x*x]) then a 3-step scan accumulating the carry into its output
    prog = compile_text("""
        graph g(
            %0: i32[]  # i
            %1: f32[2]  # x
        ) {
            %2: f32[2] = cond(%0, %1)
                branches[0]: graph twice(
                    %0: f32[2]  # x
                ) {
                    %1: f32[2] = add(%0, %0)
                    return out=%1
                }
                branches[1]: graph square(
                    %0: f32[2]  # x
                ) {
                    %1: f32[2] = mul(%0, %0)
                    return out=%1
                }
            %3: f32[2], %4: f32[3,2] = scan(%2) {length=3, num_carry=1, num_consts=0, reverse=False}
                body: graph step(
                    %0: f32[2]  # carry
                ) {
                    %1: f32[] = constant() {value=f32[](1.5)}
                    %2: f32[2] = mul(%0, %1)
                    return carry=%2, y=%0
                }
            return out=%3, ys=%4
        }""")
    x = np.array([1.0, -2.0], np.float32)
    for i in (0, 1, 7):
        c = jax.lax.switch(i, [lambda v: v + v, lambda v: v * v], x)
        want = jax.lax.scan(lambda c, _: (c * 1.5, c), c, None, length=3)
        assert_tree_close(prog(np.int32(i), x), want)


@pytest.mark.parametrize("text, message", [
    ("graph f(\n) {\n    return\n", "ends inside a graph"),
    ("graph f(\n    %0: f32[2]  # x\n) {\n    %1: f32[3] = exp(%0)\n    return y=%1\n}",
     "inference gives"),
    ("graph f(\n    %0: f32[2]  # x\n) {\n    %1: f32[2] = exp(%7)\n    return y=%1\n}",
     "undefined value"),
    ("graph f(\n    %0: f32[2]  # x\n) {\n    %1: f32[2] = exp(%0) {y=@}\n    return y=%1\n}",
     "expected a value"),
    ("graph f(\n    %0: f32[2]  # x\n) {\n    %1: f32[] = reduce_sum(%0) {axes=(3,)}\n"
     "    return y=%1\n}", "bad axes"),
])
def test_malformed_text_is_an_error_naming_the_line(text, message):
    with pytest.raises(IRParseError, match=f"line [0-9]+: .*{message}|{message}"):
        parse_graph(text)
