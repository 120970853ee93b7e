"""Straight-line Python for a checked program: one generated function per program.

Once every step of a program without nested blocks has run (and had its outputs checked)
once, ``ReferenceProgram`` runs it through a function generated here instead of its step
loop: each fast-path op is one line ``_vK = _fK(args)`` over local variables (no dict
lookups, no per-step bookkeeping); other ops call their prepared ``run(env)`` as in the
loop, with the values they read stored into ``env`` first. The calls and the values are the
loop's own, so the results are identical; an exception is re-raised with the failing op's
context, as the loop does.
"""
from __future__ import annotations

from typing import Callable, Sequence

_NAME, _LIST = 0, 2


def straight_line(steps: Sequence, outputs: Sequence[str], error: Callable,
                  passthrough: type) -> Callable:
    """steps: prepared steps (``call``: a FastCall or None, ``run``, ``inputs``,
    ``outputs``); ``error(i, exc)`` builds the exception for a failure in step i;
    ``passthrough``: exception type re-raised as is. Returns run(env) -> tuple of the
    ``outputs`` values."""
    via_env = set()  # names that ops without a fast path read from env
    for st in steps:
        if st.call is None:
            for _, kind, payload in st.inputs:
                if kind == _NAME:
                    via_env.add(payload)
                elif kind == _LIST:
                    via_env.update(p for k, p in payload if k == _NAME)
    ns = {"_err": error, "_Pass": passthrough}
    local = {}
    body = []
    for i, st in enumerate(steps):
        body.append(f"_i = {i}")
        if st.call is not None:
            args = []
            for k, (name, const) in enumerate(zip(st.call.names, st.call.consts)):
                if name is None:
                    ns[f"_c{i}_{k}"] = const
                    args.append(f"_c{i}_{k}")
                else:
                    args.append(local.get(name) or f"env[{name!r}]")
            ns[f"_f{i}"] = st.call.fn
            local[st.outputs[0]] = f"_v{i}_0"
            body.append(f"_v{i}_0 = _f{i}({', '.join(args)})")
        else:
            ns[f"_s{i}"] = st.run
            outs = [f"_v{i}_{k}" for k in range(len(st.outputs))]
            body.append(f"{', '.join(outs)}, = _s{i}(env)" if outs else f"_s{i}(env)")
            local.update(zip(st.outputs, outs))
        body.extend(f"env[{n!r}] = {local[n]}" for n in st.outputs if n in via_env)
    ret = [local.get(n) or f"env[{n!r}]" for n in outputs]
    src = "\n".join(
        ["def _program(env):", "    _i = -1", "    try:"]
        + [f"        {line}" for line in body or ["pass"]]
        + ["    except _Pass:", "        raise",
           "    except Exception as e:", "        raise _err(_i, e) from e",
           f"    return ({''.join(r + ', ' for r in ret)})"])
    exec(compile(src, "<rlxjax reference program>", "exec"), ns)  # noqa: S102
    return ns["_program"]
