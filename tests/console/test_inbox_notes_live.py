"""The inbox's notes on what it ignored survive its live socket's catch-up render.

An outside QA's find: ``/?status=any`` (the menu's value is ``all``), ``/?status=bogus&sort=bogus``,
``/?thread=…``, ``/?node=a&gate=b`` and an over-long search each answered with a note naming what was
ignored, and the socket's first render replaced the list within a second, without the note: the page
went on listing something else than what was asked for, and no longer said so.
"""

from __future__ import annotations

import re
import uuid
from html import unescape

import pytest

from tests.console.conftest import console_client
from tests.console.test_live import ORIGIN, Socket, _cookie, loop  # noqa: F401 - the module's event loop fixture

pytestmark = pytest.mark.usefixtures("live_db")


def _note(html: str) -> str:
    found = re.search(r'<p class="notice notice-error" role="alert">(.*?)</p>', html, re.S)
    return unescape(found.group(1)) if found else ""


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"status": "any"}, "status: 'any' is not a valid choice"),
        ({"status": "bogus", "sort": "bogus"}, "sort"),
        ({"thread": "abc"}, "the inbox does not filter by thread"),
        ({"node": "human_review", "gate": "identity_check"}, "gate ignored"),
        ({"q": "x" * 201}, "q: Ensure this value has at most 200 characters"),
    ],
)
def test_the_live_render_keeps_the_pages_note_on_what_it_ignored(personas, loop, query, named):  # noqa: F811
    persona = personas["reviewer"]
    html = console_client(persona).get("/", query).content.decode()
    note = _note(html)
    assert named in note, html[:2000]
    live_url = unescape(re.search(r'ws-connect="([^"]+)"', html).group(1))
    socket = Socket(loop, live_url, [ORIGIN, _cookie(persona)])
    assert socket.connect()[0]
    first = socket.receive()
    assert 'id="inbox-results"' in first
    assert _note(first) == note, f"the live render lost the note {note!r}"
    socket.close()


def test_a_page_without_a_note_gets_none_live(personas, loop):  # noqa: F811
    persona = personas["reviewer"]
    html = console_client(persona).get("/", {"q": uuid.uuid4().hex[:8]}).content.decode()
    live_url = unescape(re.search(r'ws-connect="([^"]+)"', html).group(1))
    socket = Socket(loop, live_url, [ORIGIN, _cookie(persona)])
    assert socket.connect()[0]
    assert _note(html) == "" and _note(socket.receive()) == ""
    socket.close()
