"""The official ``langgraph_sdk`` client (async and sync) drives Gatehouse through ``/lg/``.

A live daphne process serves the API; the session's Celery worker runs the
graphs. Every wait is bounded (the SDK's own timeouts, and ``wait_for``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connection
from langgraph_sdk import get_client, get_sync_client

from approvals.models import AuditEvent, Decision
from lgplatform.services import assistant_id_for
from runtime.models import Run, Thread
from tests.conftest import WorkerProcess, daphne_start, loan_input, process_group_stop, scaled, wait_for, worker_env
from tests.faults.holds import hold_reached, hold_release

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]

TIMEOUT = httpx.Timeout(scaled(30.0))


@pytest.fixture(scope="session")
def server(worker: WorkerProcess, bank: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """daphne on a free port, with the worker's environment (test database, Redis, queue, bank)."""
    yield from _serve(worker_env(bank), tmp_path_factory)


@pytest.fixture(scope="module")
def one_connection_server(worker: WorkerProcess, bank: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same, with a pool of one connection: one request that keeps it leaves every other one failing."""
    one = {"GATEHOUSE_DB_POOL_MIN": "0", "GATEHOUSE_DB_POOL_MAX": "1", "GATEHOUSE_DB_POOL_TIMEOUT": str(scaled(5))}
    yield from _serve({**worker_env(bank), **one}, tmp_path_factory)


def _serve(env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_path = tmp_path_factory.mktemp("daphne") / "daphne.log"
    proc, base = daphne_start({**env, "GATEHOUSE_PLATFORM_WAIT_SECONDS": "30"}, log_path)
    url = f"{base}/lg"

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited: {log_path.read_text(errors='replace')[-3000:]}")
        try:
            return httpx.post(f"{url}/assistants/search", json={}, timeout=scaled(2)).status_code == 401
        except httpx.TransportError:
            return False

    wait_for(up, timeout=40, interval=0.2, what="daphne to serve /lg/")
    try:
        yield url
    finally:
        process_group_stop(proc)


def _async_client(url: str, token: str) -> Any:
    return get_client(url=url, api_key=token, timeout=TIMEOUT)


def _sync_client(url: str, token: str) -> Any:
    return get_sync_client(url=url, api_key=token, timeout=TIMEOUT)


def test_the_sdk_drives_a_loan_from_interrupt_to_disbursement(server, personas, bank):
    operator, reviewer = personas["operator"].token, personas["reviewer"].token

    async def flow() -> dict[str, Any]:
        op, rv = _async_client(server, operator), _async_client(server, reviewer)
        try:
            assistants = await op.assistants.search(graph_id="loan_approval")
            assert [a["graph_id"] for a in assistants] == ["loan_approval"]
            assert assistants[0]["assistant_id"] == assistant_id_for("loan_approval")

            thread = await op.threads.create(metadata={"case": "sdk-1"})
            paused = await op.runs.wait(
                thread["thread_id"], "loan_approval", input=loan_input(amount=20000, income=40000)
            )
            [interrupt] = paused["__interrupt__"]
            assert interrupt["value"]["type"] == "gatehouse.gate/v1"
            # a run's output carries the interrupt's response_schema (null), a state only a declared one
            assert interrupt.pop("response_schema") is None

            found = await rv.threads.search(status="interrupted", metadata={"case": "sdk-1"})
            assert [t["thread_id"] for t in found] == [thread["thread_id"]]
            assert found[0]["status"] == "interrupted"
            assert await rv.threads.count(status="interrupted", metadata={"case": "sdk-1"}) == 1

            state = await rv.threads.get_state(thread["thread_id"])
            assert state["next"] == ["human_review"]
            [task] = state["tasks"]
            assert task["name"] == "human_review"
            assert task["interrupts"] == [interrupt]
            assert state["interrupts"] == [interrupt]
            assert state["values"]["amount"] == 20000
            assert state["checkpoint"]["checkpoint_id"] and state["parent_checkpoint"]["checkpoint_id"]

            final = await rv.runs.wait(
                thread["thread_id"],
                assistants[0]["assistant_id"],
                command={"resume": {"decision": "approve", "reason": "ok", "reviewer": "sdk"}},
            )
            assert final["status"] == "disbursed"
            assert "__interrupt__" not in final
            done = await rv.threads.get(thread["thread_id"])
            assert done["status"] == "idle" and done["interrupts"] == {}
            runs = await rv.runs.list(thread["thread_id"])
            # A run that reached the gate's interrupt ended well, as LangGraph Server reports it: the *thread*
            # is interrupted, the run "success" ("interrupted" is a cancelled run's).
            assert [r["status"] for r in runs] == ["success", "success"]
            return thread
        finally:
            await op.aclose()
            await rv.aclose()

    thread = asyncio.run(flow())
    thread_id = thread["thread_id"]
    assert bank.ledger.executions[f"gh:{thread_id}:disburse"] == 1
    decision = Decision.objects.get(task__thread_id=thread_id)
    assert decision.actor == personas["reviewer"].user and decision.outcome == "approve"
    # the gate records the authenticated reviewer, not the name the client sent
    assert decision.resume_value["reviewer"] == personas["reviewer"].username
    actions = list(AuditEvent.objects.filter(thread_id=thread_id).values_list("action", flat=True))
    for expected in ("thread.created", "thread.started", "task.opened", "decision.made", "run.queued"):
        assert expected in actions, (expected, actions)


def test_history_lists_checkpoints_newest_first_with_the_sync_client(server, personas):
    with _sync_client(server, personas["operator"].token) as op:
        thread = op.threads.create(metadata={"graph_id": "loan_approval"})
        assert thread["metadata"]["graph_id"] == "loan_approval"
        op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input())
        history = op.threads.get_history(thread["thread_id"], limit=20)
        steps = [h["metadata"]["step"] for h in history]
        assert steps == sorted(steps, reverse=True) and len(steps) >= 3
        assert history[0]["interrupts"] and history[0]["next"] == ["human_review"]
        assert history[1]["checkpoint"]["checkpoint_id"] == history[0]["parent_checkpoint"]["checkpoint_id"]
        older = op.threads.get_history(thread["thread_id"], limit=1, before=history[0]["checkpoint"])
        assert older[0]["checkpoint"] == history[1]["checkpoint"]
        past = op.threads.get_state(thread["thread_id"], checkpoint_id=history[1]["checkpoint"]["checkpoint_id"])
        assert past["values"] == history[1]["values"]


def test_answers_carry_what_langgraph_server_sends(server, personas):
    """Fields found missing or different by bench/sdk_shapes.py against ``langgraph dev`` (langgraph-api 0.16.7)."""
    with _sync_client(server, personas["operator"].token) as op:
        thread = op.threads.create()
        # a thread no run has given a state: values null, and when its state last changed
        assert thread["values"] is None and thread["state_updated_at"] == thread["created_at"]
        paused = op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input())
        [interrupt] = paused["__interrupt__"]
        assert "response_schema" in interrupt and interrupt["response_schema"] is None
        state = op.threads.get_state(thread["thread_id"])
        assert state["checkpoint_id"] == state["checkpoint"]["checkpoint_id"]
        assert state["parent_checkpoint_id"] == state["parent_checkpoint"]["checkpoint_id"]
        assert "checkpoint_map" not in state["checkpoint"]  # LangGraph Server leaves an empty map out
        assert "response_schema" not in state["interrupts"][0]  # in a state only when the interrupt declared one
        [run] = op.runs.list(thread["thread_id"], status="success")  # paused at the gate: it ended well
        assert op.runs.list(thread["thread_id"], status="interrupted") == []  # a run's "interrupted" is a cancel
        joined = op.runs.join(thread["thread_id"], run["run_id"])
        assert joined["__interrupt__"][0]["response_schema"] is None
        shown = op.threads.get(thread["thread_id"])
        assert shown["state_updated_at"] >= shown["created_at"] and shown["values"]["amount"] == loan_input()["amount"]
        # history: each finished task with what it returned, under LangGraph's own task id
        history = op.threads.get_history(thread["thread_id"], limit=20)
        finished = {t["name"]: t for h in history for t in h["tasks"] if t["result"] is not None}
        assert finished["score_risk"]["result"]["status"] == "scored"
        assert "risk_score" in finished["score_risk"]["result"]
        assert finished["__start__"]["result"]["amount"] == loan_input()["amount"]  # the input, as the step wrote it
        assert all(t["error"] is None for t in finished.values())


def test_the_assistant_graph_is_drawn_as_langgraph_draws_it(server, personas):
    with _sync_client(server, personas["operator"].token) as op:
        drawn = op.assistants.get_graph(assistant_id_for("loan_approval"))
        edges = {(e["source"], e["target"]): e.get("conditional", False) for e in drawn["edges"]}
        # the routers' targets are conditional edges: a drawing of the builder's plain edges left them out
        assert edges[("score_risk", "human_review")] is True and edges[("human_review", "disburse")] is True
        assert edges[("pull_documents", "score_risk")] is False and ("disburse", "__end__") in edges
        nodes = {n["id"]: n for n in drawn["nodes"]}
        assert nodes["score_risk"]["data"] == {"name": "score_risk"}  # the name, not the runnable's class path
        flat = {n["id"] for n in op.assistants.get_graph("travel_nested")["nodes"]}
        deep = {n["id"] for n in op.assistants.get_graph("travel_nested", xray=True)["nodes"]}
        assert "child" in flat and any(n.startswith("child:") for n in deep) and not any(":" in n for n in flat)
        with pytest.raises(httpx.HTTPStatusError) as bad:
            op.http.get(f"/assistants/{assistant_id_for('loan_approval')}/graph", params={"xray": "-1"})
        assert bad.value.response.status_code == 422 and bad.value.response.json()["error"]["field"] == "xray"


def test_an_update_answers_with_the_new_checkpoint_as_langgraph_server_does(server, personas):
    with _sync_client(server, personas["operator"].token) as op, _sync_client(server, personas["reviewer"].token) as rv:
        thread = op.threads.create()
        op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input())
        rv.runs.wait(thread["thread_id"], "loan_approval", command={"resume": {"decision": "reject", "reason": "no"}})
        answer = op.threads.update_state(thread["thread_id"], {"status": "archived"})
        head = op.threads.get_state(thread["thread_id"])
    assert answer["checkpoint"]["checkpoint_id"] == head["checkpoint_id"] == answer["checkpoint_id"]
    assert answer["configurable"] == {
        "thread_id": thread["thread_id"],
        "checkpoint_ns": "",
        "checkpoint_id": head["checkpoint_id"],
    }
    assert head["values"]["status"] == "archived"


def test_an_unknown_interrupt_id_is_refused_and_nothing_changes(server, personas):
    with _sync_client(server, personas["operator"].token) as op, _sync_client(server, personas["reviewer"].token) as rv:
        thread = op.threads.create()
        op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input())
        before = rv.threads.get_state(thread["thread_id"])
        runs_before = Run.objects.filter(thread_id=thread["thread_id"]).count()
        with pytest.raises(httpx.HTTPStatusError) as refused:
            rv.runs.create(
                thread["thread_id"],
                "loan_approval",
                command={"resume": {"0" * 32: {"decision": "approve", "reason": "ok"}}},
            )
        assert refused.value.response.status_code == 422
        assert "not pending" in refused.value.response.json()["detail"]
        assert rv.threads.get_state(thread["thread_id"]) == before
        assert Run.objects.filter(thread_id=thread["thread_id"]).count() == runs_before
        assert not Decision.objects.filter(task__thread_id=thread["thread_id"]).exists()

        # the operator may start threads but not decide them: same policy as the native API
        [interrupt] = before["interrupts"]
        with pytest.raises(httpx.HTTPStatusError) as forbidden:
            op.runs.create(
                thread["thread_id"], "loan_approval", command={"resume": {interrupt["id"]: {"decision": "approve"}}}
            )
        assert forbidden.value.response.status_code == 403


def test_a_second_run_while_one_is_active_is_rejected(server, personas):
    with _sync_client(server, personas["operator"].token) as op:
        thread = op.threads.create()
        run = op.runs.create(thread["thread_id"], "loan_approval", input=loan_input(), multitask_strategy="reject")
        with pytest.raises(httpx.HTTPStatusError) as busy:
            op.runs.create(thread["thread_id"], "loan_approval", input=loan_input(), multitask_strategy="reject")
        assert busy.value.response.status_code == 409
        with pytest.raises(httpx.HTTPStatusError) as unsupported:
            op.runs.create(thread["thread_id"], "loan_approval", input=loan_input(), multitask_strategy="enqueue")
        assert unsupported.value.response.status_code == 422
        joined = op.runs.join(thread["thread_id"], run["run_id"])
        assert joined["__interrupt__"]
        # paused at the gate: the thread is interrupted, the run ended well
        assert op.runs.get(thread["thread_id"], run["run_id"])["status"] == "success"
        # a finished run cannot be cancelled
        with pytest.raises(httpx.HTTPStatusError) as late:
            op.runs.cancel(thread["thread_id"], run["run_id"])
        assert late.value.response.status_code == 409


def test_threads_update_merges_metadata(server, personas):
    with _sync_client(server, personas["operator"].token) as op:
        thread = op.threads.create(metadata={"graph_id": "loan_approval", "case": "sdk-u"})
        updated = op.threads.update(thread["thread_id"], metadata={"title": "Loan for Ada"})
        assert updated["metadata"]["case"] == "sdk-u" and updated["metadata"]["title"] == "Loan for Ada"
        assert op.threads.get(thread["thread_id"])["metadata"] == updated["metadata"]
        with pytest.raises(httpx.HTTPStatusError) as relabel:
            op.threads.update(thread["thread_id"], metadata={"graph_id": "three_steps"})
        assert relabel.value.response.status_code == 422


def test_stateless_runs_run_on_threads_of_their_own_which_are_kept(server, personas):
    """``runs.wait(None, ...)`` and its kin were 404s; the SDK reads the new thread from ``Content-Location``."""
    created: list[Any] = []
    with _sync_client(server, personas["operator"].token) as op:
        paused = op.runs.wait(None, "loan_approval", input=loan_input(), on_run_created=created.append)
        assert paused["__interrupt__"][0]["value"]["type"] == "gatehouse.gate/v1"
        [meta] = created
        kept = op.threads.get(meta["thread_id"])
        assert kept["status"] == "interrupted" and kept["metadata"]["graph_id"] == "loan_approval"
        parts = list(op.runs.stream(None, "loan_approval", input=loan_input(), stream_mode="updates"))
        assert parts[0].event == "metadata" and parts[-1].event == "end"
        assert parts[-2].event == "updates" and "__interrupt__" in parts[-2].data
        run = op.runs.create(None, "loan_approval", input=loan_input())
        assert op.runs.join(run["thread_id"], run["run_id"])["__interrupt__"]
        batch = op.runs.create_batch([{"assistant_id": "loan_approval", "input": loan_input()} for _ in range(2)])
        assert len({r["thread_id"] for r in batch}) == 2
        with pytest.raises(httpx.HTTPStatusError) as deleting:
            op.runs.wait(None, "loan_approval", input=loan_input(), on_completion="delete")
        assert deleting.value.response.status_code == 422
        assert deleting.value.response.json()["error"]["field"] == "on_completion"


def test_a_stream_yields_metadata_values_and_ends(server, personas):
    async def flow() -> list[Any]:
        op = _async_client(server, personas["operator"].token)
        try:
            thread = await op.threads.create()
            parts = []
            async for part in op.runs.stream(thread["thread_id"], "loan_approval", input=loan_input()):
                parts.append(part)
            return parts
        finally:
            await op.aclose()

    parts = asyncio.run(flow())
    events = [p.event for p in parts]
    assert events[0] == "metadata" and events[-1] == "end"
    values = [p.data for p in parts if p.event == "values"]
    assert values and values[-1]["__interrupt__"] and values[-1]["risk_score"] == 0.625


def test_requests_waiting_on_runs_hold_no_database_connection_meanwhile(
    one_connection_server, personas, worker, tmp_path
):
    """``runs.wait`` and ``runs.stream`` (like a join, a cancel's wait and an external task's long poll) are
    async views that wait between their database reads. Each held its request thread's pooled connection
    through the wait, so once as many requests waited as the pool holds, every other request of the process
    queued for one and failed after the pool's timeout with a 500. With a pool of one: two runs held mid-way
    by their graph, a ``runs.wait`` on one and a ``runs.stream`` on the other, and an ordinary request
    answers while both wait."""
    token = personas["operator"].token
    holds = [tmp_path / f"hold-{i}" for i in range(2)]
    for hold_dir in holds:
        hold_dir.mkdir()

    async def flow() -> tuple[httpx.Response, list[Any]]:
        op = _async_client(one_connection_server, token)
        try:
            threads = [await op.threads.create() for _ in holds]
            inputs = [
                {"payment_id": f"P-wait-{i}", "amount": 5, "hold": "before_effect", "hold_dir": str(d)}
                for i, d in enumerate(holds)
            ]

            async def streamed(thread_id: str, graph_input: dict[str, Any]) -> Any:
                parts = [p async for p in op.runs.stream(thread_id, "zombie_pay", input=graph_input)]
                assert parts[-1].event == "end", parts
                return [p.data for p in parts if p.event == "values"][-1]

            waits = [
                asyncio.ensure_future(op.runs.wait(threads[0]["thread_id"], "zombie_pay", input=inputs[0])),
                asyncio.ensure_future(streamed(threads[1]["thread_id"], inputs[1])),
            ]
            for d in holds:  # both runs created by their waits, claimed, and held: both requests now wait
                await asyncio.to_thread(_hold_reached_wait, d)
            # The ordinary request, sent once: the SDK's own calls retry an answer of 500.
            async with httpx.AsyncClient(timeout=TIMEOUT) as plain:
                searched = await plain.post(
                    f"{one_connection_server}/assistants/search",
                    json={"graph_id": "loan_approval"},
                    headers={"Authorization": f"Bearer {token}"},
                )
            for d in holds:
                _holds_release(d, worker)
            return searched, list(await asyncio.gather(*waits))
        finally:
            for d in holds:
                _holds_release(d, worker)
            await op.aclose()

    searched, outputs = asyncio.run(flow())
    assert searched.status_code == 200, searched.text
    assert [a["graph_id"] for a in searched.json()] == ["loan_approval"]
    assert [o["payment"]["request"]["loan_id"] for o in outputs] == ["P-wait-0", "P-wait-1"]


def test_a_cancel_waiting_for_its_worker_holds_no_database_connection_meanwhile(
    one_connection_server, personas, worker, tmp_path
):
    """``cancel?wait=true`` waits, between short reads, until the worker running the run has stopped. With a
    pool of one: a run held inside its graph, its cancel recorded and waiting for the held worker, and an
    ordinary request still answers; released, the worker stops and the cancel answers 204."""
    token = personas["operator"].token
    hold_dir = tmp_path / "hold"
    hold_dir.mkdir()
    headers = {"Authorization": f"Bearer {token}"}

    async def flow() -> tuple[httpx.Response, httpx.Response]:
        op = _async_client(one_connection_server, token)
        try:
            thread = await op.threads.create()
            graph_input = {"payment_id": "P-cancel", "amount": 5, "hold": "before_effect", "hold_dir": str(hold_dir)}
            run = await op.runs.create(thread["thread_id"], "zombie_pay", input=graph_input)
            await asyncio.to_thread(_hold_reached_wait, hold_dir)
            async with httpx.AsyncClient(timeout=TIMEOUT) as plain:
                cancel = asyncio.ensure_future(
                    plain.post(
                        f"{one_connection_server}/threads/{thread['thread_id']}/runs/{run['run_id']}/cancel",
                        params={"wait": "true", "action": "interrupt"},
                        headers=headers,
                    )
                )
                # The cancel is recorded (by the waiting request's first database call): from here on it waits.
                await asyncio.to_thread(_cancel_recorded_wait, run["run_id"])
                assert not cancel.done()  # still waiting for the held worker
                searched = await plain.post(
                    f"{one_connection_server}/assistants/search", json={"graph_id": "loan_approval"}, headers=headers
                )
                _holds_release(hold_dir, worker)
                return searched, await cancel
        finally:
            _holds_release(hold_dir, worker)
            await op.aclose()

    searched, cancelled = asyncio.run(flow())
    assert searched.status_code == 200, searched.text
    assert cancelled.status_code == 204, cancelled.text


def test_an_external_tasks_long_poll_holds_no_database_connection_meanwhile(one_connection_server, personas):
    """An engine's long poll for an external task's decision (``GET /api/external-tasks/{id}/decision?wait=``)
    re-reads the task between waits. With a pool of one: while the poll waits for a decision nobody has made
    yet, an ordinary request answers."""
    api = one_connection_server.removesuffix("/lg")
    headers = {"Authorization": f"Bearer {personas['operator'].token}"}
    source = f"poll-{uuid.uuid4().hex[:8]}"
    created = httpx.post(
        f"{api}/api/external-tasks",
        json={"source": source, "key": "k1", "title": "Release wire 7", "payload": {"amount": 7}},
        headers=headers,
        timeout=TIMEOUT,
    )
    assert created.status_code == 201, created.text
    task_id = created.json()["id"]

    async def flow() -> tuple[httpx.Response, bool]:
        async with httpx.AsyncClient(timeout=TIMEOUT) as plain:
            # Longer than the pool's timeout: a poll that kept the connection would starve the next request.
            wait = min(60.0, scaled(15))
            poll = asyncio.ensure_future(
                plain.get(f"{api}/api/external-tasks/{task_id}/decision", params={"wait": wait}, headers=headers)
            )
            await asyncio.to_thread(_external_poll_began_wait)
            searched = await plain.get(f"{api}/api/graphs", headers=headers)
            still_waiting = not poll.done()
            poll.cancel()  # the client leaves; the server ends the poll
            return searched, still_waiting

    searched, still_waiting = asyncio.run(flow())
    assert still_waiting
    assert searched.status_code == 200, searched.text


def _cancel_recorded_wait(run_id: str) -> None:
    wait_for(lambda: Run.objects.filter(pk=run_id).exclude(cancel_action="").exists(), what="the cancel recorded")


def _external_poll_began_wait() -> None:
    """Until daphne's connection has read an external task: the poll has begun (the create ended in COMMIT)."""

    def polled() -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND query LIKE %s",
                ['SELECT "approvals_externaltask".%'],  # the text is cut at 1 kB, before its FROM
            )
            return bool(cursor.fetchone()[0])

    wait_for(polled, what="the long poll's first read")


def _hold_reached_wait(hold_dir: Any) -> None:
    wait_for(lambda: hold_reached(hold_dir, "before_effect"), timeout=30, what="a run at its hold")


def _holds_release(hold_dir: Any, worker: WorkerProcess) -> None:
    """Let every run held in ``hold_dir`` go on, and any that has yet to reach its hold pass it."""
    pids = {worker.proc.pid} if worker.proc is not None else set()
    pids |= {int(path.name.split(".")[1]) for path in hold_dir.glob("before_effect.*.reached")}
    for pid in pids:
        hold_release(hold_dir, "before_effect", pid)


def test_update_state_is_refused_while_a_decision_is_pending(server, personas):
    with _sync_client(server, personas["admin"].token) as admin:
        thread = admin.threads.create()
        admin.runs.wait(thread["thread_id"], "loan_approval", input=loan_input())
        with pytest.raises(httpx.HTTPStatusError) as refused:
            admin.threads.update_state(thread["thread_id"], {"amount": 1})
        assert refused.value.response.status_code == 409
        assert Thread.objects.get(pk=thread["thread_id"]).status == "interrupted"


def test_update_state_writes_a_checkpoint_for_operators_only(server, personas):
    with _sync_client(server, personas["operator"].token) as op, _sync_client(server, personas["reviewer"].token) as rv:
        thread = op.threads.create()
        op.runs.wait(thread["thread_id"], "loan_approval", input=loan_input(amount=1000))  # auto-approved
        with pytest.raises(httpx.HTTPStatusError) as forbidden:
            rv.threads.update_state(thread["thread_id"], {"status": "archived"})
        assert forbidden.value.response.status_code == 403
        with pytest.raises(httpx.HTTPStatusError) as invalid:
            op.threads.update_state(thread["thread_id"], {"nope": 1})
        assert invalid.value.response.status_code == 422
        written = op.threads.update_state(thread["thread_id"], {"status": "archived"})
        state = op.threads.get_state(thread["thread_id"])
        assert state["checkpoint"]["checkpoint_id"] == written["checkpoint"]["checkpoint_id"]
        assert state["values"]["status"] == "archived"
    assert AuditEvent.objects.filter(thread_id=thread["thread_id"], action="thread.state_updated").exists()


@pytest.mark.parametrize("headers", [{}, {"x-api-key": "gh_wrong"}, {"Authorization": "Bearer gh_wrong"}])
def test_no_valid_key_is_401(server, headers):
    response = httpx.post(f"{server}/threads/search", json={}, headers=headers, timeout=scaled(10))
    assert response.status_code == 401


def test_a_bearer_token_works_as_well_as_the_api_key(server, personas):
    with get_sync_client(
        url=server, api_key=None, headers={"Authorization": f"Bearer {personas['auditor'].token}"}, timeout=TIMEOUT
    ) as client:
        assert {a["graph_id"] for a in client.assistants.search(limit=100)} >= {"loan_approval", "kyc_onboarding"}
        with pytest.raises(httpx.HTTPStatusError) as forbidden:
            client.threads.create()
        assert forbidden.value.response.status_code == 403


def test_a_graph_scoped_reviewer_sees_only_its_graphs(server, personas):
    with _sync_client(server, personas["operator"].token) as op:
        kyc = op.threads.create(metadata={"graph_id": "kyc_onboarding"})
    with _sync_client(server, personas["loan_reviewer"].token) as scoped:
        with pytest.raises(httpx.HTTPStatusError) as hidden:
            scoped.threads.get(kyc["thread_id"])
        assert hidden.value.response.status_code == 404
        assert scoped.threads.count(metadata={"graph_id": "kyc_onboarding"}) == 0  # counted as searched
        assert [a["graph_id"] for a in scoped.assistants.search(limit=100)] == ["loan_approval"]
