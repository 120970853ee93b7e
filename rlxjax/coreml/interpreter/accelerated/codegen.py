"""Straight-line Python for a checked program: one generated function per program.

Part of the accelerated reference path (``program.py``). Once every op of a program
without nested blocks has run (and had its outputs checked) once, ``AcceleratedProgram`` runs
it through a function generated here instead of the interpreter's loop: each op with a
``PreparedCall`` is one line ``_vK = _fK(args)`` over local variables (no dict lookups, no per-op
bookkeeping); other ops call their ``run(env)`` as in the loop, with the values they read
stored into ``env`` first. The calls and the values are the loop's own, so the results are
identical; an exception is re-raised with the failing op's context, as the loop does.
"""
from __future__ import annotations

from typing import Callable, Sequence

from ..interpreter import LIST, NAME
from .prepared import PreparedCall


def straight_line(steps: Sequence, outputs: Sequence[str], error: Callable,
                  passthrough: type) -> Callable:
    """steps: per op in order, ``(op, call)``: ``call`` is a PreparedCall (inlined) or a function
    ``run(env) -> outputs``; ``error(op, exc)`` builds the exception for a failure in ``op``;
    ``passthrough``: exception type re-raised as is. Returns run(env) -> tuple of the
    ``outputs`` values."""
    via_env = set()  # names that ops without a PreparedCall read from env
    for op, call in steps:
        if not isinstance(call, PreparedCall):
            for _, kind, payload in op.inputs:
                if kind == NAME:
                    via_env.add(payload)
                elif kind == LIST:
                    via_env.update(p for k, p in payload if k == NAME)
    ops = [op for op, _ in steps]
    ns = {"_err": lambda i, e: error(ops[i], e), "_Pass": passthrough}
    local = {}
    body = []
    for i, (op, call) in enumerate(steps):
        body.append(f"_i = {i}")
        if isinstance(call, PreparedCall):
            args = []
            for k, (name, const) in enumerate(zip(call.names, call.consts)):
                if name is None:
                    ns[f"_c{i}_{k}"] = const
                    args.append(f"_c{i}_{k}")
                else:
                    args.append(local.get(name) or f"env[{name!r}]")
            ns[f"_f{i}"] = call.fn
            local[op.outputs[0]] = f"_v{i}_0"
            body.append(f"_v{i}_0 = _f{i}({', '.join(args)})")
        else:
            ns[f"_s{i}"] = call
            outs = [f"_v{i}_{k}" for k in range(len(op.outputs))]
            body.append(f"{', '.join(outs)}, = _s{i}(env)" if outs else f"_s{i}(env)")
            local.update(zip(op.outputs, outs))
        body.extend(f"env[{n!r}] = {local[n]}" for n in op.outputs if n in via_env)
    ret = [local.get(n) or f"env[{n!r}]" for n in outputs]
    src = "\n".join(
        ["def _program(env):", "    _i = -1", "    try:"]
        + [f"        {line}" for line in body or ["pass"]]
        + ["    except _Pass:", "        raise",
           "    except Exception as e:", "        raise _err(_i, e) from e",
           f"    return ({''.join(r + ', ' for r in ret)})"])
    exec(compile(src, "<rlxjax reference program>", "exec"), ns)  # noqa: S102
    return ns["_program"]
