"""The op records (rlxjax/ir/ops.py, one ``OpDef`` per RLX op) are complete:

- every op has a parameter schema, a known family and effect, and its region params named;
  a node whose params do not fit is refused when built, and by the verifier with the op's
  name and the node's source line; the VJP rules and lowerings read only declared params;
- every op has a lowering for every registered format (``ir.ops.LOWERINGS``: Core ML's and
  Core AI's, both held in the record), or a decomposition (rlxjax/transforms/legalize/)
  into ops the format lowers, or the format names it as one that never reaches it;
- every op lowers on every Core ML deployment target its lowering claims (every target, for
  an op decomposed into ops Core ML lowers): a node of each op
  (tests/op_samples.py builds one for EVERY op, none is taken on trust) is lowered and
  loaded back through coremltools' MIL loader on each claimed target;
- every op has a VJP rule or its record says it is not differentiable (and then it has no
  rule); every backward op a record declares (``OpDef.backward``) is a registered op, and
  every hand-written backward op (the *_grad families) is declared by exactly one record;
- every MIL op those lowerings emit has reference semantics that are cross-checked against
  coremltools' value_inference, or a named substitute test: the list and the check live in
  tests/coreml/interpreter/test_emitted_ops.py, and here each op's lowering is tied to it.
"""
from __future__ import annotations

import inspect
import os
import re
import sys
import tempfile

import pytest

from op_samples import sample, sampled_ops
from rlxjax.coreml.lower import lower_graph
from rlxjax.coreml.registry import claimed_targets
from rlxjax.coreml.targets import TARGETS, get_target
from rlxjax.coreml.validate import validate_model
from rlxjax.ir import DType, Graph, GraphVerificationError, Params, TensorType, verify
from rlxjax.ir.builder import Builder
from rlxjax.ir.ops import EFFECTS, FAMILIES, LOWERINGS, OPS, IRTypeError
from rlxjax.ir.schema import Param
from rlxjax.transforms.vjp.registry import refusal

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "coreml", "interpreter"))
import test_emitted_ops as emitted  # noqa: E402  (the cross-checked MIL op list)

ALL_OPS = sorted(OPS)


def test_every_op_has_a_record_with_a_schema():
    assert "copy" not in OPS  # never emitted, no lowering: not an op
    for name, d in OPS.items():
        assert d.name == name and d.family in FAMILIES, name
        assert isinstance(d.params, dict) and all(isinstance(p, Param)
                                                  for p in d.params.values()), name
        assert d.effect in EFFECTS, name
        assert not set(d.regions) & set(d.params), name  # regions live in Node.regions
        assert bool(d.regions) == (d.family == "control"), name
    assert {n for n, d in OPS.items() if d.effect == "random"} == {
        "bernoulli", "random_uniform", "random_normal"}
    assert {n for n, d in OPS.items() if d.effect == "state"} == set()
    assert set(FAMILIES) == {d.family for d in OPS.values()}


def test_params_that_do_not_fit_the_schema_are_refused_where_the_node_is_made():
    g = Graph()
    b = Builder(g)
    x = g.add_input("x", TensorType((2, 3), DType.f32))
    with pytest.raises(IRTypeError, match=r"reduce_sum: unknown parameter 'axis'.*"
                                         r"missing parameter 'axes'"):
        b.add("reduce_sum", x, axis=(1,))
    with pytest.raises(IRTypeError, match=r"'y' must be int, got float"):
        b.add("integer_pow", x, y=2.0)
    with pytest.raises(IRTypeError, match=r"'method' must be one of"):
        b.add("round", x, method="nearest")
    with pytest.raises(IRTypeError, match=r"cumsum: parameter 'reverse' must be bool"):
        b.add("cumsum", x, axis=1, reverse=0)


def test_the_verifier_names_the_op_and_the_source_line():
    g = Graph()
    x = g.add_input("x", TensorType((2, 3), DType.f32))
    node = g.add_node("reduce_sum", [x], {"axes": (1,)}, source="model.py:12 (loss)")
    g.add_output("y", node.output)
    verify(g)
    node.params = Params({"axes": (1,), "keepdims": True})  # a pass wrote a bad param
    with pytest.raises(GraphVerificationError,
                       match=r"reduce_sum: unknown parameter 'keepdims'.*model\.py:12"):
        verify(g)
    node.params = Params({})
    with pytest.raises(GraphVerificationError, match=r"missing parameter 'axes'.*model\.py:12"):
        verify(g)


def test_every_op_has_a_sample():
    assert sampled_ops() == ALL_OPS


_PARAM_READ = re.compile(r'\b(?:params|p|node\.params|n\.params)(?:\[|\.get\()"(\w+)"')


def test_lowerings_and_vjp_rules_read_only_declared_params():
    """A static scan of each registered function (not of the helpers it calls): every
    ``params["k"]`` / ``p.get("k")`` it reads is in the schema of an op it is registered
    for, so a misspelled key cannot wait for the first model that reaches it."""
    by_fn = {}
    for name, d in OPS.items():
        for layer in ("vjp", "decompose") + tuple(LOWERINGS.values()):
            fn = d.impl(layer)
            if fn is not None:
                by_fn.setdefault((layer, fn), set()).add(name)
    assert len(by_fn) > 100
    for (layer, fn), ops in by_fn.items():
        read = set(_PARAM_READ.findall(inspect.getsource(fn)))
        declared = set().union(*(OPS[o].params for o in ops))
        assert read <= declared, f"{layer} of {sorted(ops)} reads undeclared {read - declared}"


def _mil_op_types(model):
    out = set()

    def walk(block):
        for op in block.operations:
            out.add(op.type)
            for b in op.blocks:
                walk(b)

    for fn in model.mlProgram.functions.values():
        for block in fn.block_specializations.values():
            walk(block)
    return out


@pytest.fixture(scope="module")
def cross_checked():
    """(MIL ops the lowering can emit, MIL ops with checked reference semantics)."""
    covered = (emitted.CHECKED | set(emitted.OPS_WITHOUT_VALUE_INFERENCE)
               | set(emitted.CHECKED_OTHERWISE))
    return emitted.emitted_ops(), covered


@pytest.mark.parametrize("op", ALL_OPS)
def test_op_lowers_on_every_claimed_target(op, cross_checked):
    claimed = claimed_targets(op)
    if not claimed:  # decomposed for Core ML (transforms/legalize/): on every target
        assert OPS[op].impl("decompose") is not None, f"{op} has no lowering"
        claimed = tuple(TARGETS)
    assert claimed == tuple(TARGETS)[len(TARGETS) - len(claimed):], "claims: a contiguous range"
    g = sample(op)
    can_emit, covered = cross_checked
    for target in claimed:
        with tempfile.TemporaryDirectory() as tmp:
            model, _, _ = lower_graph(g, get_target(target), "fp32", tmp)
            validate_model(model, tmp)
        mil = _mil_op_types(model)
        assert not mil - can_emit, (f"{op} on {target} emits {sorted(mil - can_emit)}, which "
                                    "tests/coreml/interpreter/test_emitted_ops.py's static scan misses")
        assert not mil - covered, (f"{op} on {target} emits {sorted(mil - covered)} without "
                                   "cross-checked reference semantics")


def _format_lowering():
    """format -> (does it lower the node natively, the ops it never lowers, by reason)."""
    from rlxjax.coreai import ops as _coreai_ops  # noqa: F401  (registers the rules)
    from rlxjax.coreai.lower import NOT_LOWERED, native
    from rlxjax.coreml.registry import LOWERINGS as COREML

    return {"coreml": (lambda n: n.op in COREML, {}), "coreai": (native, NOT_LOWERED)}


@pytest.mark.parametrize("fmt", sorted(LOWERINGS))
def test_every_op_lowers_on_every_format_or_is_decomposed_or_refused_by_name(fmt):
    """Each registered format (``ir.ops.LOWERINGS``) holds its lowering in the op record;
    an op it has none for is decomposed by the legalize stage into ops it does lower (its
    sample, tests/op_samples.py, legalized), or is one the format says never reaches it."""
    from rlxjax.transforms.legalize import legalize

    native, never = _format_lowering()[fmt]
    assert set(never) <= set(OPS)
    for op in ALL_OPS:
        d = OPS[op]
        if op in never:
            assert d.lowering(fmt) is None, f"{op}: lowered on {fmt} yet listed as never"
            continue
        if d.lowering(fmt) is not None:
            continue
        assert d.impl("decompose") is not None, f"{op}: neither lowered nor decomposed on {fmt}"
        g = legalize(sample(op), native)
        left = {n.op for n in g.nodes if not native(n)}
        assert not left, f"{op} decomposed on {fmt} leaves {sorted(left)} it does not lower"


def test_every_op_has_a_vjp_or_is_marked_non_differentiable():
    for name, d in OPS.items():
        rule = d.impl("vjp")
        if d.differentiable:
            assert rule is not None, f"{name} is differentiable but has no VJP rule"
        else:
            assert rule is None, f"{name} is marked non-differentiable but has a VJP rule"
    # refusals are explicit, with their reason, and only where rlxjax means to refuse
    refused = {n for n in OPS if OPS[n].impl("vjp") and refusal(n)}
    assert refused == ({n for n, d in OPS.items() if d.family in ("norm_grad", "activation_grad",
                                                        "attention_grad")}
                       | {"while"}
                       | {"nextafter", "igamma_grad_a", "zeta"}  # as JAX: no derivative
                       | {"qr"})  # differentiated by JAX's rule (custom_vjp), not its own


def test_every_declared_backward_op_is_a_registered_op():
    declared = {}
    for name, d in OPS.items():
        assert isinstance(d.backward, tuple), name
        for op in d.backward:
            assert op in OPS, f"{name} declares the backward op {op!r}, which is not an op"
            assert op not in declared, f"{op} is declared by both {declared[op]} and {name}"
            assert d.differentiable and d.impl("vjp") is not None, name
            declared[op] = name
    # the VJP rules take the backward op's name from the record: every hand-written one
    # is declared where the op whose gradient it is is defined
    assert set(declared) == {n for n, d in OPS.items()
                             if d.family in ("norm_grad", "activation_grad", "attention_grad")}


def test_cse_merges_only_what_the_record_says_is_pure_and_region_free():
    from op_samples import _control
    from rlxjax.transforms.cse import cse

    g = Graph()
    bld = Builder(g)
    x = g.add_input("x", TensorType((2,), DType.f32))
    i = g.add_input("i", TensorType((), DType.i32))
    p = dict(shape=(2,), dtype=DType.f32, prob=0.5, seed=-1)
    a, b = bld.add("bernoulli", **p), bld.add("bernoulli", **p)  # effect "random"
    _, cond = _control("cond")
    c1, c2 = (g.add_node("cond", [i, x], cond).output for _ in range(2))  # regions
    g.add_output("y", bld.add("add", bld.add("add", a, b), bld.add("add", c1, c2)))
    assert cse(g) == 0
    s1, s2 = (bld.add("exp", x), bld.add("exp", x))
    g.add_output("z", bld.add("add", s1, s2))
    assert cse(g) == 1
