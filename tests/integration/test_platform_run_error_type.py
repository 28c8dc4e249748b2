"""A failed run's exception class is recorded with the run (``Run.error_type``), not parsed back out of its text.

The /lg/ API read the type from the stored text ("<module>.<Type>: <message>") with a pattern for dotted
identifiers. A graph named as langgraph.json files often name them, ``pay-flow``, is imported as module
``gatehouse_graphs.pay-flow``: its exceptions' text matched no pattern, and a client was told
``RunError`` with the whole text (module path and LangGraph's task note included) instead of
``PaymentDeclined`` and its message; the state's failed task showed the text instead of the exception's repr.

In-process: the graph is this test's own release (the registry loaded from its files), its runs executed here
by the worker's executor (dispatch recorded, not sent).
"""

from __future__ import annotations

import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from lgplatform.services import run_error_out
from runtime.executor import run_execute
from runtime.models import Run, RunStatus
from runtime.registry import registry_load
from tests.conftest import Persona, graph_release_write, lg_run_executed, lg_stream_error, registry_restored

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]

MODULE = textwrap.dedent(
    """
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph


    class PaymentDeclined(Exception):
        pass


    class State(TypedDict, total=False):
        card: str


    def charge(state: State) -> dict:
        raise PaymentDeclined(f"card {state.get('card')} refused")


    builder = StateGraph(State)
    builder.add_node("charge", charge)
    builder.add_edge(START, "charge")
    builder.add_edge("charge", END)
    graph = builder
    """
)
EXPECTED = {"error": "PaymentDeclined", "message": "card 4242 refused"}


@pytest.fixture
def graph(tmp_path: Path) -> Iterator[str]:
    name = f"pay-flow-{uuid.uuid4().hex[:8]}"  # not an identifier: nor is the module its graph is imported as
    with registry_restored():
        registry_load(graph_release_write(tmp_path, name, MODULE, []))
        yield name


def _failed_run(persona: Persona, graph: str) -> tuple[str, str]:
    return lg_run_executed(persona, graph, {"input": {"card": "4242"}, "stream_mode": "values"})


def test_the_failed_run_records_its_exception_s_class_beside_its_text(operator, graph, dispatched):
    _, run_id = _failed_run(operator, graph)
    run = Run.objects.get(pk=run_id)
    assert run.status == RunStatus.FAILED
    assert run.error_type == "PaymentDeclined"
    assert run.error.startswith(f"gatehouse_graphs.{graph}.PaymentDeclined: card 4242 refused")  # the text kept


def test_a_graph_s_exception_is_named_by_its_class_whatever_its_module_is_called(operator, graph, dispatched):
    thread, run_id = _failed_run(operator, graph)
    joined = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/join")
    assert joined.status_code == 200, joined.content
    assert joined.json() == {"__error__": EXPECTED}
    assert lg_stream_error(operator, thread, run_id) == EXPECTED


def test_the_failed_task_in_the_state_shows_the_exception_s_repr(operator, graph, dispatched):
    thread, _ = _failed_run(operator, graph)
    [task] = operator.client.get(f"/lg/threads/{thread}/state").json()["tasks"]
    assert task["name"] == "charge"
    assert task["error"] == "PaymentDeclined('card 4242 refused')"


def test_a_run_failed_before_the_class_was_recorded_is_read_from_its_text(operator, dispatched):
    thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    body = {"assistant_id": "always_fails", "input": {"to": "ops@example.com"}}
    run_id = operator.client.post(f"/lg/threads/{thread}/runs", body).json()["run_id"]
    run_execute(run_id=run_id)
    Run.objects.filter(pk=run_id).update(error_type=None)  # as a row failed before migration 0016
    expected = {"error": "RuntimeError", "message": "mail relay unavailable for ops@example.com"}
    assert operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/join").json() == {"__error__": expected}
    [task] = operator.client.get(f"/lg/threads/{thread}/state").json()["tasks"]
    assert task["error"] == "RuntimeError('mail relay unavailable for ops@example.com')"


def test_a_failure_that_is_no_exception_of_the_graph_s_stays_a_run_error_with_its_whole_text(
    operator, graph, dispatched, tmp_path
):
    thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    run_id = operator.client.post(f"/lg/threads/{thread}/runs", {"assistant_id": graph, "input": {"card": "1"}}).json()[
        "run_id"
    ]
    registry_load(graph_release_write(tmp_path / "next", f"other_{uuid.uuid4().hex[:8]}", MODULE, []))
    run_execute(run_id=run_id)  # its graph is no longer registered
    run = Run.objects.get(pk=run_id)
    assert run.error_type == "UnknownGraph"
    error = operator.client.get(f"/lg/threads/{thread}/runs/{run_id}/join").json()["__error__"]
    assert error == {"error": "RunError", "message": f"graph {graph!r} is not registered"}


NOTE = "\nDuring task with name 'charge' and id '9208bf8a-db3b-8b43-a4a2-f9d787e18009'"


@pytest.mark.parametrize(
    "text,error_type,expected",
    [
        # a class defined in a function: its qualified name holds "<locals>"
        (f"pay.make.<locals>.Declined: no funds{NOTE}", "Declined", {"error": "Declined", "message": "no funds"}),
        # a SyntaxError's line comes after the source it points at
        (
            '  File "<formula>", line 1\n    1 +\nSyntaxError: invalid syntax' + NOTE,
            "SyntaxError",
            {"error": "SyntaxError", "message": "invalid syntax"},
        ),
        (f"pay.Empty{NOTE}", "Empty", {"error": "Empty", "message": ""}),
        (
            "runtime.controls.RecursionLimitReached: recursion limit: the run took more than 3 steps",
            "RecursionLimitReached",
            {"error": "GraphRecursionError", "message": "recursion limit: the run took more than 3 steps"},
        ),
        # no exception: the runtime gave up on the run
        (
            "gave up after 3 attempts: the worker was lost each time",
            "",
            {"error": "RunError", "message": "gave up after 3 attempts: the worker was lost each time"},
        ),
    ],
)
def test_the_message_is_found_by_the_recorded_class(text: str, error_type: str, expected: dict[str, str]):
    assert run_error_out(text, error_type) == expected


@pytest.mark.parametrize("read", ["state", "history"])
def test_a_failed_thread_s_state_reads_its_run_s_error_type_with_the_thread(operator, graph, dispatched, read):
    # The failed run's class was one more query of every failed thread's current state (and history) read.
    thread, _ = _failed_run(operator, graph)
    with CaptureQueriesContext(connection) as ctx:
        if read == "state":
            state = operator.client.get(f"/lg/threads/{thread}/state").json()
        else:
            state = operator.client.post(f"/lg/threads/{thread}/history", {"limit": 1}).json()[0]
    assert [task["error"] for task in state["tasks"]] == ["PaymentDeclined('card 4242 refused')"]
    runs_read = [q["sql"] for q in ctx.captured_queries if 'FROM "runtime_run"' in q["sql"]]
    assert all('"runtime_thread"' in sql for sql in runs_read), runs_read  # only within the thread's read
