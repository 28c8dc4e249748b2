"""GATEHOUSE_LOG_FORMAT=json: one JSON object per line, with request, thread, run and task ids where known."""

from __future__ import annotations

import io
import json
import logging
import re
import uuid
from pathlib import Path

import pytest
from django.test import Client

from console.logs import ContextFilter, HousekeepingFilter, JsonFormatter, log_context
from tests.conftest import (
    WorkerProcess,
    loan_input,
    pending_tasks,
    process_group_stop,
    thread_start,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.usefixtures("live_db")


@pytest.fixture
def json_lines():
    """A JSON handler on the root logger, as settings.LOGGING builds it for GATEHOUSE_LOG_FORMAT=json."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)


def test_a_request_logs_its_request_and_thread_ids_and_echoes_the_request_id(reviewer, json_lines):
    client = Client()
    client.force_login(reviewer.user)
    thread_id = uuid.uuid4()

    response = client.get(f"/threads/{thread_id}/", headers={"x-request-id": "req-ops-42"})

    assert response.status_code == 404
    assert response["X-Request-ID"] == "req-ops-42"
    [line] = [entry for entry in json_lines() if entry["logger"] == "django.request"]
    assert line["message"] == f"Not Found: /threads/{thread_id}/"
    assert line["level"] == "WARNING"
    assert line["request_id"] == "req-ops-42"
    assert line["thread_id"] == str(thread_id)
    assert "time" in line and "thread_name" in line


def test_an_unsafe_request_id_is_replaced_and_ids_do_not_leak_between_requests(reviewer, json_lines):
    client = Client()
    client.force_login(reviewer.user)

    first = client.get(f"/tasks/{uuid.uuid4()}/", headers={"x-request-id": "bad id\nwith newline"})
    second = client.get("/no-such-page/")

    assert first["X-Request-ID"] != "bad id\nwith newline" and len(first["X-Request-ID"]) == 32
    lines = [entry for entry in json_lines() if entry["logger"] == "django.request"]
    assert lines[0]["request_id"] == first["X-Request-ID"] and "task_id" in lines[0]
    assert lines[1]["request_id"] == second["X-Request-ID"] and "task_id" not in lines[1]
    logging.getLogger("gatehouse.test").warning("outside any request")
    assert not {"request_id", "task_id", "thread_id"} & set(json_lines()[-1])


def test_the_context_is_restored_after_a_block(json_lines):
    log = logging.getLogger("gatehouse.test")
    with log_context(run_id="r-1", thread_id="t-1"):
        log.info("inside")
    log.info("outside")

    inside, outside = json_lines()[-2:]
    assert (inside["run_id"], inside["thread_id"]) == ("r-1", "t-1")
    assert "run_id" not in outside and "thread_id" not in outside


@pytest.mark.integration
def test_a_worker_logs_json_lines_carrying_the_run_thread_and_task_ids(worker, bank, operator, reviewer, tmp_path):
    worker.stop()  # the session worker would take the run; later tests restart it (live_worker)
    # The sweeps' own lines kept (GATEHOUSE_LOG_HOUSEKEEPING): they must carry no run's ids.
    env = {**worker_env(bank), "GATEHOUSE_LOG_FORMAT": "json", "GATEHOUSE_LOG_HOUSEKEEPING": "true"}
    json_worker = WorkerProcess(env, tmp_path)
    json_worker.start()
    try:
        thread = thread_start(operator, "loan_approval", loan_input())
        pending_tasks(reviewer, thread["id"])
        claimed = wait_for(
            lambda: [
                e
                for e in _json_entries(json_worker)
                if e["message"].startswith("run ") and e["message"].endswith("finished: interrupted")
            ],
            what="the run's finish in the worker log",
        )
        sweeps = wait_for(
            lambda: [e for e in _json_entries(json_worker) if "Task runtime.sweep_runs" in e["message"]],
            what="a sweep's lines in the worker log",
        )
    finally:
        json_worker.stop()

    entries = _json_entries(json_worker)
    run_lines = [e for e in entries if e.get("thread_id") == thread["id"]]
    messages = [e["message"] for e in run_lines]
    assert any("claimed (start, attempt 1)" in m for m in messages), messages
    assert claimed[0] in run_lines
    for entry in run_lines:
        assert entry["run_id"] and entry["celery_task_id"], entry
    # After the task, the ids are gone again (the heartbeat and sweeper lines carry none of them).
    assert all("run_id" not in e for e in sweeps)
    assert len({e["run_id"] for e in run_lines}) == 1
    # Nothing but objects, from its start to its stop: Celery printed its banner (and, asked to stop,
    # "worker: Warm shutdown (MainProcess)") as plain text in the JSON log (an outside QA's find).
    _every_line_json(json_worker.log_path)
    assert any(e["message"] == "worker: Warm shutdown (MainProcess)" for e in entries), entries[-5:]


def _every_line_json(path: Path) -> list[dict]:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    plain = [line for line in lines if not line.startswith("{")]
    assert not plain, f"{len(plain)} lines are not JSON, for example: {plain[:5]}"
    return [json.loads(line) for line in lines]


@pytest.mark.slow
def test_beat_logs_json_lines_only_from_its_start_to_its_stop(bank, tmp_path):
    from tests.ops.test_health import _purge_queue, _start

    env = {
        **worker_env(bank),
        "GATEHOUSE_LOG_FORMAT": "json",
        "GATEHOUSE_BEAT_HEARTBEAT_FILE": str(tmp_path / "beat.heartbeat"),
        # Its sweeps go to a queue nobody consumes: this beat is only here to start and stop.
        "GATEHOUSE_QUEUE": f"ops-{uuid.uuid4().hex[:8]}",
    }
    log = tmp_path / "beat.log"
    beat = _start(env, ["beat", "-l", "INFO", "--schedule", str(tmp_path / "schedule")], log)
    try:
        wait_for(lambda: (tmp_path / "beat.heartbeat").exists(), timeout=60, what="beat's first tick")
    finally:
        process_group_stop(beat)
        _purge_queue(env["GATEHOUSE_QUEUE"])
    entries = _every_line_json(log)
    assert any(e["message"].startswith("beat: Starting") for e in entries), entries


def test_the_worker_does_not_log_its_periodic_sweeps_but_logs_what_they_do(
    live_worker, operator, reviewer, monkeypatch
):
    # The web process died between COMMIT and the dispatch: only a sweep will send the run.
    monkeypatch.setattr("runtime.runs.run_dispatch", lambda **_: None)
    thread = thread_start(operator, "loan_approval", loan_input())
    monkeypatch.undo()
    pending_tasks(reviewer, thread["id"], timeout=30)  # the sweeper re-sent the run; the worker ran it
    resent = f"sweeper: re-dispatching run {thread['run_id']}"
    log = wait_for(
        lambda: text if resent in (text := live_worker.log_path.read_text(errors="replace")) else None,
        what="the sweeper's warning in the worker log",
    )
    # Beat sent that sweep, and the worker received it, before it re-sent the run: their lines would be above.
    assert "Sending due task" not in log
    assert "Task runtime.sweep_runs[" not in log
    # Celery's INFO lines about the work itself still come.
    assert re.search(r"Task runtime\.execute_run\[[0-9a-f-]+\] received", log)


@pytest.mark.parametrize(
    "logger,level,args,shown",
    [
        (
            "celery.app.trace",
            logging.INFO,
            {"name": "runtime.sweep_runs", "id": "1", "runtime": 0.01, "return_value": 0},
            False,
        ),
        (
            "celery.app.trace",
            logging.INFO,
            {"name": "approvals.anchor_audit", "id": "2", "runtime": 0.01, "return_value": 0},
            False,
        ),
        (
            "celery.app.trace",
            logging.INFO,
            {"name": "runtime.execute_run", "id": "3", "runtime": 0.01, "return_value": None},
            True,
        ),
        (
            "celery.app.trace",
            logging.ERROR,
            {"name": "runtime.sweep_runs", "id": "4", "runtime": 0.01, "return_value": 0},
            True,
        ),
        ("celery.app.trace", logging.INFO, ("runtime.sweep_runs",), True),  # not the shape of a task line
    ],
)
def test_the_housekeeping_filter_drops_only_the_routine_lines_of_scheduled_tasks(logger, level, args, shown):
    from celery.app.trace import LOG_SUCCESS

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(HousekeepingFilter())  # the tasks of settings.CELERY_BEAT_SCHEDULE
    target = logging.getLogger(logger)
    target.addHandler(handler)
    try:
        target.log(level, LOG_SUCCESS if isinstance(args, dict) else "%s", args)
    finally:
        target.removeHandler(handler)
    assert bool(stream.getvalue()) is shown


def _json_entries(process: WorkerProcess) -> list[dict]:
    entries = []
    for line in process.log_path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            entries.append(json.loads(line))
    return entries


@pytest.mark.parametrize(
    ("method", "path", "target"),
    [
        ("get", "/api/threads", "approvals.selectors.threads_list"),
        ("post", "/lg/threads/search", "lgplatform.services.threads_search"),
    ],
)
def test_an_api_request_during_a_database_outage_logs_one_warning(reviewer, caplog, monkeypatch, method, path, target):
    """docs/deploy.md "PostgreSQL outages": one WARNING line per request, no traceback. Django's handler also
    logged ERROR "Service Unavailable: /api/threads" for the same 503, on every request of the outage."""
    from django.db import OperationalError

    def down(*args: object, **kwargs: object) -> None:
        raise OperationalError("couldn't get a connection after 1.00 sec")

    monkeypatch.setattr(target, down)
    with caplog.at_level(logging.INFO):
        response = getattr(reviewer.client, method)(path)

    assert response.status_code == 503 and response.json()["error"]["code"] == "unavailable", response.content
    lines = [(r.levelname, r.name, r.getMessage(), r.exc_info) for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1, lines
    level, logger, message, exc_info = lines[0]
    assert (level, logger, exc_info) == ("WARNING", "approvals.api_common", None)
    assert message == f"{method.upper()} {path}: database unavailable: couldn't get a connection after 1.00 sec"
