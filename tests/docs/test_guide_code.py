"""Every python block of the guide pages (docs/guide/) runs: the blocks of a page in order,
in one namespace, in a fresh working folder, as a reader would paste them. The examples
compare with JAX themselves (their asserts). Blocks marked ``<!-- not-run: why -->`` are
skipped, and there are few of them (checked). Getting started runs by default; the other
pages (they train) under -m slow."""
from __future__ import annotations

import os
import pathlib

import pytest

from guide_code import blocks

ROOT = pathlib.Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide"
PAGES = sorted(p.name for p in GUIDE.glob("*.md"))
DEFAULT = {"getting-started.md"}  # ~15 s; the others train (15-60 s each)
MAX_NOT_RUN = 2


def test_the_guide_exists_and_few_blocks_are_not_run():
    assert {"getting-started.md", "training.md", "fine-tuning.md", "federated.md",
            "app.md"} <= set(PAGES)
    skipped = [(p, n) for p in PAGES for n, _, runs in blocks((GUIDE / p).read_text())
               if not runs]
    assert len(skipped) <= MAX_NOT_RUN, skipped


@pytest.mark.parametrize("page", [p if p in DEFAULT else pytest.param(p, marks=pytest.mark.slow)
                                  for p in PAGES])
def test_every_code_block_of_a_guide_page_runs(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": f"guide_{page[:-3].replace('-', '_')}"}
    ran = 0
    for line, code, runs in blocks((GUIDE / page).read_text()):
        if not runs:
            continue
        try:
            exec(compile(code, f"docs/guide/{page}:{line}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"docs/guide/{page}, the block at line {line}: "
                                 f"{type(e).__name__}: {e}") from e
        ran += 1
    if page != "federated.md":
        assert ran, f"{page} has no runnable python block"
    assert os.getcwd() == str(tmp_path)
