"""The documentation site (mkdocs.yml, docs/) builds with ``mkdocs build --strict`` (every
nav page present, every markdown link and anchor resolved: mkdocs.yml's ``validation``), the
API reference is generated from the docstrings, and every link of the built HTML reaches a
file and an anchor of the site. Skipped without the docs extra (``pip install -e
".[docs]"``)."""
from __future__ import annotations

import html.parser
import pathlib
import subprocess
import sys
import urllib.parse

import pytest

pytest.importorskip("mkdocs", reason="the site needs the docs extra: pip install -e '.[docs]'")
pytest.importorskip("material", reason="the site needs the docs extra: pip install -e '.[docs]'")
pytest.importorskip("mkdocstrings", reason="the site needs the docs extra")

ROOT = pathlib.Path(__file__).resolve().parents[2]


class _Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.hrefs, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])


def build(dest) -> pathlib.Path:
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                        "-f", str(ROOT / "mkdocs.yml"), "-d", str(dest)],
                       capture_output=True, text=True, cwd=ROOT,
                       env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    return pathlib.Path(dest)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return build(tmp_path_factory.mktemp("site"))


def test_the_site_builds_strictly_with_the_guide_and_the_api(site):
    for page in ("index.html", "guide/getting-started/index.html", "guide/training/index.html",
                 "guide/fine-tuning/index.html", "guide/federated/index.html",
                 "guide/app/index.html", "memory/index.html", "numerics/index.html",
                 "errors/index.html", "api/index.html", "search/search_index.json"):
        assert (site / page).is_file(), page
    api = (site / "api/index.html").read_text()
    for name in ("coreml_train_step", "LoadedTrainStep", "TrainState", "rlxjax.load"):
        assert name in api                  # rendered from the docstrings (mkdocstrings)


def test_every_link_of_the_built_site_resolves(site):
    parsed = {}

    def page(path):
        if path not in parsed:
            p = _Links()
            p.feed(path.read_text(errors="replace"))
            parsed[path] = p
        return parsed[path]

    broken = []
    for html_file in site.rglob("*.html"):
        for href in page(html_file).hrefs:
            url = urllib.parse.urlsplit(href)
            if url.scheme or href.startswith(("mailto:", "//")):
                continue                     # external: not fetched (no network in CI)
            path = urllib.parse.unquote(url.path)
            base = site if path.startswith("/") else html_file.parent   # 404.html: absolute
            target = (base / path.lstrip("/")).resolve() if path else html_file
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{html_file.relative_to(site)}: {href}")
            elif url.fragment and target.suffix == ".html" and \
                    url.fragment not in page(target).ids:
                broken.append(f"{html_file.relative_to(site)}: {href} (no such anchor)")
    assert not broken, "\n".join(broken[:20])
