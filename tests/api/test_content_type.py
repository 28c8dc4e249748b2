"""A request body is read as JSON only when it says it is JSON (or says nothing): both APIs, one parser.

``POST /api/threads`` with ``Content-Type: text/plain`` and a JSON body created a thread (201), and a form
(``application/x-www-form-urlencoded``) was "malformed JSON" (400). Both are now a 415 naming ``Content-Type``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from django.test import Client

from runtime.models import Thread
from tests.conftest import Persona, loan_input

pytestmark = pytest.mark.usefixtures("live_db")

NOT_JSON = [
    "text/plain",
    "text/plain; charset=utf-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
    "application/xml",
    "text/json",
    "application/jsonx",
    "application/json-seq",
]
JSON = [
    "application/json",
    "application/json; charset=utf-8",
    "Application/JSON; Charset=UTF-8",
    "application/merge-patch+json",
    "application/vnd.gatehouse+json; charset=utf-8",
    "",  # no Content-Type at all: read as JSON, as before
]


def _send(persona: Persona, method: str, path: str, body: dict[str, Any], content_type: str) -> Any:
    headers = {"Authorization": f"Bearer {persona.token}"}
    return Client().generic(method, path, json.dumps(body), content_type=content_type, headers=headers)


def _creates(marker: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        ("POST", "/api/threads", {"graph": "loan_approval", "input": loan_input(), "metadata": {"case": marker}}),
        ("POST", "/lg/threads", {"metadata": {"case": marker}}),
    ]


@pytest.mark.parametrize("content_type", NOT_JSON)
@pytest.mark.parametrize("api", ["/api/", "/lg/"])
def test_a_body_sent_as_another_media_type_is_415_naming_content_type_and_writes_nothing(operator, api, content_type):
    marker = uuid.uuid4().hex
    [(method, path, body)] = [c for c in _creates(marker) if c[1].startswith(api)]
    response = _send(operator, method, path, body, content_type)
    assert response.status_code == 415, response.content
    error = response.json()["error"]
    assert (error["code"], error["field"]) == ("unsupported_media_type", "Content-Type"), error
    assert content_type.split(";")[0] in error["message"] and "application/json" in error["message"], error
    assert not Thread.objects.filter(metadata__case=marker).exists()


@pytest.mark.parametrize("content_type", JSON)
@pytest.mark.parametrize("api", ["/api/", "/lg/"])
def test_a_json_media_type_with_any_charset_is_read(operator, api, content_type):
    marker = uuid.uuid4().hex
    [(method, path, body)] = [c for c in _creates(marker) if c[1].startswith(api)]
    response = _send(operator, method, path, body, content_type)
    assert response.status_code in (200, 201), response.content
    assert Thread.objects.filter(metadata__case=marker).exists()


def test_a_put_is_refused_alike_and_changes_nothing(reviewer):
    response = _send(reviewer, "PUT", "/api/me/away", {"delegate": None}, "text/plain")
    assert response.status_code == 415 and response.json()["error"]["field"] == "Content-Type", response.content
    assert _send(reviewer, "PUT", "/api/me/away", {"delegate": None}, "application/json").status_code == 200


def test_an_over_long_content_type_is_not_repeated_whole(operator):
    content_type = "text/" + "x" * 5000
    response = _send(operator, "POST", "/lg/threads", {}, content_type)
    assert response.status_code == 415 and len(response.content) < 1000, response.content[:300]
