"""``threads.update`` (``PATCH /lg/threads/{id}``) was a 405: chat clients title their threads through it. It
merges metadata as LangGraph Server does, for those who may start threads, on threads they may see, without
letting a thread's graph be relabelled (clients list an assistant's threads by ``graph_id``), and audited."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import transaction

from approvals.inputs import MAX_METADATA_BYTES
from approvals.models import AuditAction, AuditEvent
from runtime.models import Thread
from tests.approvals.races import Side
from tests.conftest import ApiClient, Persona
from tests.security.test_bad_input_edges import error_of

pytestmark = pytest.mark.usefixtures("live_db")


def _patch(client: ApiClient, thread: str, body: Any) -> Any:
    return client.client.patch(f"/lg/threads/{thread}", body, content_type="application/json", headers=client.headers)


def _thread(persona: Persona, **metadata: Any) -> str:
    made = persona.client.post("/lg/threads", {"metadata": {"graph_id": "three_steps", **metadata}})
    assert made.status_code == 200, made.content
    return str(made.json()["thread_id"])


def test_metadata_merges_key_by_key_and_the_change_is_audited(operator):
    thread = _thread(operator, case="C-1", owner="ana")
    before = Thread.objects.get(pk=thread)
    answer = _patch(operator.client, thread, {"metadata": {"title": "Refund", "owner": "bo", "case": None}})
    assert answer.status_code == 200, answer.content
    expected = {"graph_id": "three_steps", "owner": "bo", "case": None, "title": "Refund"}
    assert {k: v for k, v in answer.json()["metadata"].items() if k != "assistant_id"} == expected
    assert operator.client.get(f"/lg/threads/{thread}").json()["metadata"] == answer.json()["metadata"]
    found = operator.client.post("/lg/threads/search", {"metadata": {"title": "Refund"}, "ids": [thread]}).json()
    assert [t["thread_id"] for t in found] == [thread]
    after = Thread.objects.get(pk=thread)
    assert after.updated_at == before.updated_at  # the state's time, which state_updated_at reports
    [event] = AuditEvent.objects.filter(thread_id=thread, action=AuditAction.THREAD_METADATA_UPDATED)
    assert event.actor_id == operator.user.pk and event.graph == "three_steps"
    assert event.details["metadata"] == {"title": "Refund", "owner": "bo", "case": None}
    assert event.details["previous"] == {"owner": "ana", "case": "C-1"}


def test_nothing_sent_changes_nothing_but_is_still_an_answer(operator):
    thread = _thread(operator, case="C-2")
    answer = _patch(operator.client, thread, {})
    assert answer.status_code == 200 and answer.json()["metadata"]["case"] == "C-2"


def test_a_reviewer_may_not_and_nothing_changes(operator, reviewer):
    thread = _thread(operator, case="C-3")
    error_of(_patch(reviewer.client, thread, {"metadata": {"case": "mine"}}), 403)
    assert Thread.objects.get(pk=thread).metadata["case"] == "C-3"


def test_an_operator_of_another_graph_gets_a_404_and_nothing_changes(operator, loan_operator):
    thread = _thread(operator, case="C-4")
    assert error_of(_patch(loan_operator.client, thread, {"metadata": {"case": "x"}}), 404)["field"] == "thread_id"
    assert Thread.objects.get(pk=thread).metadata["case"] == "C-4"


@pytest.mark.parametrize(
    "metadata,field",
    [
        ({"graph_id": "loan_approval"}, "metadata.graph_id"),
        ({"assistant_id": "00000000-0000-0000-0000-000000000000"}, "metadata.assistant_id"),
        ({"graph_id": None}, "metadata.graph_id"),
        ({"big": "x" * MAX_METADATA_BYTES}, "metadata"),
    ],
)
def test_a_refused_update_names_the_field_and_changes_nothing(operator, metadata, field):
    thread = _thread(operator, case="C-5")
    error = error_of(_patch(operator.client, thread, {"metadata": {"case": "changed", **metadata}}), 422)
    assert error["field"] == field, error
    assert Thread.objects.get(pk=thread).metadata == {"graph_id": "three_steps", "case": "C-5"}
    assert not AuditEvent.objects.filter(thread_id=thread, action=AuditAction.THREAD_METADATA_UPDATED).exists()


def test_what_the_thread_reports_may_be_repeated(operator):
    thread = _thread(operator)
    reported = operator.client.get(f"/lg/threads/{thread}").json()["metadata"]
    same = {"graph_id": "three_steps", "assistant_id": reported["assistant_id"], "case": "C-6"}
    assert _patch(operator.client, thread, {"metadata": same}).status_code == 200


def test_a_thread_without_a_graph_is_not_given_one_by_an_update(operator):
    made = operator.client.post("/lg/threads", {}).json()["thread_id"]
    error = error_of(_patch(operator.client, made, {"metadata": {"graph_id": "three_steps"}}), 422)
    assert error["field"] == "metadata.graph_id" and "first run" in error["message"]
    assert Thread.objects.get(pk=made).graph == ""


def test_ttl_unknown_and_malformed_threads_are_refused(operator):
    thread = _thread(operator)
    assert error_of(_patch(operator.client, thread, {"ttl": {"ttl": 5}}), 422)["field"] == "ttl"
    unknown = "00000000-0000-0000-0000-000000000000"
    assert error_of(_patch(operator.client, unknown, {"metadata": {"a": 1}}), 404)["field"] == "thread_id"
    assert error_of(_patch(operator.client, "nope", {"metadata": {"a": 1}}), 422)["field"] == "thread_id"
    assert error_of(_patch(operator.client, thread, {"metadata": "title"}), 422)["field"] == "metadata"


def test_two_updates_at_once_merge_in_turn_and_neither_key_is_lost(operator):
    """Metadata merges key by key: an update that read the thread before another one committed would write
    its merge over the other's key. Controlled, not hoped for: this test holds the thread's row, sees the
    PATCH queue behind it, commits a key of its own as the other writer, and only then lets the PATCH go on.
    The PATCH must read what was committed before it (the row lock it takes before reading) and keep both."""
    thread = _thread(operator, case="C-9")
    racer = Side(lambda: _patch(operator.client, thread, {"metadata": {"title": "Refund"}}))
    with transaction.atomic():
        held = Thread.objects.select_for_update().get(pk=thread)
        racer.start()
        racer.queued("the PATCH to wait for the thread's row")
        Thread.objects.filter(pk=thread).update(metadata={**held.metadata, "owner": "bo"})
    patched = racer.outcome()

    assert patched.status_code == 200, patched.content
    merged = Thread.objects.get(pk=thread).metadata
    assert (merged["case"], merged["owner"], merged["title"]) == ("C-9", "bo", "Refund"), merged
