"""A console page refused before its view (a NUL byte in its query, path, header or form; a body over the limit)
answers with the console's error page, not the APIs' JSON, which a browser showed as raw text (and an htmx swap
in place of the page's content). The APIs keep their JSON."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.conftest import Persona

pytestmark = pytest.mark.usefixtures("live_db")


def _signed_in(persona: Persona) -> Client:
    client = Client()
    client.force_login(persona.user)
    return client


@pytest.mark.parametrize(
    "path,status,says",
    [
        ("/accounts/login/?next=%00", 422, "next: the text contains a NUL byte"),
        ("/threads/?graph=a%00b", 422, "graph: the text contains a NUL byte"),
        ("/threads/%00/", 400, "the URL path contains a NUL byte"),
    ],
)
def test_a_console_page_refused_before_its_view_is_a_console_page(
    personas: dict[str, Persona], path: str, status: int, says: str
) -> None:
    client = _signed_in(personas["reviewer"])
    page = client.get(path)
    assert page.status_code == status
    assert page["Content-Type"].startswith("text/html")
    html = page.content.decode()
    assert "<html" in html and says in html and 'role="alert"' in html
    swapped = client.get(path, headers={"HX-Request": "true"})  # an htmx swap gets the notice alone
    assert swapped.status_code == status and says in swapped.content.decode()
    assert "<html" not in swapped.content.decode()


def test_a_console_form_over_the_body_limit_is_refused_with_a_page(personas: dict[str, Persona], settings) -> None:
    settings.GATEHOUSE_MAX_BODY_BYTES = 100
    page = _signed_in(personas["admin"]).post("/settings/away", {"note": "x" * 500})
    assert page.status_code == 413 and page["Content-Type"].startswith("text/html")
    assert "over the limit of 100 bytes" in page.content.decode()


def test_the_apis_keep_their_json(personas: dict[str, Persona]) -> None:
    headers = {"Authorization": f"Bearer {personas['reviewer'].token}"}
    for path in ("/api/threads?graph=a%00b", "/lg/threads/%00"):
        answer = Client().get(path, headers=headers)
        assert answer.status_code in (400, 422) and answer["Content-Type"] == "application/json"
        assert "NUL byte" in answer.json()["error"]["message"]
