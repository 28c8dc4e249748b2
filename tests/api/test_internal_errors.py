"""Any unexpected error in either API is a 500 in the API's JSON error body, logged once with its traceback.

Ninja's default handler re-raised it to Django, whose answer was an HTML "Server Error (500)" page.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.core.exceptions import PermissionDenied

from approvals import api as native_api
from lgplatform import services as platform
from tests.api.test_bad_input import error_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


def _defect(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a defect")


def test_an_unexpected_error_in_the_native_api_is_a_json_500_logged_once(operator, monkeypatch, caplog):
    monkeypatch.setattr(native_api, "graph_names", _defect)
    with caplog.at_level(logging.ERROR):
        error = error_of(operator.client.get("/api/graphs"), 500)
    assert error["code"] == "internal" and error["field"] is None
    assert "a defect" not in error["message"]  # the cause is in the log, not told to the client
    [logged] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert logged.exc_info and logged.exc_info[1].args == ("a defect",)


def test_an_unexpected_error_in_the_platform_api_is_a_json_500_logged_once(operator, monkeypatch, caplog):
    monkeypatch.setattr(platform, "assistant_graph", _defect)
    with caplog.at_level(logging.ERROR):
        error = error_of_platform(operator.client.get("/lg/assistants/loan_approval/schemas"), 500)
    assert error["code"] == "internal"
    [logged] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert logged.exc_info and logged.exc_info[1].args == ("a defect",)


def error_of_platform(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["detail"] == body["error"]["message"]
    return dict(body["error"])


def test_what_django_answers_itself_is_left_to_it(operator, monkeypatch):
    """Django's own 4xx exceptions (a refused permission, a suspicious request) keep their status."""

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise PermissionDenied("no")

    monkeypatch.setattr(native_api, "graph_names", refused)
    assert operator.client.get("/api/graphs").status_code == 403
