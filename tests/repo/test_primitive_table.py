"""docs/primitives.md is generated from the registries by tools/primitive_table.py: it must
be up to date (regenerate with ``python tools/primitive_table.py``) and every refused
primitive it lists must really be refused."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import load_tool

from rlxjax import _jax_compat

# The committed table is generated with the newest supported JAX; older lines emit other
# primitives for some examples (e.g. jax 0.8 differentiates cond without `empty2`).
pytestmark = pytest.mark.skipif(
    _jax_compat.LINE != _jax_compat.SUPPORTED_LINES[-1],
    reason="docs/primitives.md is generated with jax %d.%d; this is jax %d.%d"
           % (*_jax_compat.SUPPORTED_LINES[-1], *_jax_compat.LINE))

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "tools", "primitive_table.py")


def _tool():
    return load_tool('primitive_table')


def test_committed_table_is_up_to_date():
    tool = _tool()
    with open(tool.DOC, encoding="utf-8") as f:
        committed = f.read()
    assert committed == tool.render(), (
        "docs/primitives.md is stale: run `python tools/primitive_table.py` and commit it")


def test_table_lists_every_rule_once_and_the_refusals():
    from rlxjax.frontend import RULES
    from rlxjax.frontend.rules.random import RANDOM_PRIMITIVES

    tool = _tool()
    text = tool.render()
    main, refused = text.split("## Refused on purpose")
    rows = [ln.split("|")[1].strip().strip("`") for ln in main.splitlines()
            if ln.startswith("| `")]
    assert sorted(rows) == sorted(RULES)
    for p in RANDOM_PRIMITIVES:
        assert f"| `{p}` | always |" in refused
    # examples must really emit their primitive (rule_nodes asserts it) and have a rule
    assert set(tool.EXAMPLES) <= set(RULES)


def test_check_flag_exits_nonzero_when_stale(tmp_path):
    stale = tmp_path / "primitives.md"
    stale.write_text("# old\n", encoding="utf-8")
    r = subprocess.run([sys.executable, TOOL, "--check", "--out", str(stale)],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "stale" in r.stderr
    r = subprocess.run([sys.executable, TOOL, "--out", str(stale)], capture_output=True, text=True)
    assert r.returncode == 0
    r = subprocess.run([sys.executable, TOOL, "--check", "--out", str(stale)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
