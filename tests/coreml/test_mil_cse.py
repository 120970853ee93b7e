"""The MIL walk (coreml/mil.py) and MIL-level CSE (coreml/mil_cse.py) on hand-written
protobuf programs: block scoping, impure ops, block interfaces, several functions.
(tests/transforms/test_passes.py checks the pass end to end on compiled programs.)"""
from __future__ import annotations

from coremltools.proto import MIL_pb2, Model_pb2

from rlxjax.coreml.mil import (STATE_OP_TYPES, blocks, function_block, is_impure_type,
                               is_pure, operations, walk)
from rlxjax.coreml.mil_cse import mil_cse


def _op(type_, out, *ins, blocks_=()):
    op = MIL_pb2.Operation(type=type_)
    for i, name in enumerate(ins):
        op.inputs["x" if i == 0 else "y"].arguments.add(name=name)
    if out is not None:
        op.outputs.add(name=out)
    for blk in blocks_:
        op.blocks.add().CopyFrom(blk)
    return op


def _block(ops, outputs, inputs=()):
    blk = MIL_pb2.Block(outputs=list(outputs), operations=ops)
    for name in inputs:
        blk.inputs.add(name=name)
    return blk


def _model(**functions):
    m = Model_pb2.Model(specificationVersion=8)
    for name, block in functions.items():
        fn = m.mlProgram.functions[name]
        fn.opset = "CoreML7"
        fn.block_specializations["CoreML7"].CopyFrom(block)
    return m


def _nested():
    then = _block([_op("exp", "e2", "a"), _op("sin", "s2", "a"), _op("mul", "t", "s2", "e2")],
                  ["t"])
    other = _block([_op("exp", "e3", "a"), _op("identity", "o", "e3")], ["o"])
    top = _block([_op("exp", "e1", "a"), _op("cond", "c", "p", blocks_=(then, other)),
                  _op("sin", "s1", "a"), _op("add", "r", "c", "s1")], ["r"])
    return _model(main=top)


def test_walk_is_pre_order_with_depth_and_parent():
    sites = list(walk(_nested()))
    assert [s.op.type for s in sites] == ["exp", "cond", "exp", "sin", "mul", "exp",
                                          "identity", "sin", "add"]
    assert [s.depth for s in sites] == [0, 0, 1, 1, 1, 1, 1, 0, 0]
    assert [s.index for s in sites] == [0, 1, 0, 1, 2, 0, 1, 2, 3]
    assert all(s.parent.op.type == "cond" for s in sites if s.depth)
    assert sites[4].block.outputs == ["t"] and sites[6].block.outputs == ["o"]


def test_roots_blocks_and_operations_agree():
    m = _nested()
    top = function_block(m)
    fn = m.mlProgram.functions["main"]
    assert [o.type for o in operations(m)] == [o.type for o in operations(fn)] == \
        [o.type for o in operations(top)]
    assert [list(b.outputs) for b in blocks(m)] == [["r"], ["t"], ["o"]]


def test_purity():
    assert STATE_OP_TYPES >= {"read_state", "write_state", "coreml_update_state"}
    assert is_impure_type("random_bernoulli") and is_impure_type("write_state")
    assert not is_impure_type("add") and not is_impure_type("const")
    assert is_pure(_op("add", "z", "x", "y"))
    assert not is_pure(_op("read_state", "z", "s"))
    assert not is_pure(_op("cond", "z", "p", blocks_=(_block([], []),)))


def test_cse_scopes_nested_blocks():
    m = _nested()
    assert mil_cse(m) == 2
    ops = [(s.op.type, [o.name for o in s.op.outputs], s.depth) for s in walk(m)]
    # e2 and e3 are e1 again (computed before the cond); s2 stays (s1 comes after the cond)
    assert ops == [("exp", ["e1"], 0), ("cond", ["c"], 0), ("sin", ["s2"], 1),
                   ("mul", ["t"], 1), ("identity", ["o"], 1), ("sin", ["s1"], 0),
                   ("add", ["r"], 0)]
    then, other = m.mlProgram.functions["main"].block_specializations["CoreML7"] \
        .operations[1].blocks
    assert list(then.operations[1].inputs["y"].arguments)[0].name == "e1"
    assert list(other.operations[0].inputs["x"].arguments)[0].name == "e1"


def test_cse_keeps_impure_ops_and_block_interface():
    top = _block([_op("random_bernoulli", "r1", "a"), _op("random_bernoulli", "r2", "a"),
                  _op("read_state", "s1", "st"), _op("read_state", "s2", "st"),
                  _op("exp", "e1", "a"), _op("exp", "out", "a"),
                  _op("add", "z", "e1", "e1"), _op("add", "z2", "e1", "e1")],
                 ["out", "z2", "z"])
    m = _model(main=top)
    assert mil_cse(m) == 0  # every duplicate is impure or a block output
    assert len(function_block(m).operations) == 8


def test_cse_renames_outputs_of_blocks_that_read_an_outer_duplicate():
    body = _block([], ["e2"])  # passes the outer value through (no op of its own)
    top = _block([_op("exp", "e1", "a"), _op("exp", "e2", "a"),
                  _op("cond", "c", "p", blocks_=(body, body)), _op("neg", "n", "e2")], ["n"])
    m = _model(main=top)
    assert mil_cse(m) == 1
    blk = function_block(m)
    assert [list(b.outputs) for b in blk.operations[1].blocks] == [["e1"], ["e1"]]
    assert blk.operations[2].inputs["x"].arguments[0].name == "e1"


def test_cse_works_per_function():
    m = _model(main=_block([_op("exp", "e1", "a"), _op("exp", "e2", "a"),
                            _op("add", "z", "e1", "e2")], ["z"]),
               other=_block([_op("exp", "e2", "a"), _op("neg", "z", "e2")], ["z"]))
    assert mil_cse(m) == 1
    other = m.mlProgram.functions["other"].block_specializations["CoreML7"]
    assert [o.outputs[0].name for o in other.operations] == ["e2", "z"]
    assert other.operations[1].inputs["x"].arguments[0].name == "e2"  # not renamed
