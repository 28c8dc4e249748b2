"""Searches fold case for every script, on PostgreSQL and on the embedded SQLite alike.

SQLite's LIKE (Django's ``icontains`` there) folds ASCII only: on ``make run`` an inbox search for "zoë"
did not find a task titled "ZOË", nor "çelik" a case "ÇELIK-7", nor a users search "émile" the user
"Émile". ``approvals.text_search.ContainsText`` is what every console search uses now.
"""

from __future__ import annotations

import pytest

from tests.sqlite_probe import sqlite_probe

# The same script on both databases: the in-process one here (PostgreSQL) and a probe (SQLite).
_CHECKS = """
from approvals.inbox_filter import InboxFilter
from approvals.models import ApprovalTask
from approvals.selectors import ThreadFilter, tasks_inbox, threads_list
from approvals.text_search import ContainsText
from approvals.users import CLI, users_list
from django.contrib.auth import get_user_model
from django.db.models import F
from approvals.roles import roles_ensure
from tests.factories import task_make

def found():
    admin = get_user_model().objects.create_user("search-admin")
    admin.groups.add(roles_ensure()["admin"])
    get_user_model().objects.create_user("Émile-Ørsted")
    task = task_make(title="Loan for ZOË", metadata={"case": "ÇELIK-7", "applicant": "Zoë Çelik"})
    titled = lambda q: ApprovalTask.objects.filter(pk=task.pk).filter(ContainsText(F("title"), q)).exists()
    inbox = lambda q: tasks_inbox(user=admin, filter=InboxFilter(q=q)).filter(pk=task.pk).exists()
    threads = lambda q: any(t.pk == task.thread_id for t in threads_list(user=admin, filter=ThreadFilter(q=q))[0])
    users = lambda q: [u.username for u in users_list(actor=CLI, query=q)]
    return {
        "title folded": titled("loan for zoë"),
        "title, % is literal": titled("loan%zoë"),
        "title, _ is literal": titled("loan_for"),
        "inbox by title": inbox("zoë"),
        "inbox by case": inbox("çelik-7"),
        "threads by applicant": threads("zoË ÇELIK"),
        "no false match": inbox("zoe"),
        "users": users("émile-ør"),
    }
"""

_EXPECTED = {
    "title folded": True,
    "title, % is literal": False,
    "title, _ is literal": False,
    "inbox by title": True,
    "inbox by case": True,
    "threads by applicant": True,
    "no false match": False,
    "users": ["Émile-Ørsted"],
}

_SQLITE_PROBE = f"""
import json
import django
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0)
{_CHECKS}
print(json.dumps(found()))
"""


@pytest.mark.django_db
def test_searches_fold_case_for_every_script_on_postgresql():
    scope: dict = {}
    exec(_CHECKS, scope)  # noqa: S102 - the probe's own script, run here on the suite's database
    assert scope["found"]() == _EXPECTED


@pytest.mark.embedded
def test_searches_fold_case_for_every_script_on_the_embedded_sqlite(tmp_path):
    assert sqlite_probe(_SQLITE_PROBE, tmp_path / "var") == _EXPECTED
