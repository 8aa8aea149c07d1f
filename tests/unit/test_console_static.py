"""The console's files: served at /ui by the app (or not, with CAMPUSGUARD_CONSOLE=false),
self-contained (no CDN, every module it imports is shipped) and building DOM from server data
only as text. Their behaviour in a browser is tested in tests/browser."""

from __future__ import annotations

import re

import pytest

from app.config import Settings
from app.console import STATIC_DIR
from tests.support.inprocess import IMGSZ, inprocess_app

JS = sorted((STATIC_DIR / "js").glob("*.js"))
IMPORT = re.compile(r"""from\s+["'](\.[^"']+)["']""")


def test_console_is_served_and_every_module_it_imports_exists():
    with inprocess_app() as ip:
        page = ip.client.get("/ui/")
        assert page.status_code == 200 and 'src="js/app.js"' in page.text
        assert ip.client.get("/ui", follow_redirects=False).status_code in (307, 308)  # relative URLs need the slash
        for path in JS + [STATIC_DIR / "console.css"]:
            r = ip.client.get(f"/ui/{path.relative_to(STATIC_DIR)}")
            assert r.status_code == 200, path
    for path in JS:
        for target in IMPORT.findall(path.read_text()):
            assert (path.parent / target).resolve().is_file(), f"{path.name} imports {target}, which is not shipped"


def test_console_off():
    with inprocess_app(Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, console=False)) as ip:
        assert ip.client.get("/ui/").status_code == 404
        assert ip.client.get("/", follow_redirects=False).status_code == 404


@pytest.mark.parametrize("path", [STATIC_DIR / "index.html", STATIC_DIR / "console.css", *JS], ids=lambda p: p.name)
def test_no_markup_from_strings_and_nothing_from_the_internet(path):
    text = path.read_text()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in text, f"{path.name} uses {sink}: server data must become text nodes (dom.js)"
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", text), f"{path.name} loads something from the network"
    assert "@import url(http" not in text


def test_console_pages_carry_a_strict_content_security_policy():
    """Issue 23 finding 13: /ui sends a CSP without inline script or style, other origins or
    framing, X-Frame-Options DENY, no referrer and nosniff (the app owns them; a proxy adds HSTS)."""
    with inprocess_app() as ip:
        for path in ("/ui/", "/ui/index.html", "/ui/js/app.js", "/ui/console.css"):
            r = ip.client.get(path)
            csp = {d.split()[0]: d.split()[1:] for d in r.headers["content-security-policy"].split("; ")}
            assert csp["script-src"] == ["'self'"] and csp["style-src"] == ["'self'"], (path, csp)
            assert csp["default-src"] == ["'none'"] and csp["frame-ancestors"] == ["'none'"]
            assert csp["connect-src"] == ["'self'"] and csp["base-uri"] == ["'none'"]
            assert not any("unsafe" in v for values in csp.values() for v in values)
            assert r.headers["x-frame-options"] == "DENY" and r.headers["referrer-policy"] == "no-referrer"
            assert r.headers["x-content-type-options"] == "nosniff"
        assert "content-security-policy" not in ip.client.get("/health/live").headers  # the API is not a page
