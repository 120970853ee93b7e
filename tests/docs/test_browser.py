"""The built site in a real headless browser (Debian's chromium and its chromedriver, driven
by selenium): the home page and a guide page render (screenshots of the rendered pages, with
their navigation and content), and the site's search finds a page. Slow (a browser start and
a site build, ~30 s); skipped without chromium / chromedriver (``apt-get install -y chromium
chromium-driver``) or the docs extra and selenium (``pip install -e ".[docs]" selenium``).
The screenshots are kept in pytest's temporary folder."""
from __future__ import annotations

import functools
import http.server
import shutil
import struct
import threading
import zlib

import pytest

pytestmark = pytest.mark.slow

webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium")
pytest.importorskip("mkdocs", reason="needs the docs extra: pip install -e '.[docs]'")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
if not (CHROMIUM and DRIVER):
    pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y chromium "
                "chromium-driver)", allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from test_site import build  # noqa: E402


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    site = build(tmp_path_factory.mktemp("site"))
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser():
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
              "--disable-dev-shm-usage"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER),
                              options=opts)
    yield driver
    driver.quit()


def _png_size_and_colours(data: bytes):
    """(width, height, number of distinct row checksums) of a PNG: a blank page has one."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    idat, i = b"", 8
    while i < len(data):
        n, kind = struct.unpack(">I4s", data[i:i + 8])
        if kind == b"IDAT":
            idat += data[i + 8:i + 8 + n]
        i += 12 + n
    raw = zlib.decompress(idat)
    stride = len(raw) // h
    return w, h, len({raw[r * stride + 1:(r + 1) * stride] for r in range(h)})


@pytest.mark.parametrize("page,heading", [("", "rlxjax"),
                                          ("guide/training/", "Training on the device")])
def test_a_page_renders(browser, url, page, heading, tmp_path):
    browser.get(url + page)
    h1 = WebDriverWait(browser, 20).until(EC.visibility_of_element_located((By.TAG_NAME, "h1")))
    assert h1.text.strip().startswith(heading)
    nav = browser.find_elements(By.CSS_SELECTOR, "nav.md-nav--primary a.md-nav__link")
    assert any(a.text.strip() == "Getting started" for a in nav if a.is_displayed())
    # the material theme's stylesheet applied: the header bar is coloured, not unstyled
    assert browser.find_element(By.CSS_SELECTOR, ".md-header").value_of_css_property(
        "background-color") not in ("rgba(0, 0, 0, 0)", "transparent")
    png = browser.get_screenshot_as_png()
    (tmp_path / f"{page.strip('/').replace('/', '_') or 'home'}.png").write_bytes(png)
    w, h, rows = _png_size_and_colours(png)
    assert (w, h) == (1280, 900) or w >= 1000
    assert rows > 50                     # text, navigation and code: not a blank page


def test_search_finds_a_page(browser, url):
    browser.get(url)
    box = WebDriverWait(browser, 20).until(EC.element_to_be_clickable(
        (By.CSS_SELECTOR, ".md-search__input")))
    box.click()                                      # the header's search box opens
    box.send_keys("federated")
    link = WebDriverWait(browser, 30).until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, ".md-search-result__list a[href*='federated']")))
    assert "federated" in link.get_attribute("href")
    link.click()
    WebDriverWait(browser, 20).until(lambda b: "federated" in b.current_url)
    assert "Federated" in browser.find_element(By.TAG_NAME, "h1").text
