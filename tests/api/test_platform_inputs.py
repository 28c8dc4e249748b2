"""/lg/ reads its input as LangGraph Server does, and refuses what it cannot honour with a 422 naming it.

Ids in paths take every form ``uuid.UUID()`` reads; a malformed one is the JSON error naming the
parameter, never Django's HTML 404; a method a path does not serve is a JSON 405 (on /api/ too).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from approvals.models import AuditEvent
from runtime import runs
from runtime.executor import run_execute
from runtime.models import Run, Thread
from tests.conftest import loan_input, thread_start
from tests.security.test_bad_input_edges import error_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


@pytest.fixture
def lg_thread(operator) -> str:
    response = operator.client.post("/lg/threads", {})
    assert response.status_code == 200, response.content
    return str(response.json()["thread_id"])


def _forms(thread_id: str) -> list[str]:
    hexed = uuid.UUID(thread_id).hex
    return [
        thread_id.upper(),
        hexed,
        hexed.upper(),
        "{" + thread_id + "}",
        "urn:uuid:" + thread_id,
        f"{hexed[:8]}-{hexed[8:]}",  # hyphens where uuid.UUID() does not look for them
    ]


@pytest.mark.parametrize("form", range(6))
def test_a_thread_id_in_any_form_uuid_reads_names_the_thread(operator, lg_thread, form):
    written = _forms(lg_thread)[form]
    response = operator.client.get(f"/lg/threads/{written}")
    assert response.status_code == 200, response.content
    assert response.json()["thread_id"] == lg_thread
    assert operator.client.get(f"/lg/threads/{written}/runs").status_code == 200


def _run_path(thread_id: str, bad: str) -> str:
    return f"/lg/threads/{thread_id}/runs/{bad}"


@pytest.mark.parametrize(
    "method,path,field",
    [
        ("get", "/lg/threads/{bad}", "thread_id"),
        ("get", "/lg/threads/{bad}/state", "thread_id"),
        ("post", "/lg/threads/{bad}/history", "thread_id"),
        ("post", "/lg/threads/{bad}/runs", "thread_id"),
        ("post", "/lg/threads/{bad}/runs/wait", "thread_id"),
        ("post", "/lg/threads/{bad}/copy", "thread_id"),
        ("get", "/lg/threads/{thread}/runs/{bad}", "run_id"),
        ("get", "/lg/threads/{thread}/runs/{bad}/join", "run_id"),
        ("post", "/lg/threads/{thread}/runs/{bad}/cancel", "run_id"),
        ("get", "/lg/threads/{thread}/state/{bad}", "checkpoint_id"),
    ],
)
@pytest.mark.parametrize("bad", ["x", "not-a-uuid", "0" * 33, "00000000-0000-0000-0000-00000000000g"])
def test_a_malformed_id_in_a_path_is_a_422_naming_it(operator, lg_thread, method, path, field, bad):
    url = path.format(bad=bad, thread=lg_thread)
    response = getattr(operator.client, method)(url)
    error = error_of(response, 422)
    assert error["field"] == field
    assert error["message"] == f"{field}: must be a UUID"
    assert response.json()["detail"] == error["message"]  # where the SDK reads it


def test_a_well_formed_unknown_checkpoint_is_still_a_404(operator, lg_thread):
    response = operator.client.get(f"/lg/threads/{lg_thread}/state/{uuid.uuid4()}")
    assert error_of(response, 404)["field"] == "checkpoint_id"


def test_a_malformed_id_on_the_native_api_is_a_422_naming_it_too(operator):
    error = error_of(operator.client.get("/api/threads/x"), 422)
    assert (error["field"], error["message"]) == ("thread_id", "thread_id: must be a UUID")


@pytest.mark.parametrize(
    "method,path,allowed",
    [
        ("delete", "/lg/threads/{thread}", "GET, PATCH"),
        ("post", "/lg/threads/{thread}", "GET, PATCH"),  # the SDK's threads.update is PATCH; a POST is refused
        ("get", "/lg/threads/count", "POST"),
        ("get", "/lg/threads/{thread}/runs/wait", "POST"),
        ("get", "/lg/threads/search", "POST"),
        ("delete", "/api/threads/{thread}", "GET"),
    ],
)
def test_a_method_a_path_does_not_serve_is_a_json_405_with_allow(operator, lg_thread, method, path, allowed):
    response = getattr(operator.client, method)(path.format(thread=lg_thread))
    error = error_of(response, 405)
    assert error["code"] == "method_not_allowed" and method.upper() in error["message"]
    assert response["Content-Type"].startswith("application/json")
    assert set(response["Allow"].split(", ")) == set(allowed.split(", "))  # in ninja's order


def test_an_sdk_call_not_served_is_a_404_not_a_405_naming_a_method_that_fails_there_too(operator, lg_thread):
    """threads.prune's GET reads "prune" as a thread: a POST there was a 405 "this path serves GET". (Crons were
    such a call, refused so, until they were served: tests/integration/test_platform_crons.py.)"""
    response = operator.client.post("/lg/threads/prune", {})
    error = error_of(response, 404)
    assert error["field"] == "path" and "is not a path of this API" in error["message"], error
    # It says why: a client told only "no such path" takes the server for an old one.
    assert "none is pruned" in error["message"], error
    assert "Allow" not in response


def test_threads_join_stream_refuses_a_run_mode_naming_the_modes_a_thread_stream_has(operator, lg_thread):
    """A run's stream modes are not a thread's (run_modes, lifecycle, state_update): refused before the stream,
    naming the field, not streamed as nothing."""
    response = operator.client.get(f"/lg/threads/{lg_thread}/stream?stream_mode=values")
    error = error_of(response, 422)
    assert error["field"] == "stream_mode" and "run_modes, lifecycle, state_update" in error["message"], error


@pytest.mark.parametrize(
    "path,why",
    [("/lg/threads/{thread}", "keeps every thread"), ("/lg/threads/{thread}/runs/{run}", "keeps every run")],
)
def test_threads_delete_and_runs_delete_say_why_they_are_refused(operator, lg_thread, path, why):
    """threads.delete and runs.delete were a bare "DELETE is not served here": a client could not tell a
    deliberate refusal from a missing feature. Other refused methods keep the plain message."""
    url = path.format(thread=lg_thread, run=uuid.uuid4())
    error = error_of(operator.client.delete(url), 405)
    assert why in error["message"] and "cancel" in error["message"], error
    plain = error_of(operator.client.client.put(url, "{}", content_type="application/json"), 405)
    assert plain["message"].startswith("PUT is not served here; this path serves"), plain


def test_a_patch_is_a_json_405_too(operator, lg_thread):
    response = operator.client.client.patch(
        f"/lg/threads/{lg_thread}/state", "{}", content_type="application/json", headers=operator.client.headers
    )
    assert error_of(response, 405)["code"] == "method_not_allowed"


def test_the_static_paths_beside_an_id_still_serve_their_operations(operator, lg_thread):
    # /runs/wait, /runs/stream and /state/checkpoint sit where a run or checkpoint id could.
    body: dict[str, Any] = {"assistant_id": "no-such-assistant"}
    for path in ("runs/wait", "runs/stream"):
        response = operator.client.post(f"/lg/threads/{lg_thread}/{path}", body)
        assert error_of(response, 404)["field"] == "assistant_id", path
    response = operator.client.post(f"/lg/threads/{lg_thread}/state/checkpoint", {"checkpoint": {}})
    assert response.status_code == 200, response.content


# --- time travel: threads.copy needs a reason, as fork and replay do ------------------------------


@pytest.fixture
def started_thread(operator) -> str:
    return str(thread_start(operator, "loan_approval", loan_input())["id"])


@pytest.mark.parametrize("headers", [{}, {"X-Gatehouse-Reason": "  "}, {"X-Gatehouse-Reason": "r" * 8000}])
def test_a_copy_without_a_reason_or_with_an_uncapped_one_is_a_422_naming_reason(operator, started_thread, headers):
    before = Thread.objects.count()
    response = operator.client.client.post(
        f"/lg/threads/{started_thread}/copy",
        "{}",
        content_type="application/json",
        headers={**_auth(operator), **headers},
    )
    assert error_of(response, 422)["field"] == "reason"
    assert Thread.objects.count() == before
    assert not AuditEvent.objects.filter(action="thread.copied", details__copied_from=started_thread).exists()


def test_a_copy_with_a_reason_is_made_and_audited_with_it(operator, started_thread):
    response = operator.client.client.post(
        f"/lg/threads/{started_thread}/copy",
        "{}",
        content_type="application/json",
        headers={**_auth(operator), "X-Gatehouse-Reason": "a copy to try a fix on"},
    )
    assert response.status_code == 200, response.content
    event = AuditEvent.objects.get(action="thread.copied", details__copied_from=started_thread)
    assert event.details["reason"] == "a copy to try a fix on"


def _auth(persona: Any) -> dict[str, str]:
    return dict(persona.client.headers)


# --- a request with no body names the body ---------------------------------------------------------


@pytest.mark.parametrize(
    "method,path",
    [
        ("delete", "/lg/store/items"),
        ("put", "/lg/store/items"),
        ("post", "/lg/threads/search"),
        ("post", "/api/threads"),
    ],
)
def test_a_request_without_its_body_is_a_422_naming_body(operator, method, path):
    response = getattr(operator.client.client, method)(
        path, "", content_type="application/json", headers=_auth(operator)
    )
    error = error_of(response, 422)
    assert error["field"] == "body" and "required" in error["message"]


def test_a_store_delete_without_its_key_names_it(operator):
    response = operator.client.client.delete(
        "/lg/store/items", '{"namespace": ["notes"]}', content_type="application/json", headers=_auth(operator)
    )
    assert error_of(response, 422)["field"] == "key"


# --- threads.count: what threads.search finds for the caller, counted ------------------------------


def _search_count(persona: Any, body: dict[str, Any]) -> tuple[int, int]:
    found = persona.post("/lg/threads/search", {**body, "limit": 1000})
    counted = persona.post("/lg/threads/count", body)
    assert found.status_code == counted.status_code == 200, (found.content, counted.content)
    return len(found.json()), counted.json()


def test_threads_count_counts_what_search_finds_for_the_caller(operator, loan_operator):
    case = f"count-{uuid.uuid4().hex[:8]}"
    for metadata in ({"graph_id": "loan_approval"}, {"graph_id": "kyc_onboarding"}, {}):
        assert operator.client.post("/lg/threads", {"metadata": {"case": case, **metadata}}).status_code == 200
    assert loan_operator.post("/lg/threads", {"metadata": {"case": case}}).status_code == 200
    # an operator of every graph sees all four; the loan operator the loan thread and its own unbound one
    assert _search_count(operator.client, {"metadata": {"case": case}}) == (4, 4)
    assert _search_count(loan_operator, {"metadata": {"case": case}}) == (2, 2)
    assert _search_count(loan_operator, {"metadata": {"case": case, "graph_id": "kyc_onboarding"}}) == (0, 0)
    assert _search_count(operator.client, {"metadata": {"case": case}, "status": "idle"}) == (4, 4)
    assert _search_count(operator.client, {"metadata": {"case": case}, "status": "busy"}) == (0, 0)
    assert _search_count(operator.client, {"metadata": {"case": case}, "values": {"amount": 1}}) == (0, 0)


@pytest.mark.parametrize(
    "body,field",
    [({"status": "bogus"}, "status"), ({"metadata": "x"}, "metadata"), ({"values": [1]}, "values")],
)
def test_threads_count_refuses_what_search_refuses(operator, body, field):
    assert error_of(operator.client.post("/lg/threads/count", body), 422)["field"] == field


# --- lenient options refused, history read as LangGraph Server reads it ---------------------------


@pytest.fixture
def paused_loan(operator, monkeypatch) -> tuple[str, list[str]]:
    """A loan thread started on /lg/ and executed here to its gate: (thread id, its checkpoints newest first)."""
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: None)  # executed below, by this process
    thread_id = str(operator.client.post("/lg/threads", {}).json()["thread_id"])
    run = operator.client.post(
        f"/lg/threads/{thread_id}/runs", {"assistant_id": "loan_approval", "input": loan_input()}
    )
    assert run.status_code == 200, run.content
    run_execute(run_id=run.json()["run_id"])
    history = operator.client.post(f"/lg/threads/{thread_id}/history", {"limit": 100}).json()
    assert len(history) >= 2, history
    return thread_id, [h["checkpoint"]["checkpoint_id"] for h in history]


def test_assistants_search_refuses_an_unknown_sort_by(operator):
    error = error_of(operator.client.post("/lg/assistants/search", {"sort_by": "nope"}), 422)
    assert error["field"] == "sort_by"


def test_assistants_search_sorts_by_name(operator):
    """Descending unless asked otherwise, as LangGraph Server sorts (langgraph dev 0.16.7)."""
    ids = operator.client.post("/lg/assistants/search", {"sort_by": "name", "limit": 1000}).json()
    names = [a["name"] for a in ids]
    assert names == sorted(names, reverse=True)
    asc = operator.client.post("/lg/assistants/search", {"sort_by": "name", "sort_order": "asc", "limit": 1000})
    assert [a["name"] for a in asc.json()] == sorted(names)


@pytest.mark.parametrize("supersteps", [[], [{"updates": []}]])
def test_a_thread_with_supersteps_even_none_is_refused(operator, supersteps):
    before = Thread.objects.count()
    error = error_of(operator.client.post("/lg/threads", {"supersteps": supersteps}), 422)
    assert error["field"] == "supersteps"
    assert Thread.objects.count() == before


@pytest.mark.parametrize(
    "before",
    [
        lambda cp: cp,
        lambda cp: {"checkpoint_id": cp},
        lambda cp: {"configurable": {"checkpoint_id": cp}},
    ],
    ids=["id", "checkpoint", "config"],
)
def test_history_before_a_checkpoint_pages_in_every_form(operator, paused_loan, before):
    thread_id, checkpoints = paused_loan
    page = operator.client.post(f"/lg/threads/{thread_id}/history", {"before": before(checkpoints[0])}).json()
    assert [h["checkpoint"]["checkpoint_id"] for h in page] == checkpoints[1:]
    unknown = operator.client.post(f"/lg/threads/{thread_id}/history", {"before": before(str(uuid.uuid4()))})
    assert unknown.status_code == 200 and unknown.json() == []  # as LangGraph Server: not the full history


def test_history_before_an_unknown_checkpoint_is_empty_on_get_too(operator, paused_loan):
    thread_id, checkpoints = paused_loan
    page = operator.client.get(f"/lg/threads/{thread_id}/history", before=checkpoints[0], limit=100).json()
    assert [h["checkpoint"]["checkpoint_id"] for h in page] == checkpoints[1:]
    assert operator.client.get(f"/lg/threads/{thread_id}/history", before=str(uuid.uuid4())).json() == []
    everything = operator.client.get(f"/lg/threads/{thread_id}/history", limit=100).json()
    assert [h["checkpoint"]["checkpoint_id"] for h in everything] == checkpoints
    # the native API's history reads the same checkpoints
    assert operator.client.get(f"/api/threads/{thread_id}/history", before=str(uuid.uuid4())).json() == []


def test_history_at_a_checkpoint_is_that_checkpoint(operator, paused_loan):
    thread_id, checkpoints = paused_loan
    written = checkpoints[1].upper()  # any form uuid.UUID() reads
    at = operator.client.post(f"/lg/threads/{thread_id}/history", {"checkpoint": {"checkpoint_id": written}}).json()
    assert [h["checkpoint"]["checkpoint_id"] for h in at] == [checkpoints[1]]
    unknown = {"checkpoint": {"checkpoint_id": str(uuid.uuid4())}}
    assert operator.client.post(f"/lg/threads/{thread_id}/history", unknown).json() == []


@pytest.mark.parametrize(
    "body,field",
    [
        ({"before": "x"}, "before"),
        ({"before": 5}, "before"),  # not before.str: pydantic's name for a member of the union it takes
        ({"before": {"checkpoint_id": "x"}}, "before.checkpoint_id"),
        ({"before": {"configurable": {"checkpoint_id": 5}}}, "before.configurable.checkpoint_id"),
        ({"checkpoint": {"checkpoint_id": "x"}}, "checkpoint.checkpoint_id"),
        ({"checkpoint": {"checkpoint_id": ["a"]}}, "checkpoint.checkpoint_id"),
    ],
)
def test_a_malformed_history_checkpoint_is_a_422_naming_it(operator, lg_thread, body, field):
    assert error_of(operator.client.post(f"/lg/threads/{lg_thread}/history", body), 422)["field"] == field


@pytest.mark.parametrize(
    "before",
    [{"configurable": "x"}, {"configurable": {}}, {"configurable": None}, {}, {"checkpoint_id": None}, {"ns": ""}],
)
def test_a_history_before_that_names_no_checkpoint_is_a_422_naming_it(operator, paused_loan, before):
    """It was read as no cursor at all: the whole history."""
    thread_id, _ = paused_loan
    error = error_of(operator.client.post(f"/lg/threads/{thread_id}/history", {"before": before}), 422)
    assert error["field"] == "before" and "checkpoint_id" in error["message"], error


def test_a_checkpoint_whose_configurable_is_not_an_object_is_a_422_naming_it(operator, paused_loan):
    thread_id, _ = paused_loan
    body = {"checkpoint": {"configurable": "x"}}
    assert error_of(operator.client.post(f"/lg/threads/{thread_id}/history", body), 422)["field"] == "checkpoint"
    assert error_of(operator.client.post(f"/lg/threads/{thread_id}/state/checkpoint", body), 422)["field"] == (
        "checkpoint"
    )


def test_a_malformed_checkpoint_in_get_history_or_state_checkpoint_is_a_422_naming_it(operator, lg_thread):
    error = error_of(operator.client.get(f"/lg/threads/{lg_thread}/history", before="x"), 422)
    assert error["field"] == "before"
    body = {"checkpoint": {"checkpoint_id": "x"}}
    error = error_of(operator.client.post(f"/lg/threads/{lg_thread}/state/checkpoint", body), 422)
    assert error["field"] == "checkpoint.checkpoint_id"


# --- refusals speak the statuses /lg/ shows ---------------------------------------------------------


def test_cancelling_a_run_that_paused_at_a_gate_is_refused_in_lg_words(operator, paused_loan):
    thread_id, _ = paused_loan
    [run] = operator.client.get(f"/lg/threads/{thread_id}/runs").json()
    assert run["status"] == "success"  # it ended well; the thread is interrupted, as LangGraph Server says
    error = error_of(operator.client.post(f"/lg/threads/{thread_id}/runs/{run['run_id']}/cancel"), 409)
    assert error["field"] == "run_id"
    assert error["message"] == (
        f"run {run['run_id']} has already ended (status 'success'); only a pending or running run can be cancelled"
    )


@pytest.mark.parametrize("status", ["bogus", "SUCCESS", "failed", "queued", "cancelled"])
def test_listing_runs_by_a_status_lg_does_not_have_is_a_422_listing_those_it_has(operator, paused_loan, status):
    """It answered 200 [], as if the thread had no run of that status (Gatehouse's own names included)."""
    thread_id, _ = paused_loan
    error = error_of(operator.client.get(f"/lg/threads/{thread_id}/runs", status=status), 422)
    assert error["field"] == "status"
    for shown in ("pending", "running", "error", "success", "timeout", "interrupted"):
        assert repr(shown) in error["message"], error


@pytest.mark.parametrize("status,found", [("success", 1), ("pending", 0), ("timeout", 0), ("interrupted", 0)])
def test_listing_runs_by_an_lg_status_filters_on_it(operator, paused_loan, status, found):
    thread_id, _ = paused_loan
    response = operator.client.get(f"/lg/threads/{thread_id}/runs", status=status)
    assert response.status_code == 200, response.content
    assert [r["status"] for r in response.json()] == [status] * found


# --- run options: multitask_strategy is reported, config.recursion_limit honoured up to the graph's --
# Runs are recorded, not sent (the shared ``dispatched``): executed here, or cancelled at the test's end, never
# left queued for the session's live worker to run behind later tests' backs.


@pytest.mark.parametrize("strategy", ["interrupt", "rollback", "reject", None])
def test_a_run_reports_the_multitask_strategy_it_was_created_with(operator, lg_thread, dispatched, strategy):
    body = {"assistant_id": "loan_approval", "input": loan_input(), "multitask_strategy": strategy}
    created = operator.client.post(f"/lg/threads/{lg_thread}/runs", body)
    assert created.status_code == 200, created.content
    assert created.json()["multitask_strategy"] == (strategy or "reject")
    run_id = created.json()["run_id"]
    assert operator.client.get(f"/lg/threads/{lg_thread}/runs/{run_id}").json()["multitask_strategy"] == (
        strategy or "reject"
    )


@pytest.mark.parametrize(
    "graph,limit",
    [
        ("loan_approval", -1),
        ("loan_approval", 0),
        ("loan_approval", "10"),
        ("loan_approval", 2.5),
        ("loan_approval", True),
        ("loan_approval", 2**31),
        ("never_stops", 6),  # above the limit the graph's operator set (5)
    ],
)
@pytest.mark.parametrize("endpoint", ["runs", "runs/wait", "runs/stream"])
def test_a_bad_recursion_limit_is_a_422_naming_it_and_creates_no_run(operator, lg_thread, graph, limit, endpoint):
    body = {"assistant_id": graph, "input": {} if graph == "never_stops" else loan_input()}
    body["config"] = {"recursion_limit": limit}
    error = error_of(operator.client.post(f"/lg/threads/{lg_thread}/{endpoint}", body), 422)
    assert error["field"] == "config.recursion_limit"
    assert not Run.objects.filter(thread_id=lg_thread).exists()


@pytest.mark.parametrize("command", ["x", 5, [], ["resume"], True])
@pytest.mark.parametrize("with_input", [True, False])
def test_a_command_that_is_not_an_object_is_a_422_naming_it(operator, lg_thread, dispatched, command, with_input):
    """ninja read any value as an object by attribute: "x" was a command with nothing set, so a run with
    input started and one without was told to send input."""
    body: dict[str, Any] = {"assistant_id": "loan_approval", "command": command}
    if with_input:
        body["input"] = loan_input()
    error = error_of(operator.client.post(f"/lg/threads/{lg_thread}/runs", body), 422)
    assert (error["field"], error["message"]) == ("command", "command: must be an object")
    assert not Run.objects.filter(thread_id=lg_thread).exists()


def test_a_null_command_is_no_command(operator, lg_thread, dispatched):
    body = {"assistant_id": "loan_approval", "input": loan_input(), "command": None}
    assert operator.client.post(f"/lg/threads/{lg_thread}/runs", body).status_code == 200


def test_a_run_s_own_recursion_limit_lowers_the_graph_s(operator, lg_thread, dispatched):
    body = {"assistant_id": "never_stops", "input": {}, "config": {"recursion_limit": 3}}
    created = operator.client.post(f"/lg/threads/{lg_thread}/runs", body)
    assert created.status_code == 200, created.content
    run_execute(run_id=created.json()["run_id"])
    run = operator.client.get(f"/lg/threads/{lg_thread}/runs/{created.json()['run_id']}").json()
    assert run["status"] == "error"
    assert "recursion limit: the run took more than 3 steps" in run["error"]
    assert "the run's config.recursion_limit" in run["error"]


def test_without_its_own_limit_a_run_has_the_graph_s(operator, lg_thread, dispatched):
    created = operator.client.post(f"/lg/threads/{lg_thread}/runs", {"assistant_id": "never_stops", "input": {}})
    run_execute(run_id=created.json()["run_id"])
    run = operator.client.get(f"/lg/threads/{lg_thread}/runs/{created.json()['run_id']}").json()
    assert "more than 5 steps" in run["error"] and "gatehouse.runtime.never_stops.recursion_limit" in run["error"]


# --- POST /threads: the body, and a thread id that is taken -------------------------------------


@pytest.mark.parametrize("raw", [b"[1]", b"[]", b'"s"', b"5", b"null", b"true"])
@pytest.mark.parametrize("path", ["/lg/threads", "/lg/threads/search", "/lg/assistants/search", "/api/threads"])
def test_a_body_that_is_not_a_json_object_is_refused_naming_body(operator, raw, path):
    threads = Thread.objects.count()
    response = operator.client.post(path, raw=raw)
    error = error_of(response, 422)
    assert error["field"] == "body" and "must be a JSON object" in error["message"], error
    assert Thread.objects.count() == threads


@pytest.mark.parametrize("graph_id", [None, 5, "", [], {}, False])
def test_a_graph_id_that_is_not_a_graph_name_is_refused_and_creates_no_thread(operator, graph_id):
    """null (and "", [], false) was stored as the thread's graph_id, while 5 was refused."""
    before = Thread.objects.count()
    error = error_of(operator.client.post("/lg/threads", {"metadata": {"graph_id": graph_id}}), 422)
    assert (error["field"], error["message"]) == ("metadata.graph_id", "must be a graph name")
    assert Thread.objects.count() == before


def test_a_graph_id_naming_no_graph_the_caller_may_start_is_a_422_naming_it(operator, loan_operator):
    """It was a 404 naming assistant_id, a field the client never sent; a graph hidden from the caller gets the
    same answer as one that does not exist."""
    before = Thread.objects.count()
    unknown = error_of(operator.client.post("/lg/threads", {"metadata": {"graph_id": "nope_graph"}}), 422)
    assert (unknown["field"], unknown["message"]) == ("metadata.graph_id", "no graph 'nope_graph' you may start")
    hidden = error_of(loan_operator.post("/lg/threads", {"metadata": {"graph_id": "kyc_onboarding"}}), 422)
    assert (hidden["field"], hidden["message"]) == ("metadata.graph_id", "no graph 'kyc_onboarding' you may start")
    assert Thread.objects.count() == before


@pytest.fixture
def loan_operator() -> Any:
    """An operator of the loan graph only: a kyc thread is one it may not see."""
    from django.contrib.auth import get_user_model

    from approvals.models import GraphAssignment
    from approvals.roles import roles_ensure
    from approvals.tokens import token_issue
    from tests.conftest import ApiClient

    user = get_user_model().objects.create_user(f"loan-op-{uuid.uuid4().hex[:6]}")
    user.groups.add(roles_ensure()["operator"])
    GraphAssignment.objects.create(user=user, graph="loan_approval")
    return ApiClient(token_issue(user=user))


@pytest.mark.parametrize("if_exists", [None, "raise", "do_nothing"])
def test_creating_a_thread_id_the_caller_may_not_see_answers_as_a_visible_taken_id(operator, loan_operator, if_exists):
    from tests.factories import thread_make

    hidden = thread_make(graph="kyc_onboarding")
    seen = loan_operator.post("/lg/threads", {}).json()["thread_id"]  # its own: visible
    hidden_answer = loan_operator.post("/lg/threads", {"thread_id": str(hidden.pk), "if_exists": if_exists})
    error = error_of(hidden_answer, 409)
    assert error == {"code": "conflict", "message": f"thread {hidden.pk} already exists", "field": "thread_id"}
    assert loan_operator.get(f"/lg/threads/{hidden.pk}").status_code == 404  # still not shown
    seen_answer = loan_operator.post("/lg/threads", {"thread_id": seen, "if_exists": "raise"})
    assert error_of(seen_answer, 409)["message"] == f"thread {seen} already exists"  # the same words
    if if_exists == "do_nothing":  # a thread the caller may see is returned, as LangGraph Server does
        again = loan_operator.post("/lg/threads", {"thread_id": seen, "if_exists": "do_nothing"})
        assert again.status_code == 200 and again.json()["thread_id"] == seen


def test_a_run_or_state_update_naming_two_checkpoints_is_a_422_and_writes_nothing(operator, paused_loan):
    """An outside tester sent ``checkpoint_id`` and a ``checkpoint`` naming another: the second was silently used
    (and ``checkpoint: {}`` beside a ``checkpoint_id`` silently ignored the id: no fork, no replay)."""
    from lgplatform.time_travel import checkpoint_wanted
    from runtime.models import Run

    thread_id, checkpoints = paused_loan
    runs_before = Run.objects.filter(thread_id=thread_id).count()
    two = {"checkpoint_id": checkpoints[1], "checkpoint": {"checkpoint_id": checkpoints[2]}}
    headers = {**_auth(operator), "X-Gatehouse-Reason": "r"}

    def post(path: str, body: dict[str, Any]) -> Any:
        return operator.client.client.post(path, json.dumps(body), content_type="application/json", headers=headers)

    run = post(f"/lg/threads/{thread_id}/runs", {"assistant_id": "loan_approval", **two})
    assert error_of(run, 422)["field"] == "checkpoint_id"
    state = post(f"/lg/threads/{thread_id}/state", {"values": {"amount": 1}, **two})
    assert error_of(state, 422)["field"] == "checkpoint_id"
    assert Run.objects.filter(thread_id=thread_id).count() == runs_before
    assert checkpoint_wanted({}, checkpoints[1]) == checkpoints[1]  # an empty checkpoint names nothing itself
    same = {"checkpoint_id": checkpoints[1]}
    assert checkpoint_wanted(same, checkpoints[1]) == checkpoints[1]


@pytest.mark.parametrize(
    "path,body,key",
    [
        ("/api/threads", {"graph": "loan_approval", "input": {}, "metdata": {"case": "X"}}, "metdata"),
        ("/api/users", {"username": "typo-user", "roles": ["reviewer"], "assignment": [{"graph": "*"}]}, "assignment"),
    ],
)
def test_a_native_api_body_with_a_key_it_does_not_take_is_a_422_naming_it(personas, path, body, key):
    """An outside tester's finds: a misspelt ``metdata`` started a thread (201) no search finds, a misspelt
    ``assignment`` made a user with no access; each key was dropped without a word."""
    from django.contrib.auth import get_user_model

    from runtime.models import Thread

    before = (Thread.objects.count(), get_user_model().objects.count())
    response = personas["admin"].client.post(path, body)
    assert error_of(response, 422)["field"] == key
    assert (Thread.objects.count(), get_user_model().objects.count()) == before


def test_a_decision_with_a_misspelt_key_is_refused_not_approved_as_proposed(personas):
    from approvals.models import Decision
    from tests.conftest import api_decide
    from tests.factories import task_make

    task = task_make()
    refused = api_decide(personas["approver"], task, "edit", reason="lower", action_arg={"amount": 100})
    assert error_of(refused, 422)["field"] == "action_arg"
    assert not Decision.objects.filter(task=task).exists()


def test_starting_an_unknown_graph_to_wait_for_it_is_the_same_422_as_without_waiting():
    """An outside tester's ``POST /api/threads?wait_for=interrupted`` with a misspelt graph answered 403 "waiting
    needs permission to read this graph's threads"; without ``wait_for`` it was a 422 naming the graph."""
    from approvals.tokens import token_issue
    from runtime.models import Thread
    from tests.approvals.handoffs import person
    from tests.conftest import ApiClient

    operator = ApiClient(token_issue(user=person("operator", graphs=("loan_approval",))))  # one graph, not "*"
    before = Thread.objects.count()
    body = {"graph": "no_such_graph", "input": {}}
    plain = operator.post("/api/threads", body)
    waited = operator.client.post(
        "/api/threads?wait_for=interrupted", json.dumps(body), content_type="application/json",
        headers=operator.headers,
    )  # fmt: skip
    assert error_of(plain, 422) == error_of(waited, 422) and error_of(plain, 422)["field"] == "graph"
    assert Thread.objects.count() == before


@pytest.mark.parametrize("route", ["runs", "runs/stream", "runs/wait"])
def test_a_bogus_stream_mode_is_a_422_on_every_run_route_and_starts_nothing(operator, lg_thread, route):
    """``/runs`` and ``/runs/stream`` refused it; ``/runs/wait`` started the run regardless (an outside tester)."""
    from runtime.models import Run

    body = {"assistant_id": "loan_approval", "input": loan_input(), "stream_mode": "bogus"}
    assert error_of(operator.client.post(f"/lg/threads/{lg_thread}/{route}", body), 422)["field"] == "stream_mode"
    assert not Run.objects.filter(thread_id=lg_thread).exists()
