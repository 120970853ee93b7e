"""Flexible dimensions in the RLX graph (docs/flexible.md).

A dim of a ``TensorType`` may be an ``ir.Dyn``: a symbol of the program's flexible inputs
('b') or an expression of them in JAX's syntax ('64*b', 'b + 1', 'floordiv(b, 2)').
``dim_size(dim)`` is the runtime value of such a dim as an i32 scalar (JAX's
``dim_as_value``: e.g. the divisor of a mean over a flexible axis); it has no inputs, and
the lowering computes it from the shapes of the program's inputs.

``parse_dim`` reads an expression into a small tree that both the lowering (MIL integer
ops on the inputs' runtime shapes) and the tests (numpy) evaluate with ``eval_dim``.
"""
from __future__ import annotations

import ast
from typing import Callable

from .ops import IRTypeError, defop
from .schema import STR, Param
from .types import DType, TensorType


@defop("dim_size", "shape", 0, params={"dim": Param(STR)}, differentiable=False)
def _dim_size(ts, p):
    parse_dim(p["dim"])  # refuses what no lowering can compute
    return [TensorType((), DType.i32)]


#: expression function name -> binary operation name in ``eval_dim``'s ``arith``
_CALLS = {"floordiv": "floordiv", "mod": "mod", "max": "max", "min": "min"}
_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.FloorDiv: "floordiv",
           ast.Mod: "mod"}


def parse_dim(expr: str):
    """The tree of a dim expression: an int, a symbol name (str), or (op, left, right)
    with op one of add, sub, mul, floordiv, mod, max, min."""
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        raise IRTypeError(f"dim expression {expr!r} does not parse") from None

    def walk(n):
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            return n.id
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return ("mul", -1, walk(n.operand))
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            return (_BINOPS[type(n.op)], walk(n.left), walk(n.right))
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in _CALLS
                and len(n.args) == 2 and not n.keywords):
            return (_CALLS[n.func.id], walk(n.args[0]), walk(n.args[1]))
        raise IRTypeError(f"dim expression {expr!r}: '{ast.unparse(n)}' is not an integer "
                          "expression rlxjax computes (+, -, *, //, %, floordiv, mod, "
                          "max, min of symbols and ints)")

    return walk(tree)


def eval_dim(tree, symbol: Callable, const: Callable, arith: Callable):
    """Evaluate ``parse_dim``'s tree: ``symbol(name)``, ``const(int)`` and
    ``arith(op, a, b)`` make the values (numbers, or MIL vars in the lowering)."""
    if isinstance(tree, int):
        return const(tree)
    if isinstance(tree, str):
        return symbol(tree)
    op, a, b = tree
    return arith(op, eval_dim(a, symbol, const, arith), eval_dim(b, symbol, const, arith))


def symbols(tree) -> set:
    """The symbol names in a ``parse_dim`` tree."""
    if isinstance(tree, str):
        return {tree}
    if isinstance(tree, tuple):
        return symbols(tree[1]) | symbols(tree[2])
    return set()
