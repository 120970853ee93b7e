"""docs/primitives.md is generated from the registries by tools/primitive_table.py: it must
be up to date (regenerate with ``python tools/primitive_table.py``) and every refused
primitive it lists must really be refused."""
from __future__ import annotations

import functools

import pytest

from helpers import load_tool

from rlxjax import _jax_compat

# The committed table is generated with the newest supported JAX; older lines emit other
# primitives for some examples (e.g. jax 0.8 differentiates cond without `empty2`).
pytestmark = pytest.mark.skipif(
    _jax_compat.LINE != _jax_compat.SUPPORTED_LINES[-1],
    reason="docs/primitives.md is generated with jax %d.%d; this is jax %d.%d"
           % (*_jax_compat.SUPPORTED_LINES[-1], *_jax_compat.LINE))

_TOOL = None


def _tool():
    """The tool, its ``render`` run once per test process (it traces every example: ~3 s)."""
    global _TOOL
    if _TOOL is None:
        _TOOL = load_tool('primitive_table')
        _TOOL.render = functools.lru_cache(maxsize=None)(_TOOL.render)
    return _TOOL


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


def test_check_flag_exits_nonzero_when_stale(tmp_path, capsys):
    stale = tmp_path / "primitives.md"
    stale.write_text("# old\n", encoding="utf-8")
    tool = _tool()  # its main(), in this process (the command line is sys.exit(main()))
    assert tool.main(["--check", "--out", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err
    assert tool.main(["--out", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8") == tool.render()
    assert tool.main(["--check", "--out", str(stale)]) == 0, capsys.readouterr().err
