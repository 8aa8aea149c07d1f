"""Real-browser fixtures: Debian's Chromium driven by Playwright (no browser download).

One Chromium for the module; each test gets a fresh context (its own sessionStorage, so its
own key) and fails at teardown if the page logged a JavaScript error or a Content-Security-Policy
violation. HTTP answers the page
handles itself (a 404 "no clip yet", the 403 it shows to a viewer) are logged by Chromium as
"Failed to load resource: ... status of 4xx"; those are not JavaScript errors and are not
counted, a 5xx is.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import REPO, LiveServer, require_system_package, start_server

CHROMIUM = os.environ.get("CAMPUSGUARD_TEST_CHROMIUM", "/usr/bin/chromium")
# The README's screenshots are refreshed on request only (UPDATE_SCREENSHOTS=1 make test, then look
# at them before committing); otherwise they go to a temporary folder and the tree stays clean.
if os.environ.get("UPDATE_SCREENSHOTS") == "1":
    SHOTS = REPO / "docs" / "console"
else:
    SHOTS = Path(tempfile.mkdtemp(prefix="campusguard-screenshots-"))
    atexit.register(shutil.rmtree, SHOTS, ignore_errors=True)
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
HANDLED_HTTP = "Failed to load resource: the server responded with a status of 4"
# The console runs under a strict Content-Security-Policy (app/console/__init__.py): anything it
# blocks is a console error, so every test fails on a violation, not only on an exception.
CSP_REPORTER = ("document.addEventListener('securitypolicyviolation', (e) => console.error("
                "`CSP violation: ${e.violatedDirective} blocked ${e.blockedURI || 'inline'}`));")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
    path = CHROMIUM if Path(CHROMIUM).is_file() else shutil.which("chromium")
    require_system_package(path, "Chromium", "chromium chromium-driver")
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=path,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        yield chromium
        chromium.close()


class Console:
    """What a page printed: JavaScript errors (uncaught exceptions and console.error)."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def on_console(self, msg) -> None:
        if msg.type == "error" and not msg.text.startswith(HANDLED_HTTP):
            self.errors.append(f"console.error: {msg.text} ({msg.location.get('url')})")

    def on_pageerror(self, exc) -> None:
        self.errors.append(f"uncaught: {exc}")


@pytest.fixture
def open_page(browser):
    """open_page(base_url, key=None, viewport=DESKTOP) -> a Page with the key already in its
    session (None: the page will ask). Asserts no JavaScript error at teardown."""
    contexts, consoles = [], []

    def factory(base_url: str, key: str | None = None, viewport: dict = DESKTOP):
        context = browser.new_context(viewport=viewport, base_url=base_url)
        context.add_init_script(CSP_REPORTER)
        if key is not None:
            context.add_init_script(f"sessionStorage.setItem('campusguard.apiKey', {key!r});")
        page = context.new_page()
        page.set_default_timeout(45_000)  # four workers on two cores: a page can wait 20 s behind a torch start
        console = Console()
        page.on("console", console.on_console)
        page.on("pageerror", console.on_pageerror)
        contexts.append(context)
        consoles.append(console)
        return page

    yield factory
    errors = [e for c in consoles for e in c.errors]
    for context in contexts:
        context.close()
    assert errors == [], "JavaScript errors in the console:\n" + "\n".join(errors)


def screenshot(page, name: str) -> None:
    """<name>.png: into docs/console/ (shown in the README) with UPDATE_SCREENSHOTS=1, else a temp folder."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


def console_server(tmp: Path, weights: Path, site: Path, keys: dict[str, str], **settings) -> LiveServer:
    """A real `campusguard serve` as the console tests use it: ``site`` as its site file, its
    event store and snapshots under ``tmp``, and a key per role (``{role: key}``)."""
    return start_server(tmp, weights, site_config=site, events_db_url=f"sqlite:///{tmp}/events.db",
                        snapshot_dir=tmp / "snaps", api_keys=",".join(f"{role}:{key}" for role, key in keys.items()),
                        **settings)


@contextlib.contextmanager
def client(server: LiveServer, key: str, timeout: float = 60) -> Iterator[httpx.Client]:
    """An HTTP client of ``server`` sending ``key`` (the tests' side door to the JSON routes)."""
    with httpx.Client(base_url=server.url, headers={"x-api-key": key}, timeout=timeout) as http:
        yield http


# --- the Models page (test_console_models.py, test_console_rollout.py) ---------------------------
def goto_models(page) -> None:
    page.goto("/ui/#/models")
    page.wait_for_selector("body[data-ready=true]")
    page.locator("article.model").first.wait_for()


def card(page, name: str):
    """The model card of ``name``."""
    return page.locator(f"article.model[data-model='{name}']")


def fact(scope, name: str) -> str:
    """The text of the ``<dd>`` after the ``<dt>`` reading ``name`` in ``scope``."""
    return scope.locator(f"dt:text-is('{name}') + dd").first.inner_text()


def no_horizontal_overflow(page) -> None:
    width, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= inner, f"page is {width} px wide in a {inner} px window"
