"""Read the text form of an RLX graph (ir/printer.py) back into a ``Graph``.

``parse_graph(format_graph(g))`` is ``g`` again: the same ops, parameters, types, value
ids, names, regions and constants (and source lines when printed with ``sources=True``).
Every node goes through ``Graph.add_node``, so the text is type-checked as it is read;
an output type that differs from what inference gives is an error naming the line. Tests
state small graphs this way (tests/ir/test_ir_text.py).
"""
from __future__ import annotations

import ast
import base64
import itertools
import json
import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from .graph import Graph, Params, Value
from .ops import IRTypeError
from .types import DType, Dyn, TensorType


class IRParseError(ValueError):
    """The text is not a well-formed RLX graph; the message names the line."""


def parse_graph(text: str) -> Graph:
    """The graph printed as ``text`` (one top-level ``graph``)."""
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip()]
    p = _GraphReader(lines)
    g = p.graph(p.next_line())
    if p.pos != len(lines):
        raise IRParseError(f"line {lines[p.pos][0]}: text after the end of the graph")
    return g


_DTYPES = {d.value: d for d in DType}
_NAME = r'(?:"(?:[^"\\]|\\.)*"|[^\s,=%"#(){}]+)'
_GRAPH = re.compile(rf"(?:(\w+)(?:\[(\d+)\])?:\s+)?graph\s+({_NAME})\($")
_INPUT = re.compile(rf"%(\d+):\s+(\w+\[[^\]]*\])\s+#\s+({_NAME})$")
_TYPE = r"\w+\[[^\]]*\]"
_NODE = re.compile(rf"((?:%\d+:\s*{_TYPE}(?:,\s*)?)*)\s*=\s*(\w+)\(([^)]*)\)\s*(.*)$")
_OUT = re.compile(rf"%(\d+):\s*({_TYPE})")
_LOC = re.compile(r'loc\(("(?:[^"\\]|\\.)*")\)$')


def _name(s: str) -> str:
    return json.loads(s) if s.startswith('"') else s


class _GraphReader:
    def __init__(self, lines: List[Tuple[int, str]]):
        self.lines, self.pos = lines, 0

    def next_line(self) -> Tuple[int, str]:
        if self.pos >= len(self.lines):
            raise IRParseError("the text ends inside a graph (a '}' is missing)")
        ln = self.lines[self.pos]
        self.pos += 1
        return ln[0], ln[1].strip()

    def graph(self, head: Tuple[int, str]) -> Graph:
        no, line = head
        m = _GRAPH.match(line)
        if not m or m.group(1):
            raise IRParseError(f"line {no}: expected 'graph NAME(', got {line!r}")
        return self._body(_name(m.group(3)))

    def _body(self, name: str) -> Graph:
        g = Graph(name)
        env: Dict[int, Value] = {}
        top = -1
        while True:
            no, line = self.next_line()
            if line == ") {":
                break
            m = _INPUT.match(line)
            if not m:
                raise IRParseError(f"line {no}: expected an input '%N: type  # name'")
            v = g.add_input(_name(m.group(3)), parse_type(m.group(2), no))
            top = _bind(env, v, int(m.group(1)), no, top)
        node = None
        while True:
            no, line = self.next_line()
            if line == "}":
                raise IRParseError(f"line {no}: graph {name} has no return")
            if line.startswith("return"):
                if node is not None:
                    top = self._add(g, env, node, top)
                self._returns(g, env, line[len("return"):].strip(), no)
                break
            m = _GRAPH.match(line)
            if m and m.group(1):
                if node is None:
                    raise IRParseError(f"line {no}: a region before any node")
                node[-1].append((m.group(1), m.group(2), self._body(_name(m.group(3)))))
                continue
            if node is not None:
                top = self._add(g, env, node, top)
            node = self._node_line(no, line, env) + ([],)
        no, line = self.next_line()
        if line != "}":
            raise IRParseError(f"line {no}: expected '}}' after return, got {line!r}")
        g._ids = itertools.count(top + 1)  # new values get fresh ids
        return g

    def _node_line(self, no: int, line: str, env) -> tuple:
        m = _NODE.match(line)
        if not m:
            raise IRParseError(f"line {no}: expected '%N: type = op(%a, ...) {{params}}'")
        outs = [(int(i), parse_type(t, no)) for i, t in _OUT.findall(m.group(1))]
        args = [a.strip() for a in m.group(3).split(",") if a.strip()]
        try:
            inputs = [env[int(a[1:])] for a in args]
        except (KeyError, ValueError):
            raise IRParseError(f"line {no}: {m.group(2)} reads an undefined value "
                               f"(one of {', '.join(args)})") from None
        rest = m.group(4).strip()
        source = None
        loc = _LOC.search(rest)
        if loc:
            source = json.loads(loc.group(1))
            rest = rest[:loc.start()].strip()
        params = {}
        if rest:
            r = _ValueReader(rest, no)
            params = r.params()
            r.end()
        return (no, m.group(2), inputs, outs, params, source)

    def _add(self, g: Graph, env, node, top: int) -> int:
        no, op, inputs, outs, params, source, regions = node
        named: Dict[str, object] = {}
        for key, idx, sub in regions:
            if idx is None:
                named[key] = sub
            else:
                named.setdefault(key, []).append(sub)
        try:
            n = g.add_node(op, inputs, Params(params), source, named or None)
        except (IRTypeError, KeyError, TypeError) as e:
            raise IRParseError(f"line {no}: {op}: {e}") from None
        got = [v.type for v in n.outputs]
        if got != [t for _, t in outs]:
            raise IRParseError(f"line {no}: {op} is printed with types "
                               f"{[str(t) for _, t in outs]}, inference gives "
                               f"{[str(t) for t in got]}")
        for v, (i, _) in zip(n.outputs, outs):
            top = _bind(env, v, i, no, top)
        return top

    def _returns(self, g: Graph, env, text: str, no: int) -> None:
        for m in re.finditer(rf"({_NAME})=%(\d+)\s*(?:,\s*|$)", text):
            try:
                g.add_output(_name(m.group(1)), env[int(m.group(2))])
            except KeyError:
                raise IRParseError(f"line {no}: returns undefined %{m.group(2)}") from None
        if len(g.outputs) != text.count("=%"):
            raise IRParseError(f"line {no}: cannot read the returns {text!r}")


def _bind(env, v: Value, printed: int, no: int, top: int) -> int:
    if printed in env:
        raise IRParseError(f"line {no}: %{printed} is defined twice")
    v.id = printed  # keep the printed ids: format(parse(text)) == text
    env[printed] = v
    return max(top, printed)


def parse_type(s: str, no: int = 0) -> TensorType:
    m = re.fullmatch(r"(\w+)\[([^\]]*)\]", s)
    if not m or m.group(1) not in _DTYPES:
        raise IRParseError(f"line {no}: {s!r} is not a type like f32[2,3]")
    dims = [d.strip() for d in m.group(2).split(",") if d.strip()]
    return TensorType(tuple(int(d) if d.isdigit() else Dyn(d) for d in dims),
                      _DTYPES[m.group(1)])


class _ValueReader:
    """Recursive descent over one ``{k=v, ...}`` parameter list (printer.format_value)."""

    _NUMBER = re.compile(r"-?(?:inf|nan|\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)")
    _WORD = re.compile(r"[A-Za-z_]\w*")

    def __init__(self, text: str, no: int):
        self.s, self.i, self.no = text, 0, no

    def fail(self, what: str):
        raise IRParseError(f"line {self.no}: {what} at column {self.i + 1} of {self.s!r}")

    def ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i] == " ":
            self.i += 1

    def eat(self, c: str) -> bool:
        self.ws()
        if self.s.startswith(c, self.i):
            self.i += len(c)
            return True
        return False

    def expect(self, c: str) -> None:
        if not self.eat(c):
            self.fail(f"expected {c!r}")

    def end(self) -> None:
        self.ws()
        if self.i != len(self.s):
            self.fail("unexpected text")

    def params(self) -> dict:
        self.expect("{")
        out = {}
        while not self.eat("}"):
            if out:
                self.expect(",")
            self.ws()
            m = self._WORD.match(self.s, self.i)
            if not m:
                self.fail("expected a parameter name")
            self.i = m.end()
            self.expect("=")
            out[m.group()] = self.value()
        return out

    def value(self):
        self.ws()
        s, i = self.s, self.i
        if s.startswith("(", i):
            return self.tuple()
        if s.startswith(("'", '"'), i):
            return self.string()
        if i < len(s) and s[i] in "-0123456789":
            m = self._NUMBER.match(s, i)
            if not m:
                self.fail("expected a number")
            self.i = m.end()
            word = m.group()
            return float(word) if any(c in word for c in ".eEna") else int(word)
        m = self._WORD.match(s, i)
        if not m:
            self.fail("expected a value")
        word = m.group()
        self.i = m.end()
        if word in ("inf", "nan"):
            return float(word)
        if word in ("None", "True", "False"):
            return {"None": None, "True": True, "False": False}[word]
        if word == "Dyn":
            self.expect("(")
            name = self.string()
            self.expect(")")
            return Dyn(name)
        if word in _DTYPES:
            return self.array(_DTYPES[word]) if s.startswith("[", self.i) else _DTYPES[word]
        self.i = i
        return self.fail(f"unknown value {word!r}")

    def tuple(self):
        self.expect("(")
        items = []
        while not self.eat(")"):
            if items:
                self.expect(",")
                if self.eat(")"):
                    break
            items.append(self.value())
        return tuple(items)

    def string(self) -> str:
        self.ws()
        q, j = self.s[self.i], self.i + 1
        while j < len(self.s) and self.s[j] != q:
            j += 2 if self.s[j] == "\\" else 1
        if j >= len(self.s):
            self.fail("unterminated string")
        lit = self.s[self.i:j + 1]
        self.i = j + 1
        return ast.literal_eval(lit)

    def array(self, dtype: DType) -> np.ndarray:
        j = self.s.index("]", self.i)
        shape = tuple(int(d) for d in self.s[self.i + 1:j].split(",") if d.strip())
        self.i = j + 1
        self.expect("(")
        j = self.s.find(")", self.i)
        if j < 0:
            self.fail("unterminated array")
        body, self.i = self.s[self.i:j].strip(), j + 1
        dt = dtype.np
        if body.startswith("b64:"):
            raw = base64.b64decode(body[4:])
            a = np.frombuffer(raw, dt.newbyteorder("<")).astype(dt)
        elif dtype == DType.bool:
            a = np.array([w.strip() == "True" for w in body.split(",") if w.strip()], dt)
        elif dt.kind in "iu":
            a = np.array([int(w) for w in body.split(",") if w.strip()], np.int64).astype(dt)
        else:
            a = np.array([float(w) for w in body.split(",") if w.strip()], np.float64).astype(dt)
        size = int(np.prod(shape, dtype=np.int64))
        if a.size != size:
            self.fail(f"array of shape {shape} has {a.size} elements")
        return a.reshape(shape)
