"""Write docs/primitives.md: which JAX primitives rlxjax compiles, into what.

    python tools/primitive_table.py          # (re)write docs/primitives.md
    python tools/primitive_table.py --check  # exit 1 if docs/primitives.md is stale

Everything in the table is measured, not declared: for each primitive with a frontend rule
(``rlxjax.frontend.RULES``) and a tiny example below, the example is traced and the RLX
nodes that THIS primitive's rule added are recorded; those nodes are then lowered one by one
to see which MIL ops they emit (iOS17, fp32) and on which targets they lower at all; the
VJP column says whether ``rlxjax.transforms.vjp.VJPS`` has a rule for each of those RLX ops.
The ops are those of the example (f32 unless said): other dtypes or parameters may take
another path through the rule. Primitives without an example say "see rule".

The second table, one row per RLX op, is read from the op records (``rlxjax.ir.ops.OPS``):
family, effect, parameters, the targets its lowering claims and whether it differentiates.
Those are declared, and tests/ir/test_op_records.py checks them: it lowers a node of every op
on every claimed target and requires a VJP rule for every differentiable op.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.core import Primitive

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import rlxjax  # noqa: E402
import rlxjax.nn  # noqa: E402,F401
from rlxjax.coreml.builder import MilBuilder, Var  # noqa: E402
from rlxjax.coreml.ct_private import blob_writer  # noqa: E402
from rlxjax.coreml.lower import LowerContext  # noqa: E402
from rlxjax.coreml.registry import LOWERINGS, claimed_targets, lowers_natively  # noqa: E402
from rlxjax.coreml.targets import TARGETS as ALL_TARGETS, get_target  # noqa: E402
from rlxjax.errors import RlxError, UnsupportedPrimitiveError  # noqa: E402
from rlxjax.frontend import RULES, trace  # noqa: E402
from rlxjax.frontend.rules.random import RANDOM_PRIMITIVES  # noqa: E402
from rlxjax.ir import Graph  # noqa: E402
from rlxjax.ir.ops import FAMILIES, OPS  # noqa: E402
from rlxjax.transforms.legalize import legalize, needs_legalizing  # noqa: E402
from rlxjax.transforms.vjp import NON_DIFFERENTIABLE, VJPS  # noqa: E402
from rlxjax.transforms.vjp.registry import refusal  # noqa: E402

DOC = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs",
                                   "primitives.md"))
TARGETS = tuple(ALL_TARGETS)  # every deployment target rlxjax knows, oldest first

F = np.linspace(0.25, 1.5, 6, dtype=np.float32).reshape(2, 3)
G = np.linspace(1.0, 2.0, 6, dtype=np.float32).reshape(2, 3)
B = np.array([[True, False, True], [False, False, True]])
I = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
IMG = np.linspace(-1, 1, 50, dtype=np.float32).reshape(1, 2, 5, 5)
W = np.linspace(-1, 1, 54, dtype=np.float32).reshape(3, 2, 3, 3)
IDX = np.array([1, 0], np.int32)

_LAX = {v.name: v for v in vars(lax).values() if isinstance(v, Primitive)}
_UNARY = ("abs", "ceil", "cos", "erf", "erfc", "exp", "exp2", "expm1", "floor", "is_finite",
          "log", "log1p", "logistic", "neg", "rsqrt", "sign", "sin", "sqrt", "square", "tanh")
_BINARY = ("add", "sub", "mul", "div", "rem", "pow", "max", "min",
           "eq", "ne", "lt", "le", "gt", "ge")


def _bind(name, *args):
    return lambda *a: _LAX[name].bind(*a), args


def _pool(kind):
    init, op = {"max": (-np.inf, lax.max), "min": (np.inf, lax.min), "sum": (0.0, lax.add)}[kind]
    return (lambda x: lax.reduce_window(x, np.float32(init), op, (1, 1, 2, 2), (1, 1, 2, 2),
                                        "VALID"), (IMG,))


def _maxpool_grad(x):
    return jax.grad(lambda x: _pool("max")[0](x).sum())(x)


#: primitive -> (function, example args); each function's jaxpr must contain the primitive
EXAMPLES = {
    **{n: _bind(n, F) for n in _UNARY},
    **{n: _bind(n, F, G) for n in _BINARY},
    **{n: _bind(n, B, B) for n in ("and", "or", "xor")},
    "not": _bind("not", B),
    "copy": _bind("copy", F),
    "optimization_barrier": (lambda x: lax.optimization_barrier(x) * 2, (F,)),
    "stack": (lambda x, y: jnp.stack([x, y]), (F, G)),
    "add_any": (lambda x: jax.grad(lambda x: (x * x).sum())(x), (F,)),
    "argmax": (lambda x: jnp.argmax(x, axis=1), (F,)),
    "argmin": (lambda x: jnp.argmin(x, axis=1), (F,)),
    "broadcast_in_dim": (lambda x: lax.broadcast_in_dim(x, (4, 2, 3), (1, 2)), (F,)),
    "clamp": (lambda x: lax.clamp(np.float32(0.5), x, np.float32(1.0)), (F,)),
    "concatenate": (lambda x, y: lax.concatenate([x, y], 0), (F, G)),
    "conv_general_dilated": (lambda x, w: lax.conv(x, w, (1, 1), "SAME"), (IMG, W)),
    "convert_element_type": (lambda x: lax.convert_element_type(x, jnp.int32), (F,)),
    "cumsum": (lambda x: lax.cumsum(x, axis=1), (F,)),
    "cumprod": (lambda x: lax.cumprod(x, axis=1), (F,)),
    "cummax": (lambda x: lax.cummax(x, axis=1), (F,)),
    "cummin": (lambda x: lax.cummin(x, axis=1), (F,)),
    "cumlogsumexp": (lambda x: lax.cumlogsumexp(x, axis=1), (F,)),
    "dot_general": (lambda x, y: lax.dot_general(x, y, (((1,), (1,)), ((), ()))), (F, G)),
    "dynamic_slice": (lambda x: lax.dynamic_slice(x, (1, 0), (1, 3)), (F,)),
    "dynamic_update_slice": (lambda x, u: lax.dynamic_update_slice(x, u, (1, 0)), (F, G[:1])),
    "gather": (lambda x, i: x[i], (F, IDX)),
    "integer_pow": (lambda x: lax.integer_pow(x, 3), (F,)),
    "iota": (lambda x: x + lax.iota(jnp.float32, 3), (F,)),
    "pad": (lambda x: lax.pad(x, np.float32(0), ((1, 1, 0), (0, 2, 1))), (F,)),
    "reduce_and": (lambda b: jnp.all(b, axis=1), (B,)),
    "reduce_or": (lambda b: jnp.any(b, axis=1), (B,)),
    "reduce_max": (lambda x: lax.reduce_max(x, (1,)), (F,)),
    "reduce_min": (lambda x: lax.reduce_min(x, (1,)), (F,)),
    "reduce_prod": (lambda x: lax.reduce_prod(x, (1,)), (F,)),
    "reduce_sum": (lambda x: lax.reduce_sum(x, (1,)), (F,)),
    "reduce_window_max": _pool("max"),
    "reduce_window_min": _pool("min"),
    "reduce_window_sum": _pool("sum"),
    "reshape": (lambda x: lax.reshape(x, (3, 2)), (F,)),
    "rev": (lambda x: lax.rev(x, (0,)), (F,)),
    "rlx_dropout": (lambda x: rlxjax.nn.dropout(x, 0.5, deterministic=False), (F,)),
    "rlx_layer_norm": (lambda x: rlxjax.nn.layer_norm(x, G[0], G[1]), (F,)),
    "rlx_rms_norm": (lambda x: rlxjax.nn.rms_norm(x, G[0]), (F,)),
    "round": (lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN), (F,)),
    "scatter": (lambda x, i, u: x.at[i].set(u), (F, IDX, G)),
    "scatter-add": (lambda x, i, u: x.at[i].add(u), (F, IDX, G)),
    "scatter-mul": (lambda x, i, u: x.at[i].mul(u), (F, IDX, G)),
    "scatter-min": (lambda x, i, u: x.at[i].min(u), (F, IDX, G)),
    "scatter-max": (lambda x, i, u: x.at[i].max(u), (F, IDX, G)),
    "select_and_scatter_add": (_maxpool_grad, (IMG,)),
    "select_n": (lambda b, x, y: lax.select(b, x, y), (B, F, G)),
    "slice": (lambda x: lax.slice(x, (0, 1), (2, 3)), (F,)),
    "sort": (lambda x: lax.sort(x, dimension=1), (F,)),
    "split": (lambda x: lax.split(x, (1, 2), axis=1), (F,)),
    "squeeze": (lambda x: lax.squeeze(x[:1], (0,)), (F,)),
    "top_k": (lambda x: lax.top_k(x, 2), (F,)),
    "transpose": (lambda x: lax.transpose(x, (1, 0)), (F,)),
    "cond": (lambda x: lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x), (F,)),
    "while": (lambda x: lax.while_loop(lambda c: c.sum() < 9.0, lambda c: c * 2.0 + 1.0, x),
              (F,)),
    "scan": (lambda x: lax.scan(lambda c, r: (c + r, c * r), x[0], x), (F,)),
    "custom_jvp_call": (lambda x: jax.nn.relu(x), (F,)),
    "custom_vjp_call": (lambda x: _custom_vjp_example(x), (F,)),
    "empty2": (lambda x: jax.grad(lambda x: lax.cond(x.sum() > 0, jnp.sin, jnp.cos, x).sum())(x),
               (F,)),
}

# the elementwise math of rlxjax/ir/special.py (the table records ops; values do not matter)
EXAMPLES.update({
    **{n: _bind(n, F) for n in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                                "atanh", "cbrt", "erf_inv", "bessel_i0e", "bessel_i1e")},
    **{n: _bind(n, G) for n in ("acosh", "lgamma", "digamma")},
    **{n: _bind(n, G, F) for n in ("atan2", "nextafter")},
    **{n: _bind(n, G, G) for n in ("igamma", "igammac", "igamma_grad_a", "zeta")},
    "polygamma": (lambda x: lax.polygamma(np.float32(1), x), (G,)),
    "regularized_incomplete_beta": (lambda a, x: lax.betainc(a, a, x), (G, F)),
})
SPD = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]], np.float32)
EXAMPLES.update({  # linear algebra
    "cholesky": (lambda a: lax.linalg.cholesky_p.bind(a), (SPD,)),
    "triangular_solve": (lambda a, b: lax.linalg.triangular_solve(a, b, left_side=True,
                                                                  lower=True), (SPD, G.T)),
    "lu": (lambda a: lax.linalg.lu(a), (SPD,)),
    "tridiagonal_solve": (lambda d, b: lax.linalg.tridiagonal_solve(d * 0.5, d * 4.0, d * 0.5,
                                                                    b), (F[0], G.T)),
    "custom_linear_solve": (lambda a, b: jnp.linalg.solve(a, b), (SPD, G[0])),
})

#: control primitives whose reverse-mode derivative is refused (as JAX refuses it)
NO_REVERSE_MODE = {"while": "no (reverse mode through while_loop, as in JAX)"}

@jax.custom_vjp
def _custom_vjp_example(x):
    return x * 2.0


_custom_vjp_example.defvjp(lambda x: (x * 2.0, None), lambda _, ct: (ct * 2.0,))


def _primitives(jaxpr, out=None):
    out = set() if out is None else out
    for e in jaxpr.eqns:
        out.add(e.primitive.name)
        for p in e.params.values():
            for q in (p if isinstance(p, tuple) else (p,)):
                sub = getattr(q, "jaxpr", None)
                if sub is not None:
                    _primitives(getattr(sub, "jaxpr", sub), out)
    return out


def rule_nodes(prim, fn, args):
    """Trace ``fn(*args)``; return the graph and the nodes that ``prim``'s rule added."""
    if prim not in _primitives(jax.make_jaxpr(fn)(*args).jaxpr):
        raise AssertionError(f"the example of {prim} does not emit it")
    orig, recorded = RULES[prim], []

    def recording(ctx, eqn, *inputs):
        n0 = len(ctx.graph.nodes)
        out = orig(ctx, eqn, *inputs)
        recorded.extend(ctx.graph.nodes[n0:])
        return out

    RULES[prim] = recording
    try:
        traced = trace(fn, list(args), [f"a{i}" for i in range(len(args))])
    finally:
        RULES[prim] = orig
    return traced.graph, recorded


def mil_ops(graph, nodes, target):
    """MIL op types that ``nodes`` lower to (graph inputs taken as they are, no I/O casts)."""
    wanted, emitted = {id(n) for n in nodes}, set()
    with tempfile.TemporaryDirectory() as tmp:
        b = MilBuilder(lambda: blob_writer(os.path.join(tmp, "weight.bin")))
        ctx = LowerContext(b, get_target(target), "fp32")
        env = {v.id: Var(f"in{i}", v.type, None) for i, (_, v) in enumerate(graph.inputs)}
        for node in graph.nodes:
            n0 = len(b.ops)
            outs = _lower_node(ctx, node, [env[v.id] for v in node.inputs], target)
            env.update((v.id, mv) for v, mv in zip(node.outputs, outs))
            if id(node) in wanted:
                emitted.update(op.type for op in b.ops[n0:] if op.type != "const")
        b.close_blob()
    return emitted


def _lower_node(ctx, node, ins, target):
    """The MIL values of ``node``: its lowering, or that of its decomposition (the
    legalize stage's, rlxjax/transforms/legalize/) when Core ML has none, in its regions
    too (lower_graph legalizes region graphs as well)."""
    native = lambda n: lowers_natively(n.op, get_target(target))  # noqa: E731
    g = Graph("one")
    args = [g.add_input(f"x{i}", v.type) for i, v in enumerate(node.inputs)]
    for i, v in enumerate(g.add_node(node.op, args, node.params, node.source,
                                     node.regions or None).outputs):
        g.add_output(f"y{i}", v)
    if not needs_legalizing(g, native):
        outs = LOWERINGS[node.op](ctx, node, *ins)
        return outs if isinstance(outs, tuple) else (outs,)
    g = legalize(g, native)
    env = {v.id: x for (_, v), x in zip(g.inputs, ins)}
    for n in g.nodes:
        env.update((v.id, mv) for v, mv in zip(
            n.outputs, _lower_node(ctx, n, [env[v.id] for v in n.inputs], target)))
    return tuple(env[v.id] for _, v in g.outputs)


def _targets(graph, nodes):
    ok = []
    for t in TARGETS:
        try:
            mil_ops(graph, nodes, t)
            ok.append(t)
        except RlxError:
            pass
    if ok and ok == list(TARGETS[TARGETS.index(ok[0]):]):
        return f"{ok[0]}+"
    return ", ".join(ok) or "none"


def _vjp(rlx_ops):
    ops = sorted(rlx_ops - {"constant"})
    missing = [o for o in ops if (o not in VJPS or refusal(o)) and o not in NON_DIFFERENTIABLE]
    if missing:
        return "no: " + ", ".join(missing)
    if all(o in NON_DIFFERENTIABLE for o in ops):
        return "zero (non-differentiable)"
    return "yes"


def _detail(err):
    msg = str(err)
    head = "is not supported by rlxjax: "
    msg = msg.split(head, 1)[1] if head in msg else msg
    return msg.split(" Rewrite that line", 1)[0].replace("|", "\\|")


def _code(names):
    return ", ".join(f"`{n}`" for n in sorted(names)) or "—"


def row(prim):
    # the family: the module (or package, as for indexing/) under frontend/rules/, or the
    # frontend module of an rlxjax-internal primitive (random/device's rlx_random_draw)
    module = RULES[prim].__module__
    fn_name = module.split(".rules.", 1)[1].split(".")[0] if ".rules." in module else \
        module.split(".frontend.", 1)[1].replace(".", "/")
    if prim in RANDOM_PRIMITIVES:
        return [prim, fn_name, "refused (see below)", "—", "—", "—"]
    if fn_name == "control" and prim not in EXAMPLES and prim != "empty":
        return [prim, fn_name, "inlines its jaxpr", "—", "—", "—"]
    if prim not in EXAMPLES:
        return [prim, fn_name, "see rule", "—", "—", "—"]
    graph, nodes = rule_nodes(prim, *EXAMPLES[prim])
    rlx = {n.op for n in nodes} - {"constant"}
    mil = mil_ops(graph, nodes, "iOS17")
    if not rlx:
        shown = "`constant`" if nodes else "(none: input passed through)"
        return [prim, fn_name, shown, "n/a", _code(mil),
                _targets(graph, nodes) if nodes else "any"]
    vjp = NO_REVERSE_MODE.get(prim) or _vjp(rlx)
    return [prim, fn_name, _code(rlx), vjp, _code(mil), _targets(graph, nodes)]


def refused_rows():
    rows = [[p, "always", RANDOM_PRIMITIVES[p], "the jax.random message above"]
            for p in sorted(RANDOM_PRIMITIVES)]
    return rows


def _since(targets):
    if not targets:
        return "none"
    if list(targets) == list(TARGETS[TARGETS.index(targets[0]):]):
        return f"{targets[0]}+"
    return ", ".join(targets)


def _op_vjp(name):
    d = OPS[name]
    if not d.differentiable:
        return "zero (non-differentiable)"
    why = refusal(name)
    if why:
        return "refused: " + why.split(" (", 1)[0].split(":", 1)[0]
    return "yes" if d.impl("vjp") else "no rule"


def _coreai(name):
    from rlxjax.coreai import ops as _rules  # noqa: F401  (registers the Core AI rules)
    from rlxjax.coreai.lower import NOT_LOWERED

    d = OPS[name]
    if d.lowering("coreai") is not None:
        return "rule"
    if d.impl("decompose") is not None:
        return "decomposed"
    return "never: " + NOT_LOWERED[name].split(":", 1)[0] if name in NOT_LOWERED else "—"


def _coreml(name):
    targets = claimed_targets(name)
    if not targets and OPS[name].impl("decompose") is not None:
        return "decomposed"
    return _since(targets)


def op_rows():
    rows = []
    for name in sorted(OPS, key=lambda n: (FAMILIES.index(OPS[n].family), n)):
        d = OPS[name]
        params = ", ".join(f"`{k}`" + ("" if p.required else "?") for k, p in d.params.items())
        regions = f" (regions: {', '.join(d.regions)})" if d.regions else ""
        rows.append([name, d.family, d.effect + regions,
                     params or "—", _coreml(name), _coreai(name), _op_vjp(name)])
    return rows


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(f"`{r[0]}`" if i == 0 else r[i] for i in range(len(r))) + " |"
              for r in rows]
    return "\n".join(lines)


def _conformance_section() -> str:
    """The harness table tools/conformance.py wrote into docs/primitives.md (kept as is)."""
    begin, end = ("<!-- conformance: generated by tools/conformance.py --write -->",
                  "<!-- conformance: end -->")
    try:
        with open(DOC, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return ""
    if begin not in text or end not in text:
        return ""
    return begin + text.split(begin, 1)[1].split(end, 1)[0] + end + "\n"


def render() -> str:
    from rlxjax.frontend.rules.random import RANDOM_DETAIL

    main = [row(p) for p in sorted(RULES)]
    return "\n".join([
        "# Primitive coverage",
        "",
        "Generated by `python tools/primitive_table.py` from the registries "
        "(`rlxjax.frontend.RULES`, `rlxjax.transforms.vjp.VJPS`, the Core ML lowerings); "
        "do not edit by hand. `tests/repo/test_primitive_table.py` fails when it is stale.",
        "",
        "Columns are measured on a tiny example per primitive (f32 unless the primitive "
        "needs bool): *RLX ops* are the nodes that primitive's frontend rule adds, *VJP* "
        "whether rlxjax's reverse mode has a rule for each of them, *MIL ops* what those "
        "nodes lower to for iOS17 in fp32 (without the program's I/O casts), *targets* the "
        "deployment targets on which they lower. Other dtypes or parameters may take "
        "another path through a rule; \"see rule\" means the table has no example yet. "
        "*family* is the rule's module in `rlxjax/frontend/rules/`.",
        "",
        _table(["primitive", "family", "RLX ops", "VJP", "MIL ops (iOS17, fp32)", "targets"],
               main),
        "",
        "## Refused on purpose",
        "",
        "These raise `rlxjax.UnsupportedPrimitiveError` naming the user's source line. "
        f"For `jax.random` the message is: \"{RANDOM_DETAIL}\" "
        "(a typed key passed as an argument or closed over is refused the same way, as an "
        "`UnsupportedDTypeError`).",
        "",
        _table(["primitive", "when", "emitted by", "error detail"], refused_rows()),
        "",
        "## RLX ops",
        "",
        "One row per op of the RLX graph, read from its record (`rlxjax.ir.ops.OPS`). "
        "*effect*: `pure` ops may be merged and folded, `random` ones never; *(regions: ...)* "
        "names the sub-graphs an op carries (``Node.regions``). *parameters* is the op's schema (`?`: optional); a "
        "node whose parameters do not fit is refused when built and by the verifier. "
        "*Core ML* is the targets the op's Core ML lowering claims, and "
        "`tests/ir/test_op_records.py` lowers a node of every op on each of those targets and "
        "loads it back through coremltools; *Core AI* says whether Core AI has a rule of its "
        "own (`rule`) or never sees the op (`never`: where it goes instead); `decomposed`: "
        "that format runs the op's decomposition (`rlxjax/transforms/legalize/`). *VJP*: `yes` (a reverse-mode rule), `zero` "
        "(no cotangent flows through it), or `refused` with the reason the error gives.",
        "",
        _table(["RLX op", "family", "effect", "parameters", "Core ML", "Core AI", "VJP"],
               op_rows()),
        "",
    ]) + ("\n" + _conformance_section() if _conformance_section() else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the file is stale")
    ap.add_argument("--out", default=DOC, help="file to write or check")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        try:
            with open(args.out, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            current = None
        if current != text:
            print(f"{args.out} is stale: run python tools/primitive_table.py", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
