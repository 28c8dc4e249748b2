"""``GET /lg/ok`` and ``GET /lg/info``, which LangGraph Studio and other clients ask before anything else: both were
404, so a client that probes the server first took Gatehouse for no LangGraph server at all."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from django.test import Client

from tests.conftest import Persona

pytestmark = pytest.mark.usefixtures("live_db")


def test_ok_answers_without_credentials() -> None:
    answer = Client().get("/lg/ok")
    assert answer.status_code == 200
    assert answer.json() == {"ok": True}


def test_info_says_what_is_served_to_a_signed_in_client_only(personas: dict[str, Persona]) -> None:
    client = Client()
    assert client.get("/lg/info").status_code == 401  # it names versions
    answer = client.get("/lg/info", headers={"x-api-key": personas["reviewer"].token})
    assert answer.status_code == 200
    info = answer.json()
    assert info["version"] == version("gatehouse")
    assert info["langgraph_py_version"] == version("langgraph")
    # Assistants are listed and read; there are no crons: a client hides what it cannot do.
    assert info["flags"] == {"assistants": True, "crons": False, "langsmith": False}
    assert info["host"] == {"kind": "gatehouse"}
