"""The ``rlxjax`` command, run in-process: ``demo`` (short) and ``inspect``."""
from __future__ import annotations

import json

import pytest

from rlxjax.cli import main


def test_demo_trains_matches_jax_and_writes_packages(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["demo", "--steps", "20", "--out", str(out), "--backend", "reference"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    text = captured.out
    assert "synthetic 8x8 'digits' generated in code" in text
    assert "JAX parity: final losses differ by" in text and ": OK" in text
    assert "held-out accuracy" in text and "demo OK" in text
    assert "20/20" in captured.err  # the progress bar
    for name in ("train_step.mlpackage", "digits.mlpackage"):
        assert (out / name / "Manifest.json").is_file(), name
    try:
        import matplotlib  # noqa: F401
        assert (out / "loss.png").is_file()
    except ImportError:
        assert "loss plot skipped: matplotlib is not importable" in text

    # inspect the training program: roles from the metadata, shapes, ops
    assert main(["inspect", str(out / "train_step.mlpackage")]) == 0
    text = capsys.readouterr().out
    assert "specification version 8 (deployment target iOS17" in text
    assert "metadata 'rlxjax.train'" in text
    assert "params_dense_0_kernel" in text and "float32[64, 32]" in text
    assert "params.dense_0.kernel" in text and "[param]" in text
    assert "[new_param -> params_dense_0_kernel]" in text
    assert "[opt_state]" in text and "[batch]" in text and "[loss]" in text
    assert "MIL ops:" in text and "matmul" in text

    # the Core AI program the demo wrote (when rlxjax[coreai] is installed) inspects too
    if (out / "train_step.aimodel").is_dir():
        assert main(["inspect", str(out / "train_step.aimodel")]) == 0
        text = capsys.readouterr().out
        assert "functions (2): train_step (default), predict" in text
        assert "[batch]" in text and "[loss]" in text and "Core AI ops:" in text

    # inspect the exported inference model: no training roles
    assert main(["inspect", str(out / "digits.mlpackage")]) == 0
    text = capsys.readouterr().out
    assert "float32[1, 64]" in text and "float32[1, 10]" in text
    assert "rlxjax.train" not in text and "[param]" not in text


@pytest.mark.parametrize("kind", ["missing", "file", "corrupt"])
def test_inspect_bad_path_is_one_line_exit_2(tmp_path, capsys, kind):
    path = tmp_path / "x.mlpackage"
    if kind == "file":
        path.write_text("not a package")
    elif kind == "corrupt":
        (path / "Data" / "com.apple.CoreML").mkdir(parents=True)
        (path / "Data" / "com.apple.CoreML" / "model.mlmodel").write_bytes(b"garbage")
        (path / "Manifest.json").write_text(json.dumps({
            "fileFormatVersion": "1.0.0", "rootModelIdentifier": "m",
            "itemInfoEntries": {"m": {"path": "com.apple.CoreML/model.mlmodel",
                                      "author": "x", "description": "", "name": "model.mlmodel"}}}))
    assert main(["inspect", str(path)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("rlxjax inspect: ") and "\n" not in err
    assert "Traceback" not in captured.err and captured.out == ""
    assert {"missing": "no such file or directory", "file": "not a package",
            "corrupt": "cannot read the Core ML package"}[kind] in err


# ~5.5 s: the demo's failure path (the demo's success path stays in the default run)
@pytest.mark.slow
def test_demo_exits_nonzero_when_losses_disagree(tmp_path, capsys, monkeypatch):
    import rlxjax.demo

    monkeypatch.setattr(rlxjax.demo, "LOSS_RTOL", -1.0)  # any difference fails
    rc = main(["demo", "--steps", "2", "--out", str(tmp_path), "--backend", "reference",
               "--no-progress"])
    captured = capsys.readouterr()
    assert rc == 1 and "FAILED" in captured.out
    assert "differs from JAX's" in captured.err


def test_loss_plot_uses_matplotlib_when_importable(tmp_path, monkeypatch):
    # matplotlib is optional and not installed in CI: check the calls against a stand-in.
    import sys
    from unittest import mock

    import rlxjax.demo

    mpl, plt, fig, ax = mock.MagicMock(), mock.MagicMock(), mock.MagicMock(), mock.MagicMock()
    mpl.pyplot = plt
    plt.subplots.return_value = (fig, ax)
    monkeypatch.setitem(sys.modules, "matplotlib", mpl)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", plt)
    path = str(tmp_path / "loss.png")
    assert rlxjax.demo._plot(path, [2.0, 1.0], [2.0, 1.0]) == (path, "")
    mpl.use.assert_called_once_with("Agg")
    fig.savefig.assert_called_once_with(path)
    assert ax.plot.call_count == 2
