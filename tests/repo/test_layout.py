"""README.md's Layout section is written from the tree by tools/layout.py: it must be up to
date (regenerate with ``python tools/layout.py --write``), and the tool must notice a stale
section, rewrite it in place, and refuse a module without a docstring."""
from __future__ import annotations

import os
import subprocess
import sys

from helpers import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "layout.py")


def test_readme_layout_is_up_to_date():
    r = subprocess.run([sys.executable, TOOL, "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_stale_section_fails_the_check_and_is_rewritten(tmp_path):
    layout = load_tool("layout")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{layout.START}\n```\nrlxjax/\n```\n{layout.END}\n\nafter\n")
    r = subprocess.run([sys.executable, TOOL, "--check", "--readme", str(readme)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "--write" in r.stderr and "+  api.py" in r.stdout
    r = subprocess.run([sys.executable, TOOL, "--write", "--readme", str(readme)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    text = readme.read_text()
    assert text == f"# x\n\n{layout.START}\n{layout.section()}{layout.END}\n\nafter\n"
    r = subprocess.run([sys.executable, TOOL, "--check", "--readme", str(readme)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_entry_has_a_summary_and_each_source_file_is_listed():
    layout = load_tool("layout")
    rows = layout.entries()
    names = {name for _, name, _ in rows}
    for folder in ("rlxjax", "bench", "tools"):
        assert {f for f in os.listdir(os.path.join(ROOT, folder))
                if f.endswith(".py") and f != "__init__.py"} <= names
    pkg = os.path.join(ROOT, "rlxjax")
    assert {d + "/" for d in os.listdir(pkg) if os.path.isfile(os.path.join(pkg, d, "__init__.py"))
            } <= names
    assert all(summary for depth, name, summary in rows if depth == 1)


def test_a_module_without_a_docstring_is_named(tmp_path):
    layout = load_tool("layout")
    for d in ("rlxjax/sub", "bench", "tools", "docs", "notebooks", "tests/a"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "rlxjax" / "__init__.py").write_text('"""The package."""\n')
    (tmp_path / "rlxjax" / "sub" / "__init__.py").write_text("x = 1\n")
    (tmp_path / "tests" / "a" / "README.md").write_text("Folder a.\n")
    try:
        layout.entries(str(tmp_path))
    except layout.MissingSummary as e:
        assert str(e).startswith(os.path.join("rlxjax", "sub", "__init__.py") + " has no docstring")
    else:
        raise AssertionError("no error for a package without a docstring")
