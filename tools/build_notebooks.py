"""Build the notebooks in ``notebooks/`` from their Python sources and execute them.

Each ``notebooks/src/NN_name.py`` holds the cells of ``notebooks/NN_name.ipynb`` in the
"percent" format: a line ``# %%`` starts a code cell, ``# %% [markdown]`` a markdown cell
whose lines are comments (``# text``); anything before the first marker is ignored. The
notebook is executed with nbclient in a temporary working folder (files it writes, such
as ``out/*.mlpackage``, stay out of the repository) and saved with its outputs, so that it
reads well on a repository page.

    python tools/build_notebooks.py              # all notebooks
    python tools/build_notebooks.py 03 04        # those whose name starts with 03 / 04
    python tools/build_notebooks.py --no-execute # cells only, no outputs

Needs nbformat, nbclient, ipykernel and matplotlib (``pip install -e ".[test]"``).
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NB_DIR = os.path.join(ROOT, "notebooks")
SRC_DIR = os.path.join(NB_DIR, "src")
CELL_TIMEOUT = 300  # seconds per cell
KERNEL = "python3"
_MARKER = re.compile(r"^# %%(?:\s*\[(\w+)\])?\s*$")


def parse_cells(text: str):
    """[(kind, source)] from percent-format text; kind is 'code' or 'markdown'."""
    cells, kind, lines = [], None, []

    def flush():
        if kind is None:
            return
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            body = "\n".join(re.sub(r"^# ?", "", ln) if ln.startswith("#") else ln
                             for ln in body.splitlines())
        if body.strip():
            cells.append((kind, body))

    for line in text.splitlines():
        m = _MARKER.match(line)
        if m:
            flush()
            kind, lines = ("markdown" if m.group(1) == "markdown" else "code"), []
            if m.group(1) not in (None, "markdown"):
                raise ValueError(f"unknown cell kind [{m.group(1)}] in {line!r}")
        elif kind is not None:
            lines.append(line)
    flush()
    return cells


def make_notebook(cells):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": KERNEL},
        "language_info": {"name": "python"},
    }
    for i, (kind, src) in enumerate(cells):
        new = nbformat.v4.new_code_cell if kind == "code" else nbformat.v4.new_markdown_cell
        cell = new(src)
        cell.id = f"cell-{i:02d}"  # stable ids keep rebuilt notebooks' diffs small
        nb.cells.append(cell)
    return nb


def _collapse_carriage_returns(text: str) -> str:
    """What a terminal shows: each line keeps the text after its last carriage return
    (progress bars redraw themselves with '\\r')."""
    return "\n".join(ln.rsplit("\r", 1)[-1] if "\r" in ln.rstrip("\r") else ln.rstrip("\r")
                     for ln in text.split("\n"))


def tidy_outputs(nb) -> None:
    """Merge consecutive stream outputs of the same stream (the kernel sends many small
    ones), collapse progress-bar redraws, drop execution timestamps (noise in diffs)."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        merged = []
        for out in cell.get("outputs", []):
            prev = merged[-1] if merged else None
            if (out.get("output_type") == "stream" and prev is not None
                    and prev.get("output_type") == "stream" and prev["name"] == out["name"]):
                prev["text"] += out["text"]
            else:
                merged.append(out)
        for out in merged:
            if out.get("output_type") == "stream":
                out["text"] = _collapse_carriage_returns(out["text"])
        merged = [o for o in merged if o.get("output_type") != "stream" or o["text"].strip()]
        if "outputs" in cell:
            cell.outputs = merged


def execute(nb, workdir: str, timeout: int = CELL_TIMEOUT):
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name=KERNEL,
                   resources={"metadata": {"path": workdir}}).execute()
    return nb


def write_atomically(nb, path: str) -> None:
    import nbformat

    fd, tmp = tempfile.mkstemp(prefix=".nb-", suffix=".ipynb", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            text = nbformat.writes(nb)
            f.write(text if text.endswith("\n") else text + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a notebook is an ordinary file
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def sources(prefixes=()):
    names = sorted(f[:-3] for f in os.listdir(SRC_DIR) if re.match(r"\d\d_.*\.py$", f))
    if prefixes:
        names = [n for n in names if any(n.startswith(p) for p in prefixes)]
    return names


def build(name: str, run: bool = True) -> float:
    import nbformat

    with open(os.path.join(SRC_DIR, name + ".py"), encoding="utf-8") as f:
        nb = make_notebook(parse_cells(f.read()))
    t0 = time.perf_counter()
    if run:
        with tempfile.TemporaryDirectory(prefix="rlxjax-nb-") as work:
            execute(nb, work)
        tidy_outputs(nb)
    nbformat.validate(nb)
    write_atomically(nb, os.path.join(NB_DIR, name + ".ipynb"))
    return time.perf_counter() - t0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="notebook name prefixes (default: all)")
    p.add_argument("--no-execute", action="store_true", help="write cells without outputs")
    args = p.parse_args(argv)
    names = sources(args.names)
    if not names:
        p.error(f"no notebook source in {SRC_DIR} matches {args.names}")
    for name in names:
        dt = build(name, run=not args.no_execute)
        print(f"notebooks/{name}.ipynb" + ("" if args.no_execute else f"  executed in {dt:.1f}s"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
