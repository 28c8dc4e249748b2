"""After a PostgreSQL outage, Django's connection pool is back within seconds.

psycopg_pool retries a failed connection with exponential backoff (1, 2, 4, … s) for
``reconnect_timeout``, 300 s by default: after a 150 s outage the worker's sweeps and heartbeat kept
failing ("couldn't get a connection after 10.00 sec") for ~95 s more, waiting for the next attempt.
The pool now gives an attempt up after ``GATEHOUSE_DB_POOL_RECONNECT_SECONDS`` (5 s), and the next
checkout starts a fresh one at once. PostgreSQL itself stays up: a proxy in front of it is cut.
"""

from __future__ import annotations

import time

import pytest
from django.db import connections
from django.db.utils import load_backend

from tests.conftest import scaled, wait_for
from tests.faults.proxy import CuttableProxy

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("live_db")]


def _checkout(pool) -> bool:
    try:
        conn = pool.getconn(timeout=scaled(0.5))
    except Exception:
        return False
    try:
        conn.execute("SELECT 1")
        return True
    except Exception:
        return False
    finally:
        pool.putconn(conn)


def test_the_pool_reconnects_within_seconds_after_an_outage():
    db = connections["default"].settings_dict
    proxy = CuttableProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    wrapper = load_backend(db["ENGINE"]).DatabaseWrapper({**db, "HOST": "127.0.0.1", "PORT": proxy.port}, "outage")
    pool = wrapper.pool
    pool.open()
    try:
        assert _checkout(pool)
        proxy.cut("reset")
        # 16 s of outage, checked out as a worker's heartbeat does: with psycopg_pool's default the
        # attempts came at 0, 1, 3, 7, 15, 31 s, so the pool stayed down until 31 s.
        outage_ends = time.monotonic() + 16
        while time.monotonic() < outage_ends:
            assert not _checkout(pool)
        proxy.restore()
        restored = time.monotonic()

        wait_for(lambda: _checkout(pool), timeout=30, interval=0.2, what="the pool to reconnect")

        assert time.monotonic() - restored < scaled(6)
    finally:
        wrapper.close_pool()
        proxy.close()


def test_the_apis_answer_503_json_while_the_database_is_down(bank, personas, tmp_path):
    """With PostgreSQL unreachable, GET /api/threads answered Django's HTML "Server Error (500)" page. Both
    APIs now answer a JSON 503 naming the cause, with Retry-After, and serve again once it is back."""
    import httpx

    from tests.conftest import daphne_start, process_group_stop, worker_env

    db = connections["default"].settings_dict
    proxy = CuttableProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    env = {
        **worker_env(bank),
        "DATABASE_URL": f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}",
        "GATEHOUSE_DB_POOL_TIMEOUT": "1",
    }
    log_path = tmp_path / "daphne.log"
    proc, base = daphne_start(env, log_path)
    headers = {"Authorization": f"Bearer {personas['reviewer'].token}"}

    def get(path: str) -> httpx.Response | None:
        assert proc.poll() is None, log_path.read_text(errors="replace")[-2000:]
        method, body = ("POST", {}) if path.startswith("/lg/") else ("GET", None)
        try:
            return httpx.request(method, f"{base}{path}", json=body, headers=headers, timeout=scaled(15))
        except httpx.TransportError:
            return None

    try:
        wait_for(lambda: (r := get("/api/threads")) is not None and r.status_code == 200, timeout=40)
        proxy.cut("reset")
        for path in ("/api/threads", "/lg/threads/search"):
            response = wait_for(lambda p=path: (r := get(p)) is not None and r.status_code == 503 and r, timeout=30)
            assert response.headers["Retry-After"] == "5"
            assert response.json()["error"]["code"] == "unavailable", path
        proxy.restore()
        wait_for(lambda: (r := get("/api/threads")) is not None and r.status_code == 200, timeout=30)
    finally:
        process_group_stop(proc)
        proxy.close()
    # One WARNING line per 503 (docs/deploy.md): Django's ERROR "Service Unavailable: ..." came with each.
    log = log_path.read_text(errors="replace")
    assert "WARNING approvals.api_common GET /api/threads: database unavailable" in log, log[-3000:]
    assert "WARNING approvals.api_common POST /lg/threads/search: database unavailable" in log, log[-3000:]
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]
    # Nor the pool's warning per connection attempt: four "error connecting in 'pool-1'" and a "reconnection
    # attempt … failed" came with each request (console.logs.PoolAttemptFilter).
    assert "psycopg.pool" not in log, log[-3000:]


def _signed_in_cookie(user) -> str:
    from django.conf import settings
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def test_console_pages_answer_a_styled_503_while_the_database_is_down(bank, personas, tmp_path):
    """With PostgreSQL unreachable a signed-in reviewer's GET / answered Django's bare "Server Error (500)"
    after two pool timeouts (the view's query, then the session middleware reading the session again for
    its cookie), logged at ERROR with a traceback. It is now the console's 503 page, asking to retry,
    after one pool timeout, logged at WARNING without a traceback; the session survives the outage."""
    import httpx

    from tests.conftest import daphne_start, process_group_stop, worker_env

    db = connections["default"].settings_dict
    proxy = CuttableProxy((db["HOST"] or "127.0.0.1", int(db["PORT"] or 5432)))
    env = {
        **worker_env(bank),
        "DATABASE_URL": f"postgres://{db['USER']}@127.0.0.1:{proxy.port}/{db['NAME']}",
        "GATEHOUSE_DB_POOL_TIMEOUT": "1",
    }
    log_path = tmp_path / "daphne.log"
    proc, base = daphne_start(env, log_path)
    cookies = {"sessionid": _signed_in_cookie(personas["operator"].user)}

    def get(path: str) -> httpx.Response | None:
        assert proc.poll() is None, log_path.read_text(errors="replace")[-2000:]
        try:
            return httpx.get(f"{base}{path}", cookies=cookies, timeout=scaled(15))
        except httpx.TransportError:
            return None

    try:
        wait_for(lambda: (r := get("/threads/")) is not None and r.status_code == 200, timeout=40)
        proxy.cut("reset")
        for path in ("/", "/threads/"):
            response = get(path)
            assert response is not None and response.status_code == 503, response and response.text[:500]
            assert response.headers["Retry-After"] == "5"
            assert "Temporarily unavailable" in response.text and "Retry shortly" in response.text
            assert "console.css" in response.text  # the console's own page, styled
            assert "sessionid" not in response.headers.get("set-cookie", "")  # not signed out by the outage
        proxy.restore()
        wait_for(lambda: (r := get("/threads/")) is not None and r.status_code == 200, timeout=30)
    finally:
        process_group_stop(proc)
        proxy.close()
    log = log_path.read_text(errors="replace")
    assert "WARNING console.middleware GET /threads/: database unavailable" in log, log[-3000:]
    # One pool timeout per page answered 503 (the session is not read a second time). Counted per 503,
    # not as a total: a poll while the pool reconnects after the restore may time out and 503 too.
    answered = log.count(": database unavailable: couldn't get a connection")
    assert answered >= 2 and log.count("couldn't get a connection") == answered, log[-3000:]
    assert "Traceback" not in log and "ERROR" not in log, log[-3000:]
