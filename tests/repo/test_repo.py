"""Promises the repository makes to a new user."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    ci_cmd = [l for l in ci.splitlines() if l.startswith("python -m pytest")]
    assert len(ci_cmd) == 1
    readme = (ROOT / "README.md").read_text()
    assert ci_cmd[0] in readme


def test_changelog_has_unreleased_section():
    assert re.search(r"^## \[Unreleased\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
