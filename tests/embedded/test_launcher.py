"""``make run``'s launcher supervises: restarts children, leaves nothing behind, stops on a signal, shares a machine."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sqlite3
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, scaled, wait_for
from tests.embedded.conftest import SOAK_GRAPHS, Stack, cmdline, port_free, stack_new

pytestmark = pytest.mark.embedded


def _leader(stack: Stack, marker: str) -> int | None:
    """The pid of the stack's child whose command line has ``marker`` (the leader of its process group)."""
    for pid in stack.processes():
        try:
            if os.getpgid(pid) == pid and marker in cmdline(pid):
                return pid
        except ProcessLookupError:
            continue
    return None


def _tick_completes(stack: Stack) -> None:
    operator = stack.client("operator")
    started = operator.post("/api/threads", json={"graph": "soak_tick", "input": {"n": 1}})
    assert started.status_code == 201, started.text
    thread_id = started.json()["id"]

    def completed() -> bool:
        return operator.get(f"/api/threads/{thread_id}").json()["status"] == "completed"

    wait_for(completed, timeout=60, what="a thread to complete")


def test_a_child_that_dies_is_restarted_and_the_console_keeps_serving(tmp_path: Path, stacks: list[Stack]) -> None:
    stack = stack_new(tmp_path, migrated=True, GATEHOUSE_GRAPHS=str(SOAK_GRAPHS))
    stacks.append(stack.start())
    stack.wait_serving()
    _tick_completes(stack)
    # The run's live events reached the web process over the relay; its POSTs are not in the access log.
    assert '"GET /api/threads/' in stack.log()
    assert "/internal/live/" not in stack.log()

    for name, marker in (("worker", " worker "), ("web", "console.serve")):
        before = _leader(stack, marker)
        assert before is not None, stack.processes()
        os.kill(before, signal.SIGKILL)
        wait_for(
            lambda n=name: f"{n} exited with code -9; restarting in" in stack.log(), timeout=20, what="the log line"
        )
        wait_for(
            lambda m=marker, b=before: _leader(stack, m) not in (None, b), timeout=30, what=f"{name} to be restarted"
        )

    assert stack.proc is not None and stack.proc.poll() is None, "the launcher must outlive its children"
    # The new web answers and the new worker runs graphs.
    wait_for(lambda: _serves(stack), timeout=60, what="the restarted web server")
    _tick_completes(stack)


def _serves(stack: Stack) -> bool:
    try:
        return httpx.get(f"{stack.base}/accounts/login/", timeout=scaled(2)).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_every_process_within_seconds(tmp_path: Path, stacks: list[Stack], sig: int) -> None:
    # The workers' shutdown grace scales with the suite's time factor (the launcher's kill deadline
    # follows it): the assertion below is that an idle worker stops well before its grace is over.
    stack = stack_new(
        tmp_path,
        migrated=True,
        GATEHOUSE_GRAPHS=str(SOAK_GRAPHS),
        GATEHOUSE_DEMO="false",
        GATEHOUSE_WORKERS="2",
        GATEHOUSE_SHUTDOWN_GRACE_SECONDS=str(scaled(3)),
    )
    stacks.append(stack.start())
    stack.wait_serving()
    # Your own graphs, demo mode off: it comes up empty and says how to create the first admin.
    hint = next(line for line in stack.log().splitlines() if "manage.py user_create --role admin <username>" in line)
    # With this instance's database and graphs: pasted without them, the admin landed in ./var.
    assert f"GATEHOUSE_VAR_DIR={stack.var}" in hint and f"GATEHOUSE_GRAPHS={SOAK_GRAPHS}" in hint, hint
    with sqlite3.connect(f"file:{stack.var / 'gatehouse.sqlite3'}?mode=ro", uri=True) as db:
        assert db.execute("SELECT COUNT(*) FROM auth_user").fetchone()[0] == 0
    # Every child up: two workers (one with its beat process), the web server; no bank, for graphs not the demo's.
    wait_for(lambda: len(stack.processes()) >= 5, timeout=30, what="all children")
    stack.signal(sig)
    stopped = time.monotonic()
    wait_for(lambda: not stack.processes(), timeout=8, what="every process of the stack to exit")
    assert stack.proc is not None and stack.proc.wait(timeout=scaled(2)) == 0
    assert time.monotonic() - stopped < scaled(8)
    assert port_free(stack.port)
    # The idle workers ended their warm shutdown themselves, not at the end of the shutdown grace
    # (their loop used to wait up to 2 s for a message before it saw the signal, then beat's stop
    # ran past the grace and the timer hard-exited them).
    assert "shutdown grace of" not in stack.log(), stack.log()[-3000:]


def test_the_first_admin_command_names_only_the_variables_that_differ_from_the_defaults(tmp_path: Path) -> None:
    from console.embedded import ROOT, first_admin_command

    var = tmp_path / "my var"  # quoted for the shell
    own = first_admin_command("/opt/py/bin/python", {"GATEHOUSE_VAR_DIR": str(var), "GATEHOUSE_GRAPHS": "g.json"})
    default = first_admin_command("/opt/py/bin/python", {"GATEHOUSE_VAR_DIR": str(ROOT / "var")})

    assert shlex.split(own)[:2] == [f"GATEHOUSE_VAR_DIR={var}", "GATEHOUSE_GRAPHS=g.json"]
    assert shlex.split(default)[:2] == ["/opt/py/bin/python", str(ROOT / "manage.py")]
    assert default.endswith("user_create --role admin <username>")


def test_the_first_admin_command_names_the_graphs_file_absolutely(tmp_path: Path, monkeypatch) -> None:
    """Started as GATEHOUSE_GRAPHS=mine/langgraph.json, the hint said so; pasted elsewhere it failed."""
    from console.embedded import first_admin_command

    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "langgraph.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    hint = first_admin_command("/py", {"GATEHOUSE_GRAPHS": "mine/langgraph.json"})
    assert shlex.split(hint)[0] == f"GATEHOUSE_GRAPHS={tmp_path / 'mine' / 'langgraph.json'}"


def test_links_sent_out_point_at_the_embedded_console_unless_configured() -> None:
    """Deadline e-mails in var/mail/ linked to "/tasks/<id>/": no mail reader can open a relative link."""
    from console.embedded import public_url_default

    env: dict[str, str] = {}
    public_url_default(env, 8123)
    assert env["GATEHOUSE_PUBLIC_URL"] == "http://127.0.0.1:8123"
    configured = {"GATEHOUSE_PUBLIC_URL": "https://gatehouse.example.com"}
    public_url_default(configured, 8123)
    assert configured["GATEHOUSE_PUBLIC_URL"] == "https://gatehouse.example.com"


def test_a_failed_setup_leaves_no_process_and_frees_the_ports(tmp_path: Path, stacks: list[Stack]) -> None:
    # A graph registered as "loan_approval" whose input the demo thread does not fit: demo_setup fails.
    graphs = tmp_path / "graphs.json"
    soak = SOAK_GRAPHS.parent / "soak.py"
    config = {"dependencies": [str(SOAK_GRAPHS.parents[3])], "graphs": {"loan_approval": f"{soak}:tick_graph"}}
    graphs.write_text(json.dumps(config))
    bank_port = free_port()
    stack = stack_new(tmp_path, GATEHOUSE_GRAPHS=str(graphs), BANK_PORT=str(bank_port))
    stacks.append(stack.start())
    assert stack.proc is not None
    assert stack.proc.wait(timeout=scaled(120)) == 1
    assert "cannot start: manage.py demo_setup failed" in stack.log()
    assert "a demo thread cannot start: input.applicant: unknown field" in stack.log()
    assert stack.processes() == []
    assert port_free(stack.port) and port_free(bank_port)


def test_a_database_that_cannot_migrate_stops_the_launcher_naming_migrate(tmp_path: Path, stacks: list[Stack]) -> None:
    # Setup runs its steps in one process; the failing step is still named, and nothing else starts.
    stack = stack_new(tmp_path, GATEHOUSE_GRAPHS=str(SOAK_GRAPHS))
    (stack.var / "gatehouse.sqlite3").write_bytes(b"not a database " * 512)
    stacks.append(stack.start())
    assert stack.proc is not None and stack.proc.wait(timeout=scaled(120)) == 1
    log = stack.log()
    assert "cannot start: manage.py migrate failed" in log, log[-3000:]
    assert "starting worker" not in log and "created user" not in log
    assert stack.processes() == []


def test_a_web_port_in_use_is_refused_before_anything_starts(tmp_path: Path, stacks: list[Stack]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        stack = stack_new(tmp_path, GATEHOUSE_GRAPHS=str(SOAK_GRAPHS))
        stack.port = taken.getsockname()[1]
        stack.env["PORT"] = str(stack.port)
        stacks.append(stack.start())
        assert stack.proc is not None and stack.proc.wait(timeout=scaled(30)) == 1
    assert f"port {stack.port} is in use" in stack.log()
    assert stack.processes() == []


def test_two_instances_run_side_by_side_with_debug_off(tmp_path: Path, stacks: list[Stack]) -> None:
    """Two ``make run``s on one machine: own PORT and var dir each, the bank's port picked for each."""
    first, second = stack_new(tmp_path, "first", migrated=True), stack_new(tmp_path, "second", migrated=True)
    stacks += [first.start(), second.start()]
    for stack in (first, second):
        stack.wait_serving(timeout=180)
    banks = [cmdline(_leader(stack, "demo.fakebank") or 0).split()[-1] for stack in (first, second)]
    assert banks[0] != banks[1] and "8765" not in banks, banks  # each launcher picked a free port
    for stack in (first, second):
        reviewer = stack.client("reviewer")
        # demo_setup paused the demo threads at their gates; approve a loan: the action pays through this
        # instance's own fake bank.
        tasks = wait_for(
            lambda r=reviewer: r.get("/api/tasks", params={"status": "pending", "graph": "loan_approval"}).json()[
                "items"
            ],
            timeout=90,
            what="the demo loan tasks",
        )
        decided = reviewer.post(f"/api/tasks/{tasks[0]['id']}/decision", json={"decision": "approve", "reason": "ok"})
        assert decided.status_code == 201, decided.text
        thread_id = tasks[0]["thread_id"]

        def disbursed(r: httpx.Client = reviewer, t: str = thread_id) -> bool:
            body = r.get(f"/api/threads/{t}").json()
            assert body["status"] != "failed", body
            return body["status"] == "completed" and body["values"]["status"] == "disbursed"

        wait_for(disbursed, timeout=60, what="the demo loan to be disbursed")

    # Debug is off: a 404 lists no URL patterns, and static files are still served.
    missing = httpx.get(f"{first.base}/no/such/page", timeout=scaled(10))
    assert missing.status_code == 404
    assert "URLconf" not in missing.text and "urlpatterns" not in missing.text and "api/" not in missing.text
    css = httpx.get(f"{first.base}/static/console/console.css", timeout=scaled(10))
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")


def test_a_command_run_with_graphs_that_do_not_resolve_says_so_in_one_line(tmp_path: Path) -> None:
    """A pasted command in another directory (GATEHOUSE_GRAPHS relative) printed a whole traceback."""
    import subprocess
    import sys

    from console.embedded import ROOT
    from tests.embedded.conftest import embedded_env

    env = embedded_env(tmp_path, GATEHOUSE_GRAPHS="mine/langgraph.json")
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "user_create", "bob", "--graph", "plain"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
    )
    assert done.returncode == 1
    assert done.stderr.strip() == "CommandError: GATEHOUSE_GRAPHS: mine/langgraph.json does not exist"


def test_a_killed_launcher_takes_its_children_with_it_and_the_next_start_succeeds(
    tmp_path: Path, stacks: list[Stack]
) -> None:
    """A SIGKILLed launcher cannot stop its children: daphne, the worker (and its beat) and the bank went on
    under PID 1, holding the port, and the next `make run` said only "port … is in use". They now die with
    it (PR_SET_PDEATHSIG) and the same var dir and port start again. A demo graph registered (demo mode off,
    nothing seeded): the bank starts only for the demo's graphs, and it must die too."""
    from console.embedded import ROOT

    graphs = tmp_path / "langgraph.json"
    loan = ROOT / "demo" / "graphs" / "loan_approval.py"
    graphs.write_text(json.dumps({"graphs": {"loan_approval": f"{loan}:make_graph"}}))
    stack = stack_new(tmp_path, migrated=True, GATEHOUSE_GRAPHS=str(graphs), GATEHOUSE_DEMO="false")
    stacks.append(stack.start())
    stack.wait_serving()
    wait_for(lambda: len(stack.processes()) >= 5, timeout=30, what="all children")  # bank, worker, beat, web
    assert _leader(stack, "demo.fakebank") is not None, stack.processes()
    assert stack.proc is not None
    stack.proc.kill()
    stack.proc.wait(timeout=scaled(5))

    wait_for(lambda: not stack.processes(), timeout=30, what="the killed launcher's children to exit")
    assert port_free(stack.port)
    again = Stack(var=stack.var, env=stack.env, port=stack.port, log_path=tmp_path / "again.log")
    stacks.append(again.start())
    again.wait_serving()


def test_a_second_launcher_on_the_same_var_dir_is_refused(tmp_path: Path, stacks: list[Stack]) -> None:
    first = stack_new(tmp_path, migrated=True, GATEHOUSE_GRAPHS=str(SOAK_GRAPHS))
    stacks.append(first.start())
    first.wait_serving()
    assert first.proc is not None

    port = free_port()
    second = Stack(var=first.var, env={**first.env, "PORT": str(port)}, port=port, log_path=tmp_path / "second.log")
    stacks.append(second.start())
    assert second.proc is not None and second.proc.wait(timeout=scaled(30)) == 1
    assert f"cannot start: another launcher (pid {first.proc.pid}) runs on the var dir {first.var}" in second.log()
    assert "starting" not in second.log()  # refused before setup: nothing touched the first stack's files
    assert _serves(first)


BAD_VALUES = [
    ({"PORT": "abc"}, "PORT='abc' is not an integer: the web port, 1 to 65535"),
    ({"PORT": "99999"}, "PORT=99999 is out of range: the web port, 1 to 65535"),
    ({"PORT": "0"}, "PORT=0 is out of range: the web port, 1 to 65535"),
    (
        {"BANK_PORT": "70000"},
        "BANK_PORT=70000 is out of range: the fake bank's port, 1 to 65535 (0 or unset: a free one)",
    ),
    ({"GATEHOUSE_WORKERS": "0"}, "GATEHOUSE_WORKERS=0 is out of range: how many Celery workers, 1 or more"),
    ({"GATEHOUSE_WORKERS": "-1"}, "GATEHOUSE_WORKERS=-1 is out of range: how many Celery workers, 1 or more"),
    ({"GATEHOUSE_WORKERS": "abc"}, "GATEHOUSE_WORKERS='abc' is not an integer: how many Celery workers, 1 or more"),
    ({"GATEHOUSE_DEMO": "maybe"}, "GATEHOUSE_DEMO='maybe' is not a boolean (use true/false)"),
]


@pytest.mark.parametrize(
    ("extra", "expected"), BAD_VALUES, ids=[" ".join(f"{k}={v}" for k, v in e.items()) for e, _ in BAD_VALUES]
)
def test_a_bad_value_is_one_line_naming_it_before_anything_starts(
    tmp_path: Path, stacks: list[Stack], extra: dict[str, str], expected: str
) -> None:
    """PORT=abc and PORT=99999 were tracebacks; GATEHOUSE_WORKERS=0 one that came after migrate, the demo
    setup and the fake bank had started."""
    stack = stack_new(tmp_path, GATEHOUSE_GRAPHS=str(SOAK_GRAPHS))
    stack.env.update(extra)
    stacks.append(stack.start())
    assert stack.proc is not None and stack.proc.wait(timeout=scaled(30)) == 1
    assert stack.log().splitlines() == [f"[gatehouse] cannot start: {expected}"], stack.log()[-3000:]
    assert list(stack.var.iterdir()) == []  # not even the var dir's lock: nothing was set up
    assert stack.processes() == []


def test_a_var_dir_that_is_a_file_is_one_line_naming_it(tmp_path: Path, stacks: list[Stack]) -> None:
    """GATEHOUSE_VAR_DIR=<an existing file> was a FileExistsError traceback."""
    stack = stack_new(tmp_path, GATEHOUSE_GRAPHS=str(SOAK_GRAPHS))
    stack.var.rmdir()
    stack.var.write_text("not a directory")
    stacks.append(stack.start())
    assert stack.proc is not None and stack.proc.wait(timeout=scaled(30)) == 1
    expected = f"GATEHOUSE_VAR_DIR={str(stack.var)!r} is not a directory: name a directory (created if missing)"
    assert stack.log().splitlines() == [f"[gatehouse] cannot start: {expected}"], stack.log()[-3000:]
    assert stack.var.read_text() == "not a directory"
    assert stack.processes() == []


def test_the_fake_bank_starts_only_for_the_demo_graphs(tmp_path: Path, stacks: list[Stack]) -> None:
    """With one's own graphs and GATEHOUSE_DEMO=false the launcher still started the demo's bank, on a port."""
    from console.embedded import ROOT, fake_bank_needed

    assert fake_bank_needed({})  # the default graphs are the demo's
    assert fake_bank_needed({"GATEHOUSE_GRAPHS": "demo/langgraph.json"})
    assert not fake_bank_needed({"GATEHOUSE_GRAPHS": str(SOAK_GRAPHS)})
    mixed = tmp_path / "langgraph.json"
    loan = ROOT / "demo" / "graphs" / "loan_approval.py"
    mixed.write_text(json.dumps({"graphs": {"mine": "./mine.py:graph", "loan": {"path": f"{loan}:make_graph"}}}))
    assert fake_bank_needed({"GATEHOUSE_GRAPHS": str(mixed)})

    stack = stack_new(tmp_path, migrated=True, GATEHOUSE_GRAPHS=str(SOAK_GRAPHS), GATEHOUSE_DEMO="false")
    stacks.append(stack.start())
    stack.wait_serving()
    assert _leader(stack, " worker ") is not None and _leader(stack, "demo.fakebank") is None, stack.processes()
    assert "fake bank" not in stack.log()
