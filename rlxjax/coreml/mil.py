"""Walking a MIL program (``Model_pb2.Model`` holding an ``mlProgram``): the one place that
knows how functions, block specialisations and nested (``cond`` / ``while_loop``) blocks
hang together, which MIL op types are impure, and what an op's bool flag argument says
(``bool_flag``: the matmul transpose folding and the cost model read ``transpose_x`` so).

Every reader of a protobuf program goes through here: ``Compiled.mil_ops`` and
``op_histogram`` (api.py), ``rlxjax inspect`` (inspect_package.py), the cost model
(coreml/cost.py), MIL-level CSE (coreml/mil_cse.py), and the reference interpreter for its
function's top block (coreml/interpreter/interpreter.py decodes the blocks itself).

``walk(root)`` visits ops in program order, an op before the ops of its nested blocks
(pre-order), and tells for each op the block holding it, its index there, its block depth
(0 in a function's top block) and the enclosing control op's site.
"""
from __future__ import annotations

from typing import Iterator, NamedTuple, Optional

from coremltools.proto import MIL_pb2, Model_pb2

#: MIL op types with side effects (Core ML states): never merged, reordered or folded.
STATE_OP_TYPES = frozenset({"read_state", "write_state", "coreml_update_state"})
#: MIL op types starting with this draw fresh random values on every execution.
RANDOM_OP_PREFIX = "random_"


def is_impure_type(op_type: str) -> bool:
    """True for MIL op types whose result is not a function of their inputs alone
    (state reads/writes, random draws)."""
    return op_type in STATE_OP_TYPES or op_type.startswith(RANDOM_OP_PREFIX)


def is_pure(op) -> bool:
    """A MIL operation that computes the same values from the same inputs and does
    nothing else: neither impure (see :func:`is_impure_type`) nor carrying nested blocks
    (control flow is treated as opaque)."""
    return not op.blocks and not is_impure_type(op.type)


class OpSite(NamedTuple):
    """Where ``walk`` found an operation."""

    op: MIL_pb2.Operation
    block: MIL_pb2.Block        # the block whose ``operations`` hold it
    index: int                  # its position in ``block.operations``
    depth: int                  # 0 in a function's top block, +1 per enclosing control op
    parent: Optional["OpSite"]  # the control op owning ``block`` (None at depth 0)


def function_block(spec, function: str = "main") -> MIL_pb2.Block:
    """The top block of ``function`` for its own opset."""
    fn = spec.mlProgram.functions[function]
    return fn.block_specializations[fn.opset]


def top_blocks(root) -> Iterator[MIL_pb2.Block]:
    """The top blocks under ``root``: every block specialisation of every function of a
    Model, of one Function, or the Block itself."""
    if isinstance(root, Model_pb2.Model):
        if root.WhichOneof("Type") != "mlProgram":
            return
        for fn in root.mlProgram.functions.values():
            yield from fn.block_specializations.values()
    elif isinstance(root, MIL_pb2.Function):
        yield from root.block_specializations.values()
    elif isinstance(root, MIL_pb2.Block):
        yield root
    else:
        raise TypeError(f"not a MIL Model, Function or Block: {type(root).__name__}")


def _walk_block(block, depth, parent) -> Iterator[OpSite]:
    for i, op in enumerate(block.operations):
        site = OpSite(op, block, i, depth, parent)
        yield site
        for sub in op.blocks:
            yield from _walk_block(sub, depth + 1, site)


def walk(root) -> Iterator[OpSite]:
    """Every operation under ``root`` (a Model, Function or Block), nested blocks
    included, in pre-order. Do not add or remove operations while walking."""
    for block in top_blocks(root):
        yield from _walk_block(block, 0, None)


def operations(root) -> Iterator[MIL_pb2.Operation]:
    """The operations of :func:`walk`, without their sites."""
    return (site.op for site in walk(root))


def blocks(root) -> Iterator[MIL_pb2.Block]:
    """Every block under ``root``, top blocks and nested ones (pre-order), those without
    operations too."""
    for top in top_blocks(root):
        stack = [top]
        while stack:
            blk = stack.pop()
            yield blk
            for op in reversed(blk.operations):
                stack.extend(reversed(op.blocks))


def bool_flag(op, param: str, named) -> bool:
    """The bool flag argument ``param`` of MIL operation ``op`` (a matmul's
    ``transpose_x``): an immediate value, or a name whose value ``named(name)`` gives (the
    bool a const holds; None when unknown); False when the argument is absent or unknown."""
    arg = op.inputs.get(param)
    if arg is None or not arg.arguments:
        return False
    b = arg.arguments[0]
    if b.WhichOneof("binding") == "name":
        return bool(named(b.name))
    t = b.value.immediateValue.tensor
    return bool(t.bools.values[0]) if t.bools.values else False
