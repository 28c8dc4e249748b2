"""A live page in real Chromium while the web process loses Redis (daphne reaches it through a proxy the test cuts)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.conftest import daphne_serving, worker_env
from tests.console.test_browser import WAIT_MS, _sign_in, browser  # noqa: F401 (fixture)
from tests.factories import task_make
from tests.faults.proxy import CuttableProxy

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


@pytest.fixture
def proxied(django_db_setup: None, bank: Any, tmp_path: Path) -> Iterator[tuple[str, CuttableProxy]]:
    """daphne whose Redis (channel layer and broker) is behind a proxy the test cuts; (base URL, proxy)."""
    parts = urlsplit(settings.REDIS_URL)
    proxy = CuttableProxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    env = {
        **worker_env(bank),
        "REDIS_URL": f"redis://127.0.0.1:{proxy.port}{parts.path or '/0'}",
        "GATEHOUSE_SERVE_STATIC": "true",
        "SECURE_COOKIES": "false",
        "SECURE_SSL_REDIRECT": "false",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    log_path = tmp_path / "daphne.log"
    try:
        with daphne_serving(env, log_path, what="daphne to serve the console") as (_, base):
            yield base, proxy
    finally:
        proxy.close()
    log = log_path.read_text(errors="replace")
    assert "Traceback" not in log and "Unexpected exception" not in log, log[-3000:]


def test_the_indicator_says_paused_while_the_server_has_lost_redis_and_live_once_it_caught_up(
    browser,  # noqa: F811
    proxied,
    personas,
):
    base, proxy = proxied
    case = f"O-{uuid.uuid4().hex[:6]}"
    page = _sign_in(browser, base, personas["reviewer2"], f"/?q={case}")
    indicator = page.locator("#live-indicator")
    expect(indicator).to_have_text("live")

    proxy.cut("refuse")
    expect(indicator).to_have_text("paused")
    expect(page.locator("#live-paused")).to_contain_text("Live updates paused")
    missed = task_make(metadata={"case": case})  # its event is published while the page hears nothing

    proxy.restore()
    expect(indicator).to_have_text("live", timeout=WAIT_MS)
    expect(page.locator("#live-paused")).to_have_count(0)
    expect(page.locator(f'#inbox-results tr[data-task-id="{missed.pk}"]')).to_have_count(1)  # caught up

    heard = task_make(metadata={"case": case})  # and it hears events again
    expect(page.locator(f'#inbox-results tr[data-task-id="{heard.pk}"]')).to_have_count(1, timeout=WAIT_MS)
    page.context.close()
