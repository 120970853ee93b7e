"""Declarative parameter schemas of RLX ops (``OpDef.params``).

Each op declares its parameters as ``{name: Param(kind)}``. A ``kind`` is a ``Kind`` below
(``INT``, ``INTS``, ``one_of("add", "update")``, ...) or a Python type / tuple of types,
checked with ``isinstance``. Values are checked as ``Params`` hold them (frozen: lists are
tuples, numpy scalars are Python scalars). ``check_params`` is run on every node built
(``infer_types``) and by the verifier, which adds the node's source line: a misspelled,
missing or mistyped parameter is an error where the node is made, never a ``KeyError``
deep in a lowering.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import numpy as np

from .types import DType, Dyn


@dataclass(frozen=True)
class Kind:
    """A named predicate on parameter values."""

    name: str
    check: Callable[[Any], bool]

    def __repr__(self):
        return self.name


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(v) -> bool:  # the commonest kind: kept fast (checked on every node built)
    return type(v) is tuple and all(type(x) is int or _is_int(x) for x in v)


def tuple_of(kind: "Kind", name: Optional[str] = None) -> Kind:
    check = kind.check
    return Kind(name or f"tuple of {kind.name}",
                lambda v: type(v) is tuple and all(map(check, v)))


def one_of(*values) -> Kind:
    allowed = frozenset(values)
    return Kind("one of " + "/".join(map(repr, values)),
                lambda v: isinstance(v, str) and v in allowed)


def pair_of(kind: Kind) -> Kind:
    return Kind(f"pair of {kind.name}",
                lambda v: isinstance(v, tuple) and len(v) == 2 and all(kind.check(x) for x in v))


INT = Kind("int", _is_int)
BOOL = Kind("bool", lambda v: isinstance(v, bool))
FLOAT = Kind("float", lambda v: isinstance(v, float))
STR = Kind("str", lambda v: isinstance(v, str))
DTYPE = Kind("DType", lambda v: isinstance(v, DType))
ARRAY = Kind("ndarray", lambda v: isinstance(v, np.ndarray))
ANY = Kind("any", lambda v: True)
INTS = Kind("tuple of int", _ints)
STRS = tuple_of(STR, "tuple of str")
#: a shape: static ints or ``Dyn`` dims
DIMS = tuple_of(Kind("dim", lambda v: _is_int(v) or isinstance(v, Dyn)), "shape (tuple of int/Dyn)")
INT_PAIRS = tuple_of(Kind("(int, int)", lambda v: isinstance(v, tuple) and len(v) == 2
                          and all(map(_is_int, v))), "tuple of (int, int)")
INT_TRIPLES = tuple_of(Kind("(int, int, int)", lambda v: isinstance(v, tuple) and len(v) == 3
                            and all(map(_is_int, v))), "tuple of (lo, hi, interior)")
INTS_PAIR = pair_of(INTS)


def compile_schema(op: str, schema: Mapping[str, "Param"]) -> Callable[[Mapping], Optional[str]]:
    """A fast ``params -> None | message`` check of ``schema`` (run on every node built)."""
    checks = {k: p._check for k, p in schema.items()}
    required = frozenset(k for k, p in schema.items() if p.required)

    def check(params) -> Optional[str]:
        items = getattr(params, "_items", params)  # a Params' dict, read without the Mapping API
        for k, v in items.items():
            ok = checks.get(k)
            if ok is None or not ok(v):
                return param_errors(op, schema, params)
        if items.keys() >= required:
            return None
        return param_errors(op, schema, params)

    return check


@dataclass(frozen=True)
class Param:
    """One entry of an op's parameter schema: ``kind`` is a ``Kind`` or a type / tuple of
    types the value must be an instance of; ``required=False`` makes it optional (absent
    means ``default``)."""

    kind: Any = ANY
    required: bool = True
    default: Any = None
    doc: str = ""

    def __post_init__(self):
        k = self.kind
        check = k.check if isinstance(k, Kind) else (lambda v: isinstance(v, k))
        object.__setattr__(self, "_check", check)

    def accepts(self, value) -> bool:
        return self._check(value)

    @property
    def kind_name(self) -> str:
        k = self.kind
        if isinstance(k, Kind):
            return k.name
        if isinstance(k, tuple):
            return " or ".join(t.__name__ for t in k)
        return getattr(k, "__name__", str(k))


def _short(v) -> str:
    if isinstance(v, np.ndarray):
        return f"ndarray {v.dtype}{list(v.shape)}"
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def param_errors(op: str, schema: Mapping[str, Param], params: Mapping) -> Optional[str]:
    """A message naming every unknown, missing or mistyped parameter of an ``op`` node, or
    None when ``params`` fits ``schema``."""
    problems = []
    for k, v in params.items():
        spec = schema.get(k)
        if spec is None:
            problems.append(f"unknown parameter {k!r}")
        elif not spec.accepts(v):
            problems.append(f"parameter {k!r} must be {spec.kind_name}, got "
                            f"{type(v).__name__} {_short(v)}")
    for k, spec in schema.items():
        if spec.required and k not in params:
            problems.append(f"missing parameter {k!r} ({spec.kind_name})")
    if not problems:
        return None
    known = ", ".join(schema) or "none"
    return f"{op}: {'; '.join(problems)} (its parameters: {known})"
