"""The web process says, once as it starts, what ``graphs_check`` and a Celery worker say at theirs: open tasks
waiting in a node their graph no longer has (approvals.abilities.node_gone_warnings). An operator who renamed
a node and restarted only daphne saw nothing in its log (``python -m console.serve``: the image, Compose,
``make run``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from approvals.models import ApprovalTask
from tests.approvals.test_node_gone import Deploy, deploy, paused  # noqa: F401 - fixtures
from tests.conftest import ROOT, free_port, process_group_stop, scaled, worker_env

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("live_db")]


def _served_log(env: dict[str, str], log_path: Path) -> str:
    """``python -m console.serve``'s log up to the moment it listens."""
    args = [
        sys.executable,
        "-m",
        "console.serve",
        "-b",
        "127.0.0.1",
        "-p",
        str(free_port()),
        "console.asgi:application",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + scaled(60)
        while "Listening on" not in log_path.read_text() and time.monotonic() < deadline:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.1)
        assert "Listening on" in log_path.read_text(), log_path.read_text()[-3000:]
    finally:
        process_group_stop(proc)
    return log_path.read_text()


def test_the_web_start_warns_once_naming_the_graph_the_node_and_the_open_tasks(
    paused: ApprovalTask,  # noqa: F811 - the fixtures imported above
    deploy: Deploy,  # noqa: F811
    bank,
    tmp_path: Path,
) -> None:
    env = {**worker_env(bank), "GATEHOUSE_GRAPHS": str(deploy.after)}
    log = _served_log(env, tmp_path / "web.log")
    warning = (
        f"graph '{deploy.graph}' no longer has node 'finance_review': 1 open task waits there and cannot be decided "
        "until it has it again (docs/schema-evolution.md, rule 5)"
    )
    said = [line for line in log.splitlines() if warning in line]
    assert len(said) == 1, log[-3000:]
    assert "WARNING gatehouse.web" in said[0], said[0]
