"""Fixtures: the real services, a real Celery worker process, personas with API tokens."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.conf import settings
from django.db import connection
from django.test import Client

from demo.fakebank import BankHandler, BankServer

ROOT = Path(__file__).resolve().parent.parent


# One test-time factor for every deadline in the suite: a loaded or slow machine sets
# GATEHOUSE_TEST_TIME_FACTOR=3 (CI defaults to 2) instead of each test guessing its own margin.
TIME_FACTOR = float(os.environ.get("GATEHOUSE_TEST_TIME_FACTOR") or ("2" if os.environ.get("CI") else "1"))


def scaled(seconds: float) -> float:
    """A deadline in seconds, stretched by the suite's time factor."""
    return seconds * TIME_FACTOR


def api_wait(seconds: float, *, limit: float | None = None) -> float:
    """A long poll's ``timeout`` (or ``wait``) to send the API: ``seconds`` scaled, but no more than the API
    accepts, which refuses a longer one with a 422 (``limit``; by default the thread polls' and
    ``/lg/``'s GATEHOUSE_PLATFORM_WAIT_SECONDS)."""
    most = float(settings.GATEHOUSE_PLATFORM_WAIT_SECONDS) if limit is None else limit
    return min(scaled(seconds), most)


def wait_for(predicate: Callable[[], Any], *, timeout: float = 20.0, interval: float = 0.05, what: str = "") -> Any:
    """Poll until ``predicate()`` is truthy; fail the test (never hang) after ``timeout`` seconds
    (scaled by the suite's time factor)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


# --- the database -------------------------------------------------------------------


def _admin_connection() -> Any:
    import psycopg

    db = settings.DATABASES["default"]
    return psycopg.connect(host=db["HOST"], port=db["PORT"], user=db["USER"], dbname="postgres", autocommit=True)


def _terminate_backends(dbname: str) -> None:
    with _admin_connection() as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            [dbname],
        )


def _drop_orphaned_test_databases() -> None:
    """Drop test databases left by sessions that died (their pid is in the name)."""
    with _admin_connection() as conn:
        names = [r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'test_gatehouse_%'")]
        for name in names:
            pid = name.rsplit("_", 1)[-1]
            if pid.isdigit() and int(pid) != os.getpid() and not Path(f"/proc/{pid}").exists():
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", [name])
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')


@pytest.fixture(scope="session")
def django_db_setup(django_test_environment: None, django_db_blocker: Any) -> Iterator[None]:
    """Always create the test database: most tests here use committed data (``live_db``)
    rather than pytest-django's ``django_db`` mark, which is what normally triggers it."""
    from django.test.utils import setup_databases, teardown_databases

    from runtime.checkpointer import checkpointer_close

    _drop_orphaned_test_databases()
    # `make mutants` runs the same tests once per mutant: it names one database
    # to keep between sessions (GATEHOUSE_TEST_KEEPDB) instead of migrating a new one each time.
    keep = os.environ.get("GATEHOUSE_TEST_KEEPDB")
    if keep:
        settings.DATABASES["default"]["TEST"]["NAME"] = keep
        connection.settings_dict["TEST"]["NAME"] = keep
    # A test without the database that compiled a graph before this ran (the registry tests do) built
    # the process's saver on the database named before the test database replaced it, which need not
    # exist: the migrations' checkpointer_setup then waited on that pool until PoolTimeout, failing
    # every test of that xdist worker. Build it afresh, for the test database.
    checkpointer_close()
    _compiled_graphs_forget()
    with django_db_blocker.unblock():
        db_cfg = setup_databases(
            verbosity=0,
            interactive=False,
            aliases={"default"},
            keepdb=bool(keep),
            serialized_aliases=set() if keep else None,
        )
    yield
    checkpointer_close()
    # The compiled graphs hold the saver (and its pool) just closed: a second test session in
    # this process (`make mutants` runs several in one mutmut process) must compile them afresh.
    _compiled_graphs_forget()
    if keep:
        with django_db_blocker.unblock():
            connection.close()
        return
    _terminate_backends(connection.settings_dict["NAME"])
    with django_db_blocker.unblock():
        connection.close()
        teardown_databases(db_cfg, verbosity=0)


def _compiled_graphs_forget() -> None:
    from runtime import registry

    for entry in (registry._registry or {}).values():
        entry._compiled = None


@pytest.fixture
def audit_quiet(request: pytest.FixtureRequest) -> None:
    """Every audit chain's lock, held for a ``django_db`` test's transaction: the session's worker may
    still be finishing an earlier test's threads (files come in any order under ``make test``'s two
    sessions), and their events must not land in a trail this test counts or checks whole. A no-op
    for tests on committed data (``live_db``), which race writers on purpose."""
    if request.node.get_closest_marker("django_db") is None:
        return
    request.getfixturevalue("db")
    from approvals.audit import chain_lock, chains_configured

    for chain in range(1, chains_configured() + 1):
        chain_lock(chain)


@pytest.fixture
def made_up_gates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tasks at gates their graph does not have (a unique or outsized node name keeps a test's rows apart) may be
    decided in this process, as if the graph had them; without it a decision on one is refused as the graph
    no longer having its node (``approvals.abilities.node_gone_refusal``)."""
    from runtime.registry import GraphEntry

    monkeypatch.setattr(GraphEntry, "node_missing", lambda self, node, checkpoint_ns="": None)


def backend_pid() -> int:
    """This thread's PostgreSQL backend (each thread has its own Django connection)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


# --- server processes ----------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def daphne_start(env: dict[str, str], log_path: Path) -> tuple[subprocess.Popen[bytes], str]:
    """daphne serving ``console.asgi`` on a free loopback port in its own process group; (process, base URL).
    Started as every documented start of the web process starts it (``console.serve``: daphne's server with
    Gatehouse's access log and stop), not as bare daphne."""
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "console.serve", "-b", "127.0.0.1", "-p", str(port), "console.asgi:application"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return proc, f"http://127.0.0.1:{port}"


def process_group_stop(proc: subprocess.Popen[bytes], *, timeout: float = 15.0) -> None:
    """SIGTERM the process's group, SIGKILL it if it has not exited within ``timeout`` (scaled)."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=scaled(timeout))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=scaled(10))


@contextlib.contextmanager
def daphne_serving(
    env: dict[str, str], log_path: Path, *, ready: str = "/accounts/login/", status: int = 200, what: str = "daphne"
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``daphne_start``, waited on until ``GET ready`` answers ``status`` (failing with its log if it exits
    first), and stopped afterwards; (process, base URL)."""
    proc, base = daphne_start(env, log_path)

    def up() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"daphne exited: {log_path.read_text(errors='replace')[-3000:]}")
        try:
            return httpx.get(f"{base}{ready}", timeout=scaled(2)).status_code == status
        except httpx.TransportError:
            return False

    try:
        wait_for(up, timeout=40, interval=0.2, what=what)
        yield proc, base
    finally:
        process_group_stop(proc)


# --- the outside world -------------------------------------------------------


class HoldingBankHandler(BankHandler):
    server: HoldingBank

    def do_POST(self) -> None:
        # Held once the whole request is in: a call held after its headers only could lose its body to a caller
        # killed in between (the bank then never acts on it, as a real server would not), and a test that kills
        # the caller while "its call is in flight" raced the body's write (seen on a loaded CI machine).
        length = int(self.headers.get("Content-Length") or 0)
        arrived, self.rfile = self.rfile, io.BytesIO(self.rfile.read(length))
        try:
            self.server.hold_point(self.headers.get("Idempotency-Key") or "")
            super().do_POST()
        finally:
            self.rfile = arrived  # the connection's next request (keep-alive)


class HoldingBank(BankServer):
    """The fake bank (demo.fakebank), whose calls a test can hold in flight.

    Inside ``with bank.held():`` a call waits as it arrives, before the bank does
    anything, until the block ends; ``bank.holding(key)`` counts the calls waiting.
    A test that must act while an action's call is in flight (kill a worker, cut
    its connections, send SIGTERM) holds the call instead of making the bank slow
    and hoping to act within the delay: on a busy machine the delay runs out first.
    """

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0))
        self.RequestHandlerClass = HoldingBankHandler
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._holding: dict[str, int] = {}

    def hold_point(self, key: str) -> None:
        if self._open.is_set():
            return
        with self._lock:
            self._holding[key] = self._holding.get(key, 0) + 1
        try:
            self._open.wait(timeout=scaled(120))  # a test that forgot to release never hangs the bank
        finally:
            with self._lock:
                self._holding[key] -= 1

    def holding(self, key: str) -> int:
        with self._lock:
            return self._holding.get(key, 0)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._open.clear()
        try:
            yield
        finally:
            self._open.set()


@pytest.fixture(scope="session")
def bank() -> Iterator[HoldingBank]:
    server = HoldingBank()
    threading.Thread(target=server.serve_forever, name="fakebank", daemon=True).start()
    yield server
    server.shutdown()


# --- a real Celery worker process ----------------------------------------------


# Every worker process this session started (the session worker, the fault tests' own): see workers_alive.
_WORKERS: list[WorkerProcess] = []


def workers_alive() -> bool:
    """Is any worker process of this session running? Without one, a queued run stays queued (and quiet)."""
    return any(worker.alive for worker in _WORKERS)


class WorkerProcess:
    """A Celery worker (with beat for the sweeper) in its own process group."""

    def __init__(self, env: dict[str, str], workdir: Path, *, pool: str = "threads", concurrency: int = 4) -> None:
        # Celery takes the configured pool over an explicit --pool=prefork: the environment says it too.
        self.env = {**env, "GATEHOUSE_WORKER_POOL": pool}
        self.pool, self.concurrency = pool, concurrency
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "worker.log"

    def start(self, *, timeout: float = 40.0) -> None:
        ready = self.workdir / "ready"
        if ready.exists():
            ready.unlink()
        env = {**self.env, "GATEHOUSE_READY_FILE": str(ready)}
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "console",
                "worker",
                "--beat",
                f"--pool={self.pool}",
                f"--concurrency={self.concurrency}",
                "--loglevel=INFO",
                "-Q",
                f"{env['GATEHOUSE_QUEUE']},{env['GATEHOUSE_QUEUE']}.outbound",  # runs, and outbound webhooks
                "--schedule",
                str(self.workdir / f"beat-{uuid.uuid4().hex[:6]}"),
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if self not in _WORKERS:
            _WORKERS.append(self)
        try:
            wait_for(lambda: ready.exists() or self.proc.poll() is not None, timeout=timeout, what="worker ready")
        except AssertionError:
            self.kill()
            raise
        if self.proc.poll() is not None:
            raise RuntimeError(f"worker exited with {self.proc.returncode}; see {self.log_path}:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL the whole process group: no cleanup, no acks, like a machine dying."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=scaled(10))

    def stop(self) -> None:
        if self.proc:
            process_group_stop(self.proc)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def worker_env(bank: BankServer) -> dict[str, str]:
    db = connection.settings_dict
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env.update(
        DJANGO_SETTINGS_MODULE="console.settings",
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        GATEHOUSE_FAKE_BANK_URL=bank.url,
        PYTHONUNBUFFERED="1",
    )
    return env


@pytest.fixture(scope="session")
def worker(
    django_db_setup: None, django_db_blocker: Any, bank: BankServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerProcess]:
    process = WorkerProcess(worker_env(bank), tmp_path_factory.mktemp("worker"))
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
def console_server(django_db_setup: None, bank: BankServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """daphne serving the console (HTTP + websockets) on the test database, as production serves it; one per
    session: every browser test signs in on contexts of its own, so none needs a fresh server, and a start
    costs a loaded machine seconds of CPU per module.

    Plain http: production settings mark the session and CSRF cookies Secure, which a browser does not send
    back over http, so just that is switched off; ``tests.settings`` gives the personas' passwords the
    test-only fast hasher. ``DJANGO_ALLOW_ASYNC_UNSAFE`` (which a browser test sets for its own thread) is
    not passed on: the server must fail a synchronous database call from async code as production does."""
    env = {
        **worker_env(bank),
        "GATEHOUSE_SERVE_STATIC": "true",
        "SECURE_COOKIES": "false",
        "SECURE_SSL_REDIRECT": "false",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    log_path = tmp_path_factory.mktemp("daphne") / "daphne.log"
    with daphne_serving(env, log_path, what="daphne to serve the console") as (_, base):
        yield base


@pytest.fixture
def live_worker(worker: WorkerProcess) -> WorkerProcess:
    """The session worker, restarted first if an earlier test killed it."""
    if not worker.alive:
        worker.start()
    return worker


@pytest.fixture
def live_db(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Committed database access (no wrapping transaction), as a worker process needs to see it.

    Rows persist for the session: tests create their own threads and never
    count rows they did not create.
    """
    with django_db_blocker.unblock():
        yield


# --- personas ----------------------------------------------------------------------


@dataclass
class Persona:
    username: str
    role: str | None
    token: str
    user: Any

    @property
    def client(self) -> ApiClient:
        return ApiClient(self.token)


class ApiClient:
    """JSON calls to the API in this process (commits are real: use with live_db)."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def get(self, path: str, **params: Any) -> Any:
        return _off_the_loop(lambda: self.client.get(path, params, headers=self.headers))

    def post(self, path: str, body: Any = None, *, raw: bytes | str | None = None) -> Any:
        data = raw if raw is not None else json.dumps(body if body is not None else {})
        headers = self.headers
        return _off_the_loop(lambda: self.client.post(path, data, content_type="application/json", headers=headers))

    def delete(self, path: str) -> Any:
        return _off_the_loop(lambda: self.client.delete(path, headers=self.headers))


def _off_the_loop(call: Callable[[], Any]) -> Any:
    """``call()``, on another thread if this one runs an event loop.

    The test client runs async views (long polls, the start) through ``async_to_sync``, which refuses
    a thread with a running loop — and Playwright's sync API keeps one in a browser test's thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return call()

    def closing() -> Any:
        from django.db import connections

        try:
            return call()
        finally:
            connections.close_all()  # this thread's own connections: it ends here

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(closing).result()


PERSONAS: dict[str, tuple[str | None, list[str]]] = {
    "reviewer": ("reviewer", ["*"]),
    "reviewer2": ("reviewer", ["*"]),
    "loan_reviewer": ("reviewer", ["loan_approval"]),
    "approver": ("approver", ["*"]),
    "approver2": ("approver", ["*"]),
    "auditor": ("auditor", []),
    "operator": ("operator", ["*"]),
    "admin": ("admin", ["*"]),
    "outsider": (None, []),
}


@pytest.fixture(scope="session")
def personas(django_db_setup: None, django_db_blocker: Any) -> dict[str, Persona]:
    from django.contrib.auth import get_user_model

    from approvals.models import GraphAssignment
    from approvals.roles import roles_ensure
    from approvals.tokens import token_issue

    suffix = uuid.uuid4().hex[:6]
    out = {}
    with django_db_blocker.unblock():
        groups = roles_ensure()
        for name, (role, graphs) in PERSONAS.items():
            user = get_user_model().objects.create_user(f"{name}-{suffix}", password="gatehouse")
            if role:
                user.groups.add(groups[role])
            for graph in graphs:
                GraphAssignment.objects.create(user=user, graph=graph)
            out[name] = Persona(user.username, role, token_issue(user=user), user)
    return out


@pytest.fixture
def reviewer(personas: dict[str, Persona]) -> Persona:
    return personas["reviewer"]


@pytest.fixture
def operator(personas: dict[str, Persona]) -> Persona:
    return personas["operator"]


@pytest.fixture
def auditor(personas: dict[str, Persona]) -> Persona:
    return personas["auditor"]


# --- flow helpers --------------------------------------------------------------------


@pytest.fixture
def dispatched(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Runs queued by the test are recorded, not sent: the test executes them here (``run_execute``), or not.

    Those it leaves queued or running are cancelled at its end: the session's live worker's sweeper would
    otherwise send them on, and their runs would write audit rows and live events behind later tests'
    backs (a whole-trail export count, a live list waiting for runs to settle)."""
    from runtime import runs

    sent: list[str] = []
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: sent.append(str(run_id)))
    yield sent
    runs_settle(sent)


def runs_settle(run_ids: Iterable[Any]) -> None:
    """End those of ``run_ids`` a test left queued or running (cancelled, no lease), so the session's live
    worker's sweeper does not send them on behind later tests' backs. What ``dispatched`` does at its end,
    for tests that make runs without dispatching them."""
    from runtime.models import ACTIVE_RUN_STATUSES, Run, RunStatus

    Run.objects.filter(pk__in=list(run_ids), status__in=ACTIVE_RUN_STATUSES).update(
        status=RunStatus.CANCELLED, lease_expires_at=None
    )


def session_waits_on_lock(pid: int | None) -> bool:
    """Whether PostgreSQL session ``pid`` waits for a lock: how a test that holds one request at a known point
    sees the other reach its lock before letting the first go on (a race controlled, not hoped for)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid or 0])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def graph_release_write(directory: Path, graph: str, module: str, gates: list[str]) -> Path:
    """One release of ``graph`` as a team deploys it: its module and a ``langgraph.json`` naming the graph and
    its gates (none: a graph that never pauses), in ``directory``; the config's path, for ``registry_load`` (a
    restart on that release)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "review.py").write_text(module)
    config: dict[str, Any] = {"graphs": {graph: "./review.py:graph"}}
    if gates:
        config["gatehouse"] = {"gates": {graph: gates}}
    (directory / "langgraph.json").write_text(json.dumps(config))
    return directory / "langgraph.json"


def lg_run_executed(persona: Persona, graph: str, body: dict[str, Any]) -> tuple[str, str]:
    """A /lg/ run of ``graph`` (``body``: its input, config, ...) on a new thread, executed here by the worker's
    executor: (thread id, run id). Use with ``dispatched``, which keeps the run from being sent to a worker."""
    from runtime.executor import run_execute

    thread = persona.client.post("/lg/threads", {}).json()["thread_id"]
    created = persona.client.post(f"/lg/threads/{thread}/runs", {"assistant_id": graph, **body})
    assert created.status_code == 200, created.content
    run_id = created.json()["run_id"]
    run_execute(run_id=run_id)
    return thread, run_id


def lg_stream_error(persona: Persona, thread: str, run_id: str) -> Any:
    """The ``error`` event's data of a finished /lg/ run's stream (``runs.join_stream``)."""
    from asgiref.sync import async_to_sync

    response = persona.client.get(f"/lg/threads/{thread}/runs/{run_id}/stream")
    assert response.status_code == 200

    async def read() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    blocks = [block.split("\n") for block in async_to_sync(read)().decode().strip().split("\n\n")]
    [error] = [lines[1].removeprefix("data: ") for lines in blocks if lines[0] == "event: error"]
    return json.loads(error)


@contextlib.contextmanager
def registry_restored() -> Iterator[None]:
    """The session's graphs back (and the store's connection closed) after a test that deployed its own.

    Put back as they were rather than loaded again: loading the file compiles every demo graph (about a
    second of CPU here, and the registry tests do it ~150 times a run). What a load swaps goes back together
    — the registry, the store's configuration and the ``gatehouse_graphs.*`` modules — since the restored
    graphs' functions write to their own modules' globals, which a test may read through ``sys.modules``.
    """
    from runtime import registry, store
    from runtime.registry import GRAPH_MODULE_PREFIX

    saved_registry, saved_store_config = registry._registry, store._config
    saved_modules = {name: m for name, m in sys.modules.items() if name.startswith(GRAPH_MODULE_PREFIX)}
    try:
        yield
    finally:
        store.store_close()  # opened again when next used
        for name in [name for name in sys.modules if name.startswith(GRAPH_MODULE_PREFIX)]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        registry._registry, store._config = saved_registry, saved_store_config


def thread_start(persona: Persona, graph: str, graph_input: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    response = persona.client.post("/api/threads", {"graph": graph, "input": graph_input, "metadata": metadata})
    assert response.status_code == 201, response.content
    return response.json()


def pending_tasks(persona: Persona, thread_id: str, *, count: int = 1, timeout: float = 20.0) -> list[dict[str, Any]]:
    def ready() -> list[dict[str, Any]] | None:
        body = persona.client.get("/api/tasks", status="pending", thread=thread_id).json()
        return body["items"] if len(body["items"]) >= count else None

    return wait_for(ready, timeout=timeout, what=f"{count} pending task(s) on thread {thread_id}")


def thread_settled(
    persona: Persona,
    thread_id: str,
    *,
    statuses: tuple[str, ...] = ("completed", "failed", "cancelled"),
    timeout: float = 20.0,
) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        body = persona.client.get(f"/api/threads/{thread_id}").json()
        return body if body["status"] in statuses else None

    return wait_for(ready, timeout=timeout, what=f"thread {thread_id} to reach {statuses}")


def api_decide(who: Persona | ApiClient, task: Any, decision: str | None = "approve", /, **fields: Any) -> Any:
    """POST a decision on ``task`` (an API task dict, a model or an id) to the API as ``who``; the response.

    ``decision=None`` sends ``fields`` as they are: a body built whole, or one the API must refuse.
    """
    client = who if isinstance(who, ApiClient) else who.client
    task_id = task["id"] if isinstance(task, dict) else getattr(task, "pk", task)
    return client.post(
        f"/api/tasks/{task_id}/decision", fields if decision is None else {"decision": decision, **fields}
    )


def loan_input(amount: int = 20000, income: int = 40000, **extra: Any) -> dict[str, Any]:
    return {
        "applicant": "Test Applicant",
        "loan_id": f"L-{uuid.uuid4().hex[:6]}",
        "amount": amount,
        "income": income,
        "term_months": 24,
        **extra,
    }
