"""``GET /lg/ok`` and ``GET /lg/info``, which LangGraph Studio and other clients ask before anything else: both were
404, so a client that probes the server first took Gatehouse for no LangGraph server at all."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

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
    # Assistants are listed and read, crons served: a client hides what it cannot do, and shows what it can.
    assert info["flags"] == {"assistants": True, "crons": True, "langsmith": False}
    assert info["host"] == {"kind": "gatehouse"}


def test_an_assistant_has_one_version_the_registered_graph(personas: dict[str, Persona]) -> None:
    """``assistants.get_versions`` was a 404: an assistant here is its registered graph, one version a deploy
    replaces, listed as LangGraph Server lists versions (no ``updated_at``)."""
    client = Client()
    headers = {"x-api-key": personas["reviewer"].token}

    def versions(assistant: str, body: dict[str, object]) -> Any:
        return client.post(
            f"/lg/assistants/{assistant}/versions", body, content_type="application/json", headers=headers
        )

    listed = versions("loan_approval", {})
    assert listed.status_code == 200, listed.content
    (only,) = listed.json()
    got = client.get("/lg/assistants/loan_approval", headers=headers).json()
    assert only == {k: v for k, v in got.items() if k != "updated_at"}
    assert only["version"] == 1
    assert versions(only["assistant_id"], {"metadata": {"created_by": "system"}}).json() == [only]  # by id too
    assert versions("loan_approval", {"metadata": {"team": "x"}}).json() == []
    assert versions("loan_approval", {"offset": 1}).json() == []
    assert versions("nope", {}).status_code == 404
    refused = versions("loan_approval", {"limit": 0})
    assert refused.status_code == 422 and refused.json()["error"]["field"] == "limit"


def test_info_answers_where_gatehouse_is_not_an_installed_package(personas: dict[str, Persona], monkeypatch) -> None:
    """The image copies the source without installing it as a package: asking the distribution for its version
    raised there, and /info answered 500. The version is then pyproject.toml's."""
    import tomllib
    from importlib import metadata

    from tests.conftest import ROOT

    installed = metadata.version

    def version(name: str) -> str:
        if name == "gatehouse":
            raise metadata.PackageNotFoundError(name)
        return installed(name)

    monkeypatch.setattr(metadata, "version", version)
    answer = Client().get("/lg/info", headers={"x-api-key": personas["reviewer"].token})
    assert answer.status_code == 200, answer.content
    with open(ROOT / "pyproject.toml", "rb") as file:
        assert answer.json()["version"] == tomllib.load(file)["project"]["version"]


def test_assistants_count_counts_what_search_finds(personas: dict[str, Persona]) -> None:
    """``assistants.count`` was a 404 (a path not served)."""
    client = Client()

    def count(who: str, body: dict[str, object]) -> Any:
        headers = {"x-api-key": personas[who].token}
        return client.post("/lg/assistants/count", body, content_type="application/json", headers=headers)

    for who in ("reviewer", "loan_reviewer"):
        found = client.post(
            "/lg/assistants/search",
            {"limit": 1000},
            content_type="application/json",
            headers={"x-api-key": personas[who].token},
        ).json()
        answer = count(who, {})
        assert answer.status_code == 200, answer.content
        assert answer.json() == len(found) > 0
    assert count("loan_reviewer", {}).json() == 1  # only the graphs one may see
    assert count("reviewer", {"graph_id": "loan_approval"}).json() == 1
    assert count("reviewer", {"name": "LOAN_APP"}).json() == 1
    assert count("reviewer", {"graph_id": "nope"}).json() == 0
    assert count("reviewer", {"metadata": {"created_by": "system"}}).json() == count("reviewer", {}).json()
    assert count("reviewer", {"metadata": {"team": "x"}}).json() == 0
    assert count("reviewer", {"graph_id": 5}).status_code == 422
