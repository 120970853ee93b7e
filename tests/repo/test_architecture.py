"""The package's shape, checked statically (by reading the source, importing nothing):
no import cycles, no module over 500 lines, and the compile path independent of the
reference interpreter (the oracle must not be part of what it checks).

Imports count wherever they stand: at module level and inside functions (a late import
still makes one module need the other; hiding a cycle in a function is how cycles grow).
Imports under ``if TYPE_CHECKING:`` do not count (they never run). ``from pkg import name``
is an edge to ``pkg.name`` when that is a module, else to ``pkg`` (its ``__init__``); the
implicit import of a module's parent packages is not an edge.
"""
import ast
from pathlib import Path
from typing import Dict, List, Set


ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rlxjax"
MAX_LINES = 500



def _modules() -> Dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imports(tree: ast.AST):
    """Import statements, skipping ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> Dict[str, Set[str]]:
    """module -> the package modules it imports (see the module docstring)."""
    mods = _modules()
    edges: Dict[str, Set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges[mod].update(a.name for a in node.names if a.name in mods)
                continue
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target not in mods:
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                edges[mod].add(sub if sub in mods else target)
    return edges


def cycles(edges: Dict[str, Set[str]]) -> List[List[str]]:
    """The strongly connected components with more than one module (or a self-import):
    each is a set of modules that import each other, directly or not (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(root: str) -> None:  # iterative: no recursion limit on a deep graph
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in edges[v]:
                    found.append(sorted(comp))

    for m in sorted(edges):
        if m not in index:
            visit(m)
    return found


def _describe(edges, comps) -> str:
    lines = []
    for comp in comps:
        lines.append("cycle among: " + ", ".join(comp))
        lines += [f"    {a} -> {b}" for a in comp for b in sorted(edges[a]) if b in comp]
    return "\n".join(lines)


def test_no_import_cycles():
    edges = import_graph()
    comps = cycles(edges)
    assert not comps, _describe(edges, comps)


def test_the_cycle_finder_finds_cycles():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"d"}, "e": {"a"}}
    assert sorted(cycles(edges)) == [["a", "b", "c"], ["d"]]


def test_late_imports_count_and_type_checking_imports_do_not():
    tree = ast.parse(
        "import a\n"
        "if TYPE_CHECKING:\n    import b\n"
        "def f():\n    from c import d\n")
    names = sorted(n.names[0].name if isinstance(n, ast.Import) else n.module
                   for n in _imports(tree))
    assert names == ["a", "c"]


def test_no_module_over_500_lines():
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (over {MAX_LINES} lines): {long}"


#: the modules of a format that run and load its programs (formats/base.py): they reach the
#: runtime; the rest of the format's folder is the compile path
FORMAT_RUNTIME_SIDE = ("rlxjax.coreml.format", "rlxjax.coreml.loaded", "rlxjax.coreai.format",
                       "rlxjax.coreai.loaded",
                       "rlxjax.coreai.worker")
#: what runs Core ML programs: its backends and the reference MIL interpreter (and the
#: deprecated rlxjax.runtime that re-exports them)
RUNTIME = ("rlxjax.coreml.interpreter", "rlxjax.coreml.backends", "rlxjax.runtime")


def _in(module: str, packages) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one (not a name that merely
    starts alike: rlxjax.coremltools_quiet is no rlxjax.coreml module)."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def _runtime(module: str) -> bool:
    return _in(module, RUNTIME)


def test_compile_path_does_not_import_the_reference_interpreter():
    """The interpreter is an oracle for the lowering: were the compile path to use it (as
    constant folding once did), a bug the two shared would vanish from every program. The
    format object and its loader run programs, so they may; nothing of the compile path
    imports them."""
    edges = import_graph()
    compile_path = [m for m in edges if _in(m, ("rlxjax.coreml", "rlxjax.coreai",
                                                "rlxjax.transforms"))
                    and m not in FORMAT_RUNTIME_SIDE and not _runtime(m)]
    assert "rlxjax.coreml.lower" in compile_path and "rlxjax.coreml.interpreter.interpreter" \
        in edges, "the layout this test knows moved: update RUNTIME"
    bad = sorted((m, t) for m in compile_path for t in edges[m]
                 if _runtime(t) or t in FORMAT_RUNTIME_SIDE)
    assert not bad, f"the compile path imports the runtime: {bad}"


#: the format-neutral layers: they talk to formats through rlxjax/formats/ only
NEUTRAL = ("rlxjax.api", "rlxjax.grad_api", "rlxjax.load", "rlxjax.loaded", "rlxjax.calling",
           "rlxjax.metadata", "rlxjax.program", "rlxjax.signature", "rlxjax.formats",
           "rlxjax.training", "rlxjax.frontend", "rlxjax.transforms", "rlxjax.ir",
           "rlxjax.stages", "rlxjax.states", "rlxjax.stateful", "rlxjax.compression")
FORMAT_PACKAGES = ("rlxjax.coreml", "rlxjax.coreai", "rlxjax.runtime")


def test_neutral_layers_import_no_format_module():
    """api.py, training/, load.py (and what they stand on) reach a format only through the
    registry (rlxjax/formats/), which imports its module on first use."""
    edges = import_graph()
    bad = sorted((m, t) for m, ts in edges.items() for t in ts
                 if _in(m, NEUTRAL) and _in(t, FORMAT_PACKAGES))
    assert not bad, f"format-neutral modules import a format's modules: {bad}"


#: the layers, bottom to top: no module imports one of a higher layer. The compile's core
#: (the IR, frontend, transforms, the format-neutral program, its states, metadata and
#: compression, and the loaded-function base a format's loader extends); the formats, which
#: stand on it (a format's loader once read state files from training/; they are
#: rlxjax/states/files.py now, and the compress= schemes both formats use are
#: rlxjax/compression/, no longer coreml/); and what stands on both: the user's API, the
#: training step, loading, the CLI - which reach a format only through the registry
#: (rlxjax/formats/ imports its module by name on first use). stateful.py once imported
#: training/ at call time to dodge a loop; the state codecs now live below both.
LAYERS = (
    ("core", ("rlxjax.ir", "rlxjax.frontend", "rlxjax.transforms", "rlxjax.program",
              "rlxjax.metadata", "rlxjax.signature", "rlxjax.formats", "rlxjax.states",
              "rlxjax.stateful", "rlxjax.stages", "rlxjax.compression", "rlxjax.calling",
              "rlxjax.loaded")),
    ("formats", FORMAT_PACKAGES),
    ("API", ("rlxjax.api", "rlxjax.grad_api", "rlxjax.training", "rlxjax.load",
             "rlxjax.loaded_step", "rlxjax.flower", "rlxjax.cli")),
)


def _layer(module: str):
    return next((i for i, (_, names) in enumerate(LAYERS) if _in(module, names)), None)


def test_the_layers_name_modules_that_exist():
    edges = import_graph()
    for _, names in LAYERS:
        for name in names:
            assert any(_in(m, (name,)) for m in edges), f"{name}: no such module (moved?)"
    all_names = [n for _, names in LAYERS for n in names]
    assert len(set(all_names)) == len(all_names)


def test_no_import_up_the_layers():
    edges = import_graph()
    bad = sorted((m, t, f"{LAYERS[_layer(m)][0]} -> {LAYERS[_layer(t)][0]}")
                 for m, ts in edges.items() for t in ts
                 if _layer(m) is not None and _layer(t) is not None and _layer(m) < _layer(t))
    assert not bad, f"imports up the layers: {bad}"


def test_formats_import_no_other_format():
    """Core ML and Core AI are siblings: what both use (the compress= schemes, state files,
    the loaded-function base) lives below them, so neither imports the other (Core AI once
    borrowed coreml/compress.py). rlxjax.runtime is Core ML's (its deprecated old name)."""
    edges = import_graph()
    family = {"rlxjax.coreml": "coreml", "rlxjax.runtime": "coreml", "rlxjax.coreai": "coreai"}

    def fmt(m):
        return next((f for p, f in family.items() if _in(m, (p,))), None)

    bad = sorted((m, t) for m, ts in edges.items() for t in ts
                 if fmt(m) and fmt(t) and fmt(m) != fmt(t))
    assert not bad, f"one format imports another: {bad}"


def test_the_layer_check_sees_an_import_up():
    """(the check itself: a format reading training/, as loaded.py once did, is caught)"""
    assert _layer("rlxjax.coreml.loaded") < _layer("rlxjax.training.checkpoint")
    assert _layer("rlxjax.compression.schemes") < _layer("rlxjax.coreml.compress")
    assert _layer("rlxjax.coreai.format") == _layer("rlxjax.coreml.compress")  # same layer


def test_one_module_defines_the_metadata_keys():
    """Every 'rlxjax.<key>' string literal of the package stands in rlxjax/metadata.py."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "metadata.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and node.value.startswith("rlxjax.") and " " not in node.value
                    and node.value.split(".")[1] in _KEY_NAMES):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value!r}")
    assert not found, "metadata keys outside rlxjax/metadata.py:\n" + "\n".join(found)


_KEY_NAMES = {"version", "io", "empty", "random", "nan_sign", "train", "predict", "functions",
              "params", "stateful", "states"}


def test_import_and_a_wrapper_load_no_format_library():
    """Pay for what you use: ``import rlxjax``, ``rlxjax --help``'s imports and building a
    ``coreml_jit`` / ``coreml_train_step`` wrapper import neither coremltools nor coreai;
    the first compile does (rlxjax/formats/). Nor do they import Flower (the optional
    extra rlxjax[flower]: only ``import rlxjax.flower`` does)."""
    import subprocess
    import sys

    code = (
        "import sys, optax, rlxjax, rlxjax.cli\n"
        "f = rlxjax.coreml_jit(lambda x: x * 2, target='iOS18')\n"
        "s = rlxjax.coreml_train_step(lambda p, x: (p * x).sum(), optax.sgd(0.1))\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in\n"
        "             ('coremltools', 'coreai', 'flwr', 'flwr_datasets', 'ray', 'datasets'))\n"
        "assert not bad, bad[:5]\n"
        "import numpy as np\n"
        "f(np.ones(3, np.float32))\n"
        "assert 'coremltools' in sys.modules\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=str(ROOT))
    assert res.returncode == 0, res.stderr[-2000:]
