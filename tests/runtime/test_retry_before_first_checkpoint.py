"""A thread whose start run failed before its first checkpoint is retried with its input.

An outside tester's find: a per-run graph factory raised (``PAYOUT_API_KEY is not set``); once the key was set,
``POST /api/threads/{id}/retry`` answered 202 and the run failed with ``EmptyInputError: Received no input for
__start__``. A retry continues from the last checkpoint, and there was none: the input, kept only in the trail,
was lost. It is applied again now.
"""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path

import pytest

from runtime.executor import run_execute
from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.registry import registry_load
from tests.conftest import graph_release_write, registry_restored, thread_start

pytestmark = pytest.mark.usefixtures("live_db")

MODULE = textwrap.dedent(
    """
    from pathlib import Path
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph


    class State(TypedDict, total=False):
        amount: int
        paid: int


    def pay(state: State) -> dict:
        return {"paid": state["amount"]}


    def graph(config):
        if Path(FLAG).exists():
            raise RuntimeError("PAYOUT_API_KEY is not set")
        builder = StateGraph(State)
        builder.add_node("pay", pay)
        builder.add_edge(START, "pay")
        builder.add_edge("pay", END)
        return builder
    """
)


def test_a_start_that_failed_before_its_first_checkpoint_is_retried_with_its_input(
    tmp_path: Path, dispatched: list[str], operator
) -> None:
    flag = tmp_path / "no-key"
    graph = f"keyed_{uuid.uuid4().hex[:8]}"
    with registry_restored():
        registry_load(graph_release_write(tmp_path / "release", graph, MODULE.replace("FLAG", repr(str(flag))), []))
        flag.write_text("unset")
        thread = thread_start(operator, graph, {"amount": 120})
        run_execute(run_id=dispatched[-1])
        failed = Thread.objects.get(pk=thread["id"])
        assert failed.status == ThreadStatus.FAILED and failed.checkpoint_id == ""
        flag.unlink()  # the key is set: the operator retries
        response = operator.client.post(f"/api/threads/{thread['id']}/retry")
        assert response.status_code == 202, response.content
        run_execute(run_id=dispatched[-1])
        retry = Run.objects.get(pk=dispatched[-1])
        assert (retry.kind, retry.status) == (RunKind.RETRY, RunStatus.SUCCEEDED), retry.error
        done = Thread.objects.get(pk=thread["id"])
        assert done.status == ThreadStatus.COMPLETED and done.values == {"amount": 120, "paid": 120}
