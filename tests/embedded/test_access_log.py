"""The web process's access log leaves out the live relay's requests, and only those."""

from __future__ import annotations

import io

import pytest
from django.test import override_settings

from console.serve import AccessLog, relay_path

HTTP = {"client": ["127.0.0.1", 5000], "method": "POST", "status": 204, "size": 0}


def _logged(log: AccessLog, protocol: str, action: str, **details: object) -> str:
    stream = log.stream
    before = stream.getvalue()
    log(protocol, action, {**HTTP, **details})
    return str(stream.getvalue()[len(before) :])


def test_the_relays_posts_are_left_out_and_every_other_request_is_logged():
    log = AccessLog(io.StringIO(), quiet_path="/internal/live/")
    assert _logged(log, "http", "complete", path="/internal/live/") == ""
    assert '"POST /internal/live/x" 204' in _logged(log, "http", "complete", path="/internal/live/x")
    assert '"GET /inbox/" 200' in _logged(log, "http", "complete", path="/inbox/", method="GET", status=200)
    assert "WSCONNECT /ws/inbox/" in _logged(log, "websocket", "connected", path="/ws/inbox/")


def test_without_a_relay_nothing_is_left_out():
    log = AccessLog(io.StringIO(), quiet_path="")
    assert '"POST /internal/live/" 204' in _logged(log, "http", "complete", path="/internal/live/")


@pytest.mark.parametrize(
    "url,path", [("http://127.0.0.1:8123/internal/live/", "/internal/live/"), ("", "")], ids=["relay", "redis"]
)
def test_the_quiet_path_is_the_one_the_workers_post_to(url, path):
    with override_settings(GATEHOUSE_LIVE_RELAY_URL=url):
        assert relay_path() == path
