"""The README's python examples run, in order, in one namespace, in a fresh folder (its
sketch marked ``<!-- not-run: ... -->`` is the fine-tuning guide page, run by
test_guide_code.py). The second example trains on Core AI, so this needs rlxjax[coreai];
slow (~20-45 s: Core AI's worker compiles), as the getting-started page covers the same
calls in the default run."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from guide_code import blocks

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_readme_examples_run_and_match_jax(tmp_path, monkeypatch):
    pytest.importorskip("coreai.authoring", reason="the README trains on Core AI: rlxjax[coreai]")
    import jax

    monkeypatch.chdir(tmp_path)
    code = blocks((ROOT / "README.md").read_text())
    assert [runs for _, _, runs in code] == [True, True, False]
    ns = {"__name__": "readme"}
    for line, block, runs in code:
        if runs:
            exec(compile(block, f"README.md:{line}", "exec"), ns)
    want = jax.jit(ns["mlp"])(ns["params"], ns["x"])
    np.testing.assert_allclose(ns["same"], want, rtol=1e-5, atol=1e-5)
    assert (tmp_path / "init_state" / "state.json").is_file()
    assert ns["state"].step == 101
