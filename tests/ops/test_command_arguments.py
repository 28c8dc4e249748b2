"""A bad argument to a management command is one error line naming it and a non-zero exit: never a
traceback, a silent no-op ("0 threads checked", exit 0) or a default taken in its place.

Run as ``manage.py`` runs them (ManagementUtility: argv in, stderr and exit status out).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.management import ManagementUtility

from approvals.inbound.webhooks import webhook_endpoint_create

pytestmark = pytest.mark.usefixtures("live_db")  # manage.py closes its connections when it is done


def manage(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    try:
        ManagementUtility(["manage.py", *argv]).execute()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.fixture
def webhook_endpoint() -> str:
    name = f"args-{uuid.uuid4().hex[:8]}"
    webhook_endpoint_create(actor=None, name=name, graph="loan_approval", gates=["human_review"])
    return name


CASES: list[tuple[list[str], list[str]]] = [
    (["decisions_verify", "--thread", "nope"], ["--thread", "'nope'", "UUID"]),
    (["decisions_verify", "--thread", "{missing}"], ["--thread", "no such thread"]),
    (["audit_export", "--output", "/nonexistent/dir/x.jsonl"], ["--output", "No such file or directory"]),
    (["audit_export", "--output", "{tmp}/x.jsonl", "--thread", "nope"], ["--thread", "not a thread id"]),
    (["audit_export", "--verify", "/nonexistent/x.jsonl"], ["--verify", "No such file or directory"]),
    (["audit_export", "--verify", "{tmp}"], ["--verify", "Is a directory"]),
    (["issue_token", "{user}", "--days", "99999999999"], ["--days", "between 1 and 3650"]),
    (["issue_token", "{user}", "--days", "0"], ["--days", "between 1 and 3650"]),
    (["issue_token", "{user}", "--days", "-3"], ["--days", "between 1 and 3650"]),
    (["health_check", "--component", "worker", "--max-age", "0"], ["--max-age", "above 0"]),
    (["health_check", "--component", "worker", "--max-age", "-5"], ["--max-age", "above 0"]),
    (["health_check", "--component", "beat", "--max-age", "nan"], ["--max-age", "above 0"]),
    (["checkpoints_prune", "--graph", "nope"], ["--graph", "'nope'", "unknown graph", "loan_approval"]),
    (["checkpoints_prune", "--dry-run", "--graph", "nope"], ["--graph", "unknown graph"]),
    (["webhook_send", "{endpoint}", "--url", "nope", "--body", "{{}}"], ["--url", "'nope'"]),
    # already one line before this change: kept so by the same table
    (["webhook_send", "{endpoint}", "--body", "not json"], ["--body"]),
    (["webhook_endpoint_create", "x-{missing}", "--graph", "nope", "--gate", "a"], ["graph", "nope"]),
    (["audit_verify", "--sink", "/nonexistent/dir/x"], ["/nonexistent/dir/x"]),
    (["user_deactivate", "nobody-{missing}"], ["nobody-"]),
    (["user_revoke", "nobody-{missing}", "--role", "admin"], ["nobody-"]),
    (["revoke_token", "zz-nothing"], ["zz-nothing"]),
    # every token starts with gh_: this said "no live token starts with 'gh_'", not what the command takes
    (["revoke_token", "gh_"], ["'gh_' is not a token prefix", "first 10 characters", "user panel", "whole token"]),
    (["revoke_token", "gh_zzzzzzz"], ["no unrevoked token has the prefix 'gh_zzzzzzz'"]),
    # what argparse refuses itself: its usage block and exit status 2 before this change
    (["issue_token", "{user}", "--days", "abc"], ["--days", "invalid int value", "'abc'"]),
    (["health_check", "--component", "bogus"], ["--component", "'bogus'", "'worker', 'beat', 'web'"]),
    (["health_check", "--max-age", "0"], ["required", "--component"]),
    (["health_check", "--component", "worker", "--max-age", "soon"], ["--max-age", "invalid float value", "'soon'"]),
    (["user_list", "--bogus"], ["unrecognized arguments: --bogus", "manage.py user_list --help"]),
    (["audit_export", "--format", "xml"], ["--format", "'xml'", "jsonl"]),
]


@pytest.mark.parametrize(("argv", "expected"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_a_bad_argument_is_one_error_line_naming_it_and_exit_status_1(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    personas: dict[str, Any],
    webhook_endpoint: str,
    argv: list[str],
    expected: list[str],
) -> None:
    values = {"tmp": str(tmp_path), "user": personas["reviewer"].username, "endpoint": webhook_endpoint}
    values["missing"] = str(uuid.uuid4())  # a thread id no thread has
    code, err = manage(capsys, *(a.format(**values) for a in argv))
    assert code == 1, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("CommandError: "), err
    for part in expected:
        assert part in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_issue_token_within_the_bound_still_issues(capsys, personas):
    code, err = manage(capsys, "issue_token", personas["reviewer"].username, "--days", "3650")
    assert code == 0, err


def test_checkpoints_prune_takes_a_graph_that_only_threads_remember(capsys):
    from runtime.models import Thread, ThreadStatus

    Thread.objects.create(graph=f"gone_{uuid.uuid4().hex[:6]}", status=ThreadStatus.COMPLETED)
    gone = Thread.objects.filter(graph__startswith="gone_").latest("created_at").graph
    code, err = manage(capsys, "checkpoints_prune", "--dry-run", "--graph", gone)
    assert code == 0, err


def test_decisions_verify_of_a_known_thread_checks_it(capsys):
    from runtime.models import Thread

    thread = Thread.objects.create(graph="loan_approval")
    code, err = manage(capsys, "decisions_verify", "--thread", str(thread.id))
    assert code == 0, err


def test_every_gatehouse_command_reports_argument_errors_in_one_line() -> None:
    """One mechanism for all: a command on BaseCommand would print argparse's usage block and exit 2."""
    from django.core.management import get_commands, load_command_class

    from runtime.command_args import GatehouseCommand

    ours = {
        name: app for name, app in get_commands().items() if app.split(".")[0] in ("approvals", "console", "runtime")
    }
    assert {"health_check", "issue_token", "revoke_token", "changepassword", "graphs_check"} <= set(ours)
    others = [name for name, app in ours.items() if not isinstance(load_command_class(app, name), GatehouseCommand)]
    assert others == []


@pytest.mark.parametrize("given", ["prefix", "whole token"])
def test_revoke_token_takes_the_prefix_or_the_whole_token(capsys, personas, given):
    from approvals.models import ApiToken
    from approvals.tokens import token_issue

    secret = token_issue(user=personas["reviewer"].user, name="to revoke")
    code, err = manage(capsys, "revoke_token", secret[:10] if given == "prefix" else secret)
    assert code == 0, err
    assert ApiToken.objects.get(prefix=secret[:10]).revoked_at is not None
