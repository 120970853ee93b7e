"""Layering: the compile path (rlxjax/coreml, rlxjax/transforms) never imports the
reference interpreter or any other part of rlxjax/runtime. The interpreter is an oracle
for the lowering; if the compile path used it (as constant folding once did), a bug the
two shared would vanish from every program it touched."""
import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "rlxjax"
COMPILE_PATH = ("coreml", "transforms")
FORBIDDEN = "rlxjax.runtime"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: pathlib.Path):
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_in(path.read_text(), package, str(path))


def imports_in(source: str, package: str, filename: str = "<test>"):
    """(line, absolute module name) of every import statement in ``source`` (a module of
    ``package``), relative imports resolved; ``from a import b`` yields both ``a`` and
    ``a.b`` (b may be a submodule). Imports inside functions count too."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            yield node.lineno, mod
            for alias in node.names:
                yield node.lineno, f"{mod}.{alias.name}"


def _compile_path_files():
    return sorted(p for d in COMPILE_PATH for p in (ROOT / d).rglob("*.py"))


def test_compile_path_files_found():
    files = _compile_path_files()
    assert any(p.name == "builder.py" for p in files)
    assert any("fold" in p.parts for p in files)


@pytest.mark.parametrize("path", _compile_path_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_compile_path_does_not_import_runtime(path):
    bad = [f"{path.relative_to(ROOT.parent)}:{line} imports {mod}"
           for line, mod in imported_modules(path)
           if mod == FORBIDDEN or mod.startswith(FORBIDDEN + ".")]
    assert not bad, "\n".join(bad)


def test_the_checker_resolves_relative_imports():
    src = ("from ..runtime.reference.ops import OPS\n"
           "from .. import runtime\n"
           "def f():\n    from ...runtime import backends\n"
           "import rlxjax.runtime.reference as r\n"
           "from .builder import Var\n")
    mods = [m for _, m in imports_in(src, "rlxjax.coreml.rules")]
    assert "rlxjax.coreml.runtime.reference.ops" in mods  # '..' from rlxjax.coreml.rules
    assert "rlxjax.runtime" in [m for _, m in imports_in("from ... import runtime",
                                                         "rlxjax.coreml.rules")]
    assert "rlxjax.runtime.backends" in mods and "rlxjax.runtime.reference" in mods
    assert "rlxjax.coreml.rules.builder.Var" in mods
    real = {m for _, m in imported_modules(ROOT / "coreml" / "rules" / "elementwise.py")}
    assert "rlxjax.coreml.registry" in real and "rlxjax.ir.DType" in real
