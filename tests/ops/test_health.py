"""Liveness and readiness probes, worker and beat heartbeats, ``manage.py health_check``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.test import Client

from tests.conftest import ROOT, daphne_start, free_port, process_group_stop, scaled, wait_for, worker_env
from tests.ops.test_production_settings import _script, _session_database_url
from tests.test_deploy_settings import _production_env

pytestmark = pytest.mark.usefixtures("live_db")


def test_liveness_answers_any_host_without_touching_anything():
    # An orchestrator probes by address: not in ALLOWED_HOSTS, plain HTTP.
    response = Client().get("/health/live", headers={"host": "10.1.2.3:8000"})

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert response["Cache-Control"] == "no-store"


def test_probes_refuse_writes():
    assert Client().post("/health/ready").status_code == 405


@pytest.mark.slow
def test_readiness_with_a_live_worker_and_beat_passes_every_check(live_worker):
    def ready():
        response = Client().get("/health/ready", headers={"host": "10.1.2.3:8000"})
        return response if response.status_code == 200 else None

    response = wait_for(ready, timeout=30, what="every readiness check to pass")

    body = response.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == {"database", "checkpointer", "broker", "channel_layer", "worker", "beat"}
    assert all(check["status"] == "ok" for check in body["checks"].values()), body
    assert body["checks"]["worker"]["workers"] >= 1
    assert body["checks"]["beat"]["age_seconds"] < 30


def test_readiness_can_be_narrowed_and_names_an_unknown_check():
    narrowed = Client().get("/health/ready", {"checks": "database,checkpointer"})
    assert narrowed.status_code == 200
    assert set(narrowed.json()["checks"]) == {"database", "checkpointer"}

    unknown = Client().get("/health/ready", {"checks": "database,dilithium"})
    assert unknown.status_code == 400
    error = unknown.json()["error"]  # the APIs' shape
    assert error["code"] == "bad_request" and error["field"] == "checks"
    assert "dilithium" in error["message"]


@pytest.mark.parametrize("query", ["checks=database&checks=checkpointer", "checks=database,checkpointer&checks="])
def test_readiness_takes_repeated_checks_parameters(query):
    # A repeated parameter ran only the last one.
    response = Client().get(f"/health/ready?{query}")

    assert response.status_code == 200
    assert set(response.json()["checks"]) == {"database", "checkpointer"}


def test_a_refused_method_answers_in_the_apis_error_shape():
    error = Client().post("/health/ready").json()["error"]

    assert error["code"] == "method_not_allowed" and "GET" in error["message"]


@pytest.mark.slow
def test_readiness_answers_503_within_seconds_when_postgresql_is_down(tmp_path):
    """Checks ran one after another, each waiting for the Django pool (10 s): ~33 s with PostgreSQL
    down, and Compose's probe (8 s) timed out instead of getting its 503."""
    env = _production_env(tmp_path, DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_port()}/gatehouse")
    result = _script(
        env,
        """
        import time
        from django.test import Client
        started = time.monotonic()
        response = Client().get("/health/ready", {"checks": "database,checkpointer,worker,beat"})
        print(json.dumps({"status": response.status_code, "seconds": time.monotonic() - started,
                          "body": response.json()}))
        """,
    )

    assert result["status"] == 503
    assert {name: check["status"] for name, check in result["body"]["checks"].items()} == dict.fromkeys(
        ("database", "checkpointer", "worker", "beat"), "fail"
    )
    assert result["seconds"] < scaled(7), result  # the deadline is 5 s
    assert result["body"]["checks"]["database"]["ms"] < 4500, result  # its own wait: 3 s, not the pool's 10 s


@pytest.mark.slow
def test_readiness_fails_with_503_naming_the_checks_but_not_the_secrets(tmp_path):
    port = free_port()  # nothing listens there: the broker and channel layer are down
    env = _production_env(
        tmp_path, DATABASE_URL=_session_database_url(), REDIS_URL=f"redis://:hunter2-secret@127.0.0.1:{port}/0"
    )
    result = _script(
        env,
        """
        from django.test import Client
        response = Client().get("/health/ready", {"checks": "database,broker,channel_layer"})
        print(json.dumps({"status": response.status_code, "body": response.content.decode()}))
        """,
    )

    assert result["status"] == 503
    body = json.loads(result["body"])
    assert body["status"] == "fail"
    assert body["checks"]["database"]["status"] == "ok"
    assert body["checks"]["broker"]["status"] == "fail"
    assert body["checks"]["channel_layer"]["status"] == "fail"
    assert "hunter2" not in result["body"] and str(port) not in result["body"]


@pytest.mark.slow
def test_readiness_probes_leave_no_channel_subscribed_in_the_web_process(bank, tmp_path):
    """The channel layer's check subscribes a channel of its own. The pub/sub layer unsubscribes a channel
    only when a receive on it is cancelled, so each probe's channel stayed subscribed for the life of the
    process: one more per probe, in daphne and in Redis (an orchestrator probing every 10 s: 8,640 a day).
    Through a real daphne, whose event loop lives as long as the process (an in-process client's loop
    closes after each request, and its subscriptions with it)."""
    import httpx
    import redis
    from django.conf import settings

    prefix = f"asgi-health-{uuid.uuid4().hex[:8]}"
    proc, base = daphne_start({**worker_env(bank), "GATEHOUSE_CHANNEL_PREFIX": prefix}, tmp_path / "daphne.log")
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:

        def live() -> bool:
            assert proc.poll() is None, (tmp_path / "daphne.log").read_text(errors="replace")[-2000:]
            try:
                return httpx.get(f"{base}/health/live", timeout=scaled(2)).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(live, timeout=40, interval=0.2, what="daphne to answer")
        probes = [
            httpx.get(f"{base}/health/ready", params={"checks": "channel_layer"}, timeout=scaled(10)).status_code
            for _ in range(20)
        ]
        assert probes == [200] * 20
        assert client.pubsub_channels(f"{prefix}health.*") == []
    finally:
        client.close()
        process_group_stop(proc)


def _manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(120)
    )


def _start(env: dict[str, str], args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "console", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.mark.slow
def test_a_worker_is_healthy_while_it_beats_and_stale_once_killed(bank, tmp_path):
    node = f"ops-{uuid.uuid4().hex[:8]}@{os.uname().nodename}"
    # Its own queue: this worker takes no part in other tests' runs.
    env = {**worker_env(bank), "GATEHOUSE_HEARTBEAT_SECONDS": "0.3", "GATEHOUSE_QUEUE": f"ops-{uuid.uuid4().hex[:8]}"}
    check = ["health_check", "--component", "worker", "--node", node, "--max-age", "2"]
    assert _manage(env, *check).returncode != 0  # never seen yet

    worker = _start(
        env,
        [
            "worker",
            "--pool=threads",
            "--concurrency=1",
            "-n",
            node,
            "-Q",
            env["GATEHOUSE_QUEUE"],
            "--without-mingle",
            "--without-gossip",
            "-l",
            "INFO",
        ],
        tmp_path / "worker.log",
    )
    try:
        wait_for(lambda: _manage(env, *check).returncode == 0, timeout=60, interval=0.5, what="worker heartbeat")
        os.killpg(worker.pid, 9)
        worker.wait(timeout=scaled(10))
        stale = wait_for(
            lambda: (r := _manage(env, *check)).returncode != 0 and r, timeout=30, interval=0.5, what="stale"
        )
        assert f"worker {node}: last heartbeat" in stale.stderr
    finally:
        process_group_stop(worker)


@pytest.mark.slow
def test_beat_is_healthy_while_it_ticks_and_stale_once_killed(bank, tmp_path):
    env = {
        **worker_env(bank),
        "GATEHOUSE_HEARTBEAT_SECONDS": "0.3",
        "GATEHOUSE_BEAT_HEARTBEAT_FILE": str(tmp_path / "beat.heartbeat"),
        # Its sweeps go to a queue nobody consumes: this beat is only here to tick.
        "GATEHOUSE_QUEUE": f"ops-{uuid.uuid4().hex[:8]}",
    }
    check = ["health_check", "--component", "beat", "--max-age", "2"]
    assert "no heartbeat yet" in _manage(env, *check).stderr

    beat = _start(env, ["beat", "-l", "INFO", "--schedule", str(tmp_path / "schedule")], tmp_path / "beat.log")
    try:
        wait_for(lambda: _manage(env, *check).returncode == 0, timeout=60, interval=0.5, what="beat heartbeat")
        os.killpg(beat.pid, 9)
        beat.wait(timeout=scaled(10))
        stale = wait_for(
            lambda: (r := _manage(env, *check)).returncode != 0 and r, timeout=30, interval=0.5, what="stale"
        )
        assert "last heartbeat" in stale.stderr
    finally:
        process_group_stop(beat)
        _purge_queue(env["GATEHOUSE_QUEUE"])


def _purge_queue(name: str) -> None:
    import redis
    from django.conf import settings

    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        client.delete(name)
    finally:
        client.close()


@pytest.mark.slow
def test_the_worker_health_command_says_unhealthy_when_the_database_is_down(tmp_path):
    env = _production_env(
        tmp_path, DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_port()}/gatehouse", GATEHOUSE_DB_POOL_TIMEOUT="0.5"
    )

    down = _manage(env, "health_check", "--component", "worker", "--node", "celery@nowhere")

    assert down.returncode == 1
    assert "unhealthy: worker celery@nowhere" in down.stderr
    assert "Traceback" not in down.stderr, down.stderr


@pytest.mark.slow
def test_the_web_health_command_checks_the_web_roles_own_dependencies(bank, tmp_path):
    env = worker_env(bank)
    assert _manage(env, "health_check", "--component", "web").returncode == 0

    down = _manage({**env, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}, "health_check", "--component", "web")
    assert down.returncode == 1
    assert "broker" in down.stderr and "channel_layer" in down.stderr and "database" not in down.stderr
    # One line, in words (it was a Python dict, after a WARNING line saying the same).
    assert len(down.stderr.strip().splitlines()) == 1, down.stderr
    assert down.stderr.startswith("CommandError: unhealthy: broker (OperationalError: "), down.stderr
    assert "), channel_layer (ConnectionError: " in down.stderr, down.stderr


def test_the_web_health_command_names_each_failing_check_and_its_reason(monkeypatch):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from console import health

    def refused() -> dict:
        raise ConnectionRefusedError("Error 111 connecting to redis:6379.\nConnection refused.")

    def stuck() -> dict:
        raise health.CheckFailed("no reply from the channel layer")

    monkeypatch.setitem(health.CHECKS, "broker", refused)
    monkeypatch.setitem(health.CHECKS, "channel_layer", stuck)
    with pytest.raises(CommandError) as caught:
        call_command("health_check", "--component", "web")
    assert str(caught.value) == (
        "unhealthy: broker (ConnectionRefusedError: Error 111 connecting to redis:6379.), "
        "channel_layer (no reply from the channel layer)"
    )


def test_without_a_node_the_worker_check_takes_any_worker_of_this_host(monkeypatch):
    """`make run` names its workers worker1@<host>, worker2@<host>: the documented check looked for
    celery@<host> only and called a healthy stack unhealthy."""
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from console.heartbeats import heartbeat_record, worker_heartbeat_name
    from console.models import HeartbeatComponent

    host = f"host-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr("socket.gethostname", lambda: host)
    heartbeat_record(name=worker_heartbeat_name(f"worker1@elsewhere-{host}"), component=HeartbeatComponent.WORKER)
    with pytest.raises(CommandError, match=r"^unhealthy: any worker of this host"):
        call_command("health_check", "--component", "worker")
    heartbeat_record(name=worker_heartbeat_name(f"worker2@{host}"), component=HeartbeatComponent.WORKER)
    call_command("health_check", "--component", "worker")


@pytest.mark.slow
def test_readiness_logs_an_outage_once_not_every_probe(tmp_path):
    """Every probe during an outage was logged at ERROR ("Service Unavailable: /health/ready"), with a
    traceback per failing check at WARNING: a 503 is the probe's answer. One WARNING now names what started
    failing, and one line says when it passes again."""
    env = _production_env(tmp_path, DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_port()}/gatehouse")
    result = _script(
        env,
        """
        from django.test import Client
        from console import health
        statuses = [Client().get("/health/ready", {"checks": "database"}).status_code for _ in range(3)]
        health.CHECKS["database"] = lambda: {}  # the database is back
        statuses.append(Client().get("/health/ready", {"checks": "database"}).status_code)
        print(json.dumps({"statuses": statuses, "log": captured.getvalue()}))
        """,
        log_captured=True,
    )

    assert result["statuses"] == [503, 503, 503, 200]
    lines = [line for line in result["log"].splitlines() if " console." in line or " django." in line]
    assert [line.split(":")[0] for line in lines] == [
        "WARNING console.health readiness check failing",
        "INFO console.health readiness check passing again",
    ], result["log"]
    assert "database: PoolTimeout" in lines[0]
    assert "Service Unavailable" not in result["log"] and "Traceback" not in result["log"]
