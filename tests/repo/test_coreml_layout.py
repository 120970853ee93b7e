"""Promises about how rlxjax/coreml is put together (issue 14): the version has one source
and no coreml module imports the package root; coreml modules share helpers by public
names only; coremltools' private API is used from two modules alone: Core ML's
(rlxjax/coreml/ct_private.py) and the quantisers' both formats share
(rlxjax/compression/ct_optimize.py)."""
from __future__ import annotations

import ast
import pathlib
import re

import rlxjax
import rlxjax._version

ROOT = pathlib.Path(__file__).resolve().parents[2]
PKG = ROOT / "rlxjax"

# coremltools modules without a documented public API that rlxjax uses.
CT_PRIVATE_MODULES = ("coremltools.libmilstoragepython", "coremltools.converters.mil.backend",
                      "coremltools.converters.mil.frontend", "coremltools.converters.mil.mil")
CT_PRIVATE_HOMES = (PKG / "coreml" / "ct_private.py", PKG / "compression" / "ct_optimize.py")


def _imports(path: pathlib.Path):
    """(absolute module, imported names) of every import statement in ``path``."""
    rel = path.relative_to(ROOT).with_suffix("")
    package = list(rel.parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            yield mod, [a.name for a in node.names]


def _sources(*dirs):
    for d in dirs:
        yield from sorted((ROOT / d).rglob("*.py"))


def test_version_has_one_source():
    assert rlxjax.__version__ == rlxjax._version.__version__
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^dynamic = \["version"\]', text, re.M)
    assert re.search(r'^version = \{ attr = "rlxjax\._version\.__version__" \}', text, re.M)
    assert not re.search(r'^version = "', text, re.M)


def test_no_coreml_module_imports_the_package_root():
    """(``from .. import metadata`` takes the module rlxjax.metadata, not a name of the
    package root's, and is allowed.)"""
    bad = [(str(p.relative_to(ROOT)), mod, names) for p in _sources("rlxjax/coreml")
           for mod, names in _imports(p) if mod == "rlxjax"
           and not all((PKG / f"{n}.py").is_file() or (PKG / n).is_dir() for n in names)]
    assert bad == []


def test_coreml_modules_share_no_private_names():
    bad = [(str(p.relative_to(ROOT)), mod, name) for p in _sources("rlxjax/coreml")
           for mod, names in _imports(p) if mod.startswith("rlxjax.")
           for name in names if name.startswith("_") and not name.startswith("__")]
    assert bad == []


def test_coremltools_private_api_only_in_ct_private():
    bad = []
    for p in _sources("rlxjax", "tools"):
        if p in CT_PRIVATE_HOMES:
            continue
        for mod, names in _imports(p):
            if not mod.startswith("coremltools"):
                continue
            if (mod.startswith(CT_PRIVATE_MODULES) or any(s.startswith("_") for s in
                                                          mod.split(".") + names)):
                bad.append((str(p.relative_to(ROOT)), mod, names))
    assert bad == []
