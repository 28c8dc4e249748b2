"""A boolean where a body takes a number is a 422 naming the field (``lgplatform.schemas``): Pydantic's lax
mode read ``true`` as 1, so ``{"limit": true}`` listed one state and ``"ttl": true`` kept an item a minute."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.conftest import ApiClient, Persona
from tests.security.test_bad_input_edges import error_of

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def lg_thread(operator: Persona) -> str:
    return str(operator.client.post("/lg/threads", {}).json()["thread_id"])


def _put(api: ApiClient, body: dict[str, Any]) -> Any:
    return api.client.put("/lg/store/items", json.dumps(body), content_type="application/json", headers=api.headers)


@pytest.mark.parametrize(
    "path,field",
    [
        ("/lg/threads/{thread}/history", "limit"),
        ("/lg/threads/search", "limit"),
        ("/lg/threads/search", "offset"),
        ("/lg/assistants/search", "limit"),
        ("/lg/assistants/search", "offset"),
        ("/lg/store/items/search", "limit"),
        ("/lg/store/items/search", "offset"),
        ("/lg/store/namespaces", "limit"),
        ("/lg/store/namespaces", "offset"),
        ("/lg/store/namespaces", "max_depth"),
    ],
)
@pytest.mark.parametrize("boolean", [True, False])
def test_a_boolean_for_a_number_is_a_422_naming_it(personas, lg_thread, path, field, boolean):
    api = ApiClient(personas["admin"].token)
    assert error_of(api.post(path.format(thread=lg_thread), {field: boolean}), 422)["field"] == field
    assert api.post(path.format(thread=lg_thread), {field: 1}).status_code == 200


def test_a_boolean_store_ttl_is_a_422_naming_it(personas):
    api = ApiClient(personas["admin"].token)
    item = {"namespace": ["notes"], "key": "k", "value": {"a": 1}}
    assert error_of(_put(api, {**item, "ttl": True}), 422)["field"] == "ttl"


def test_a_boolean_after_seconds_is_a_422_naming_it(operator, lg_thread):
    body = {"assistant_id": "three_steps", "input": {"x": 1}, "after_seconds": False}
    assert error_of(operator.client.post(f"/lg/threads/{lg_thread}/runs", body), 422)["field"] == "after_seconds"


@pytest.mark.parametrize("wrong", [1, 0, "true", "yes"])
def test_a_number_or_string_for_a_body_boolean_is_a_422_naming_it(personas, lg_thread, wrong):
    """The other way round: ``{"subgraphs": 1}`` or ``"yes"`` read as true, where LangGraph Server's schemas
    take only a JSON boolean; a client sending them has a bug the answer should name."""
    api = ApiClient(personas["admin"].token)
    checkpoint = {"checkpoint": {"thread_id": lg_thread}, "subgraphs": wrong}
    answer = api.post(f"/lg/threads/{lg_thread}/state/checkpoint", checkpoint)
    assert error_of(answer, 422)["field"] == "subgraphs"
    run = {"assistant_id": "three_steps", "input": {"x": 1}, "stream_subgraphs": wrong}
    assert error_of(api.post(f"/lg/threads/{lg_thread}/runs", run), 422)["field"] == "stream_subgraphs"
    item = {"namespace": ["notes"], "key": "k", "value": {"a": 1}}
    assert error_of(_put(api, {**item, "index": wrong}), 422)["field"] == "index"
    assert error_of(api.post("/lg/store/items/search", {"refresh_ttl": wrong}), 422)["field"] == "refresh_ttl"
    # Each takes a JSON boolean.
    assert api.post(f"/lg/threads/{lg_thread}/state/checkpoint", {**checkpoint, "subgraphs": True}).status_code == 200
    assert _put(api, {**item, "index": False}).status_code == 204
    assert api.post("/lg/store/items/search", {"refresh_ttl": True}).status_code == 200
