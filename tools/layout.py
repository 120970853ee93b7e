"""Write the Layout page (docs/layout.md, on the documentation site) from the tree.

    python tools/layout.py            # print the section
    python tools/layout.py --check    # exit 1 when README.md's section differs (prints a diff)
    python tools/layout.py --write    # rewrite README.md's section in place

The section is what README.md holds between ``<!-- layout:start -->`` and
``<!-- layout:end -->``: rlxjax/'s modules and its packages (one line each, not their
files), every script of bench/ and tools/, the docs and notebooks by name, examples/'s and
tests/'s folders. A module's, package's (its ``__init__.py``) or script's summary is the first line
of its docstring; an examples/ or tests/ folder's is the first line of its README.md. Nothing is
imported, so this runs in a fraction of a second; a module with no docstring (or a tests/
folder with no README.md) is an error naming it, to be fixed by writing one.
tests/repo/test_layout.py runs ``--check``.
"""
from __future__ import annotations

import argparse
import ast
import difflib
import os
import sys
import textwrap

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
START, END = "<!-- layout:start -->", "<!-- layout:end -->"
WIDTH = 100  # the code block's lines wrap here (the repository's line length)
INDENT = "  "


class MissingSummary(Exception):
    pass


def _py_summary(path: str, root: str = ROOT) -> str:
    with open(path, encoding="utf-8") as f:
        doc = ast.get_docstring(ast.parse(f.read(), path))
    if not doc or not doc.strip():
        raise MissingSummary(f"{os.path.relpath(path, root)} has no docstring: write one (its "
                             "first line is the module's summary in README.md's Layout)")
    return _plain(doc.strip().splitlines()[0])


def _readme_summary(folder: str, root: str = ROOT) -> str:
    path = os.path.join(folder, "README.md")
    if not os.path.isfile(path):
        raise MissingSummary(f"{os.path.relpath(folder, root)}/ has no README.md: write one "
                             "(its first line is the folder's summary in README.md's Layout)")
    with open(path, encoding="utf-8") as f:
        lines = [l.strip() for l in f.read().splitlines() if l.strip()]
    if not lines:
        raise MissingSummary(f"{os.path.relpath(path, root)} is empty")
    return _plain(lines[0].lstrip("#"))


def _plain(line: str) -> str:
    """A summary as plain text (the section is a code block): no reST or Markdown quotes."""
    return line.replace("``", "").replace("`", "").strip()


def _subdirs(folder: str):
    return sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d))
                  and not d.startswith((".", "_")))


def _files(folder: str, ext: str):
    return sorted(f for f in os.listdir(folder)
                  if f.endswith(ext) and os.path.isfile(os.path.join(folder, f)))


def entries(root: str = ROOT):
    """(depth, name, summary) rows, top-level folders at depth 0 and their contents at 1."""
    rows, missing = [], []

    def add(depth, name, summary_fn, *args):
        try:
            rows.append((depth, name, summary_fn(*args, root) if summary_fn else ""))
        except MissingSummary as e:
            missing.append(str(e))

    pkg = os.path.join(root, "rlxjax")
    add(0, "rlxjax/", _py_summary, os.path.join(pkg, "__init__.py"))
    for f in _files(pkg, ".py"):
        if f != "__init__.py":
            add(1, f, _py_summary, os.path.join(pkg, f))
    for d in _subdirs(pkg):
        add(1, d + "/", _py_summary, os.path.join(pkg, d, "__init__.py"))
    for folder in ("bench", "tools"):
        add(0, folder + "/", None)
        for f in _files(os.path.join(root, folder), ".py"):
            add(1, f, _py_summary, os.path.join(root, folder, f))
        if folder == "bench":   # docs/ and notebooks/ sit between, by name
            rows.append((0, "docs/", ", ".join(_files(os.path.join(root, "docs"), ".md"))))
            nbs = [f[:-len(".ipynb")] for f in _files(os.path.join(root, "notebooks"), ".ipynb")]
            src = " (sources in notebooks/src/)" if os.path.isdir(
                os.path.join(root, "notebooks", "src")) else ""
            rows.append((0, "notebooks/", ", ".join(nbs) + src))
            examples = os.path.join(root, "examples")
            if os.path.isdir(examples):   # each example folder, by its README.md
                add(0, "examples/", None)
                for d in _subdirs(examples):
                    add(1, d + "/", _readme_summary, os.path.join(examples, d))
    tests = os.path.join(root, "tests")
    add(0, "tests/", None)
    for d in _subdirs(tests):
        add(1, d + "/", _readme_summary, os.path.join(tests, d))
    shared = [f[:-3] for f in _files(tests, ".py") if not f.startswith("test_")]
    rows.append((1, "*.py", "shared by the test files: " + ", ".join(shared)))
    if missing:
        raise MissingSummary("\n".join(missing))
    return rows


def section(root: str = ROOT) -> str:
    """The Layout section: a code block, the markers excluded."""
    rows = entries(root)
    column = max(len(INDENT) * depth + len(name) for depth, name, _ in rows) + 2
    out = ["```"]
    for depth, name, summary in rows:
        head = (INDENT * depth + name).ljust(column)
        if not summary:
            out.append(head.rstrip())
            continue
        lines = textwrap.wrap(summary, WIDTH - column, break_long_words=False,
                              break_on_hyphens=False)
        out.append(head + lines[0])
        out.extend(" " * column + line for line in lines[1:])
    out.append("```")
    return "\n".join(out) + "\n"


def split_readme(text: str, path: str):
    """(before, section, after) of README text around the markers."""
    if text.count(START) != 1 or text.count(END) != 1 or text.index(START) > text.index(END):
        raise SystemExit(f"{path}: needs one {START} line and one {END} line after it")
    before, rest = text.split(START + "\n", 1)
    current, after = rest.split(END, 1)
    return before + START + "\n", current, END + after


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true",
                      help="exit 1 when README.md's Layout section differs from the tree")
    mode.add_argument("--write", action="store_true", help="rewrite README.md's section in place")
    ap.add_argument("--readme", default=os.path.join(ROOT, "docs", "layout.md"),
                    help="the page to check or write (default: docs/layout.md)")
    args = ap.parse_args(argv)
    try:
        want = section()
    except MissingSummary as e:
        print(e, file=sys.stderr)
        return 2
    if not (args.check or args.write):
        sys.stdout.write(want)
        return 0
    with open(args.readme, encoding="utf-8") as f:
        text = f.read()
    before, current, after = split_readme(text, args.readme)
    if current == want:
        print(f"{args.readme}: Layout is up to date")
        return 0
    if args.check:
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(True), want.splitlines(True), "README.md (Layout)", "the tree"))
        print(f"{args.readme}: Layout differs from the tree; rewrite it with "
              "python tools/layout.py --write", file=sys.stderr)
        return 1
    with open(args.readme, "w", encoding="utf-8") as f:
        f.write(before + want + after)
    print(f"{args.readme}: Layout rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
