"""The embedded stack (SQLite, SQLite broker, no servers) runs the same flow over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, daphne_start, process_group_stop, scaled, wait_for
from tests.embedded.time_travel_checks import fork_pays_anew_once

pytestmark = pytest.mark.embedded

_SERVER_VARS = ("DATABASE_URL", "REDIS_URL", "GATEHOUSE_QUEUE", "GATEHOUSE_GRAPHS", "SECRET_KEY", "GATEHOUSE_VAR_DIR")


@pytest.fixture
def embedded(tmp_path: Path, bank) -> Iterator[dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in _SERVER_VARS and not k.startswith("PYTEST")}
    env.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        GATEHOUSE_VAR_DIR=str(tmp_path / "var"),
        GATEHOUSE_FAKE_BANK_URL=bank.url,
        GATEHOUSE_SWEEP_SECONDS="1",
        PYTHONUNBUFFERED="1",
    )

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120)
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    manage("migrate", "--no-input")
    manage("demo_setup")
    tokens = {name: manage("issue_token", name).strip() for name in ("operator", "reviewer")}
    ready = tmp_path / "worker-ready"
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "--pool=threads",
                "--concurrency=2",
                "--beat",
                "--schedule",
                str(tmp_path / "beat"),
            ],
            cwd=ROOT,
            env={**env, "GATEHOUSE_READY_FILE": str(ready)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    web, base = daphne_start(env, tmp_path / "daphne.log")

    def web_up() -> bool:
        try:
            return httpx.get(f"{base}/api/docs", timeout=scaled(1)).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(ready.exists, timeout=40, what="embedded worker")
        wait_for(web_up, timeout=40, what="embedded web server")
        yield {"base": base, **tokens, "var": str(tmp_path / "var")}
    finally:
        process_group_stop(worker)
        process_group_stop(web)


def test_the_embedded_stack_runs_start_decide_complete(embedded, bank):
    base = embedded["base"]
    operator = httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {embedded['operator']}"}, timeout=scaled(10)
    )
    reviewer = httpx.Client(
        base_url=base, headers={"Authorization": f"Bearer {embedded['reviewer']}"}, timeout=scaled(10)
    )

    started = operator.post(
        "/api/threads",
        json={
            "graph": "loan_approval",
            "input": {"applicant": "Embedded", "loan_id": "E-1", "amount": 20000, "income": 40000},
        },
    )
    assert started.status_code == 201, started.text
    thread_id = started.json()["id"]

    def task() -> dict | None:
        items = reviewer.get("/api/tasks", params={"status": "pending", "thread": thread_id}).json()["items"]
        return items[0] if items else None

    pending = wait_for(task, timeout=30, what="the embedded task")
    decided = reviewer.post(f"/api/tasks/{pending['id']}/decision", json={"decision": "approve", "reason": "ok"})
    assert decided.status_code == 201, decided.text

    def completed() -> dict | None:
        body = reviewer.get(f"/api/threads/{thread_id}").json()
        return body if body["status"] == "completed" else None

    done = wait_for(completed, timeout=30, what="the embedded thread to complete")
    assert done["values"]["status"] == "disbursed"
    assert bank.ledger.executions[f"gh:{thread_id}:disburse"] == 1
    assert (Path(embedded["var"]) / "gatehouse.sqlite3").exists()
    assert (Path(embedded["var"]) / "checkpoints.sqlite3").exists()
    # The demo set-up paused its own threads at their gates, too.
    demo_pending = reviewer.get("/api/tasks", params={"status": "pending"}).json()["items"]
    assert {t["graph"] for t in demo_pending} >= {"loan_approval", "kyc_onboarding"}
    # time travel on SQLite: a forked loan pays anew, once; the original payment stays one
    fork_pays_anew_once(embedded, bank)
    # Long-term memory on SQLite (docs/memory-store.md): the run remembered the outcome for the applicant.
    assert (Path(embedded["var"]) / "store.sqlite3").exists()
    found = reviewer.post("/lg/store/items/search", json={"namespace_prefix": ["applicants", "Embedded"]})
    assert found.status_code == 200, found.text
    [memory] = [i for i in found.json()["items"] if i["key"] == "E-1"]
    assert memory["value"]["outcome"] == "disbursed" and memory["value"]["income"] == "•••• redacted"
    # /lg/ stream modes on SQLite (docs/platform-api.md): the worker's chunks reach the web process
    # through var/run_streams.sqlite3, live and again for a late join.
    streamed_and_joined(operator, Path(embedded["var"]))


def _events(body: str) -> list[tuple[str, str]]:
    """(event, id) of each server-sent event."""
    out = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            out.append((fields["event"], fields.get("id", "")))
    return out


def streamed_and_joined(operator: httpx.Client, var: Path) -> None:
    thread = operator.post("/lg/threads", json={}).json()["thread_id"]
    body = {
        "assistant_id": "loan_approval",
        "input": {"applicant": "Streamed", "loan_id": "E-2", "amount": 20000, "income": 40000},
        "stream_mode": ["updates", "values", "debug"],
    }
    with operator.stream("POST", f"/lg/threads/{thread}/runs/stream", json=body, timeout=scaled(60)) as response:
        assert response.status_code == 200
        live = _events(response.read().decode())
        run = response.headers["content-location"].rsplit("/", 1)[-1]
    names = [name for name, _ in live]
    assert names[0] == "metadata" and names[-1] == "end" and {"updates", "values", "debug"} <= set(names), names
    joined = _events(operator.get(f"/lg/threads/{thread}/runs/{run}/stream", timeout=scaled(60)).text)
    assert [e for e in joined if e[1]] == [e for e in live if e[1]], "a late join gets every chunk, in order"
    assert (var / "run_streams.sqlite3").exists()
    # The thread's stream (threads.join_stream) replays the run from the log's first id, then its run_done.
    replayed = operator.get(
        f"/lg/threads/{thread}/stream", params={"follow": "false"}, headers={"Last-Event-ID": "0"}, timeout=scaled(60)
    )
    assert _events(replayed.text) == [("metadata", ""), *[e for e in live if e[1]], ("metadata", "")], replayed.text
    assert replayed.text.endswith(f'data: {{"status": "run_done", "run_id": "{run}"}}\n\n')
    thread_followed_live(operator)


def thread_followed_live(operator: httpx.Client) -> None:
    """Joined first, a thread's stream sends the run started after the join, found without NOTIFY (SQLite)."""
    thread = operator.post("/lg/threads", json={}).json()["thread_id"]
    with operator.stream("GET", f"/lg/threads/{thread}/stream", timeout=scaled(60)) as response:
        lines = response.iter_lines()
        assert next(lines) == ": joined"
        started = operator.post(
            f"/lg/threads/{thread}/runs",
            json={
                "assistant_id": "loan_approval",
                "input": {"applicant": "Followed", "loan_id": "E-3", "amount": 20000, "income": 40000},
            },
        )
        assert started.status_code == 200, started.text
        done = f'data: {{"status": "run_done", "run_id": "{started.json()["run_id"]}"}}'
        seen = []
        for line in lines:
            seen.append(line)
            if line == done:
                break
    assert f'data: {{"run_id": "{started.json()["run_id"]}", "attempt": 1}}' in seen, seen
