"""Browser pages on other origins may call /lg/ and /api/ when GATEHOUSE_CORS_ALLOWED_ORIGINS lists them.

LangGraph Studio, agent-chat-ui and a team's own pages call LangGraph Server from the browser on another origin;
LangGraph Server allows every origin, and Gatehouse answered every preflight 405, so no such page could use /lg/.
Gatehouse allows none by default, those listed when configured, and never with cookies (a session does not cross
origins). Real Chromium on a page served from another port decides, as it will for users.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client
from playwright.sync_api import Browser

from tests.conftest import Persona, daphne_serving, scaled, worker_env
from tests.console.test_browser import browser  # noqa: F401 - Debian's Chromium, launched as every browser test launches it

pytestmark = pytest.mark.usefixtures("live_db")


def test_without_configuration_no_origin_is_allowed(personas: dict[str, Persona]) -> None:
    client = Client()
    preflight = client.options(
        "/lg/threads/search",
        headers={"Origin": "http://studio.example", "Access-Control-Request-Method": "POST"},
    )
    assert preflight.status_code == 405
    assert "Access-Control-Allow-Origin" not in preflight.headers
    answered = client.post(
        "/lg/threads/search",
        {},
        content_type="application/json",
        headers={"Origin": "http://studio.example", "x-api-key": personas["reviewer"].token},
    )
    assert answered.status_code == 200
    assert "Access-Control-Allow-Origin" not in answered.headers


class _Page:
    """A static page on a port of its own: http://127.0.0.1:<port> is the allowed origin, http://localhost:<port>
    (the same page, another origin) is not."""

    def __init__(self, root: Path) -> None:
        (root / "index.html").write_text("<!doctype html><title>another origin</title>")
        handler = partial(SimpleHTTPRequestHandler, directory=str(root))
        handler.log_message = lambda *args: None  # type: ignore[method-assign]
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def allowed(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def other(self) -> str:
        return f"http://localhost:{self.port}"


@pytest.fixture(scope="module")
def page_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Page]:
    page = _Page(tmp_path_factory.mktemp("origin"))
    yield page
    page.server.shutdown()


@pytest.fixture(scope="module")
def served(
    django_db_setup: None, bank: Any, page_server: _Page, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("daphne") / "daphne.log"
    env = {**worker_env(bank), "GATEHOUSE_CORS_ALLOWED_ORIGINS": page_server.allowed}
    with daphne_serving(env, log_path, what="daphne allowing another origin") as (_, base):
        yield base


def test_a_listed_origin_is_answered_its_preflight_and_may_read_the_answers(
    served: str, page_server: _Page, personas: dict[str, Persona]
) -> None:
    origin = page_server.allowed
    with httpx.Client(base_url=served, timeout=scaled(10)) as http:
        preflight = http.options(
            "/lg/threads/search",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-api-key",
                "Access-Control-Request-Private-Network": "true",  # a public page calling a private address
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["Access-Control-Allow-Private-Network"] == "true"
        assert preflight.headers["Access-Control-Allow-Origin"] == origin
        assert "x-api-key" in preflight.headers["Access-Control-Allow-Headers"]
        assert "POST" in preflight.headers["Access-Control-Allow-Methods"]
        assert "Access-Control-Allow-Credentials" not in preflight.headers  # never with cookies

        answered = http.post(
            "/lg/threads/search", json={}, headers={"Origin": origin, "x-api-key": personas["reviewer"].token}
        )
        assert answered.status_code == 200
        assert answered.headers["Access-Control-Allow-Origin"] == origin
        assert "x-request-id" in answered.headers["Access-Control-Expose-Headers"]

        refused = http.get("/api/threads", headers={"Origin": origin})  # no token: the page may read why
        assert refused.status_code == 401 and refused.headers["Access-Control-Allow-Origin"] == origin

        other = http.options(
            "/lg/threads/search", headers={"Origin": page_server.other, "Access-Control-Request-Method": "POST"}
        )
        assert "Access-Control-Allow-Origin" not in other.headers
        console = http.get("/accounts/login/", headers={"Origin": origin})  # the console's pages: never
        assert console.status_code == 200 and "Access-Control-Allow-Origin" not in console.headers


FETCH = """async ([url, key, credentials]) => {
  try {
    const r = await fetch(url, {method: "POST", credentials, body: "{}",
                                headers: {"x-api-key": key, "content-type": "application/json"}});
    return {status: r.status, items: (await r.json()).length, requestId: r.headers.get("x-request-id")};
  } catch (e) {
    return {blocked: String(e)};
  }
}"""


@pytest.mark.integration
def test_chromium_on_a_listed_origin_calls_lg_and_an_unlisted_one_is_blocked(
    served: str,
    page_server: _Page,
    personas: dict[str, Persona],
    browser: Browser,  # noqa: F811
) -> None:
    token = personas["reviewer"].token
    url = f"{served}/lg/threads/search"
    page = browser.new_page()
    try:
        page.goto(f"{page_server.allowed}/")
        called = page.evaluate(FETCH, [url, token, "omit"])
        assert called.get("status") == 200 and called["items"] >= 0 and called["requestId"], called
        # Cookies never cross: a request that would carry them is blocked by the browser.
        assert "blocked" in page.evaluate(FETCH, [url, token, "include"])

        page.goto(f"{page_server.other}/")
        assert "blocked" in page.evaluate(FETCH, [url, token, "omit"])
    finally:
        page.close()
