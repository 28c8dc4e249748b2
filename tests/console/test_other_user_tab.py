"""A console page drawn for one user, in a browser now signed in as another (signed out and in as someone else
in another tab), records nothing: an outside tester's reject typed on reviewer's page was recorded as
reviewer2's, signed by reviewer2. And the sign-in page says how long a session lasts, as configured."""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from approvals.models import AuditEvent, Decision
from console.views.common import READER_FIELD, READER_HEADER
from tests.console.conftest import console_client
from tests.console.test_route_matrix import MATRIX, route_case
from tests.factories import task_make

pytestmark = pytest.mark.usefixtures("live_db")


def test_a_write_from_a_page_drawn_for_another_user_is_refused_and_nothing_is_recorded(personas):
    task = task_make()
    page = console_client(personas["reviewer"]).get(f"/tasks/{task.pk}/").content.decode()
    assert f'"{READER_HEADER}": "{personas["reviewer"].user.pk}"' in page  # every htmx request sends it
    browser = console_client(personas["reviewer2"])  # the same browser, signed in as reviewer2 since
    fields = {"checkpoint_id": task.checkpoint_id, "decision": "reject", "reason": "typed as reviewer"}
    drawn_for_reviewer = {"HX-Request": "true", READER_HEADER: str(personas["reviewer"].user.pk)}
    refused = browser.post(f"/tasks/{task.pk}/decide", fields, headers=drawn_for_reviewer)
    assert refused.status_code == 409
    assert refused["HX-Retarget"] == "#session-notice"
    body = refused.content.decode()
    assert "This browser is now signed in as reviewer2" in body and "nothing was recorded" in body
    assert not Decision.objects.filter(task=task).exists()
    # A page drawn for reviewer2 decides as ever.
    drawn_for_them = {"HX-Request": "true", READER_HEADER: str(personas["reviewer2"].user.pk)}
    assert browser.post(f"/tasks/{task.pk}/decide", fields, headers=drawn_for_them).status_code == 201
    assert Decision.objects.get(task=task).actor == personas["reviewer2"].user


@pytest.mark.parametrize(("seconds", "said"), [(8 * 3600, "8 hours"), (90, "90 seconds"), (1800, "30 minutes")])
def test_the_sign_in_page_says_how_long_a_session_lasts_as_configured(client, seconds, said):
    with override_settings(SESSION_COOKIE_AGE=seconds):
        page = client.get("/accounts/login/").content.decode()
    assert f"Sessions end after {said} without activity" in page


# --- a form posted without htmx: the reader travels as a hidden field -------------------------------------

# Every console write a form posts, as the route matrix makes it (a fresh subject each): the POST routes of
# MATRIX, and the pages that are a form as well as a page.
WRITES = [(route, subject) for route, method, subject, _ in MATRIX if method == "POST"] + [
    ("thread-start", "-"),
    ("user-create", "-"),
    ("away", "-"),
]


def _audit_head() -> int:
    return AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0


@pytest.mark.parametrize(("route", "subject"), WRITES, ids=[route for route, _ in WRITES])
def test_a_plain_form_post_from_a_page_drawn_for_another_user_is_refused_and_nothing_is_recorded(
    personas, route, subject
):
    """A page drawn for one user, posted without htmx after a sign-in as another in another tab, was recorded
    as the second (htmx writes carry the reader header; a plain form carried nothing)."""
    path, body = route_case(personas, route, subject)
    browser = console_client(personas["admin"])  # may do every write: no refusal hides the check
    decisions, head = Decision.objects.count(), _audit_head()
    refused = browser.post(path, {**body, READER_FIELD: str(personas["reviewer"].user.pk)})
    assert refused.status_code == 409, (path, refused.content[:300])
    page = unescape(refused.content.decode())
    assert "This browser is now signed in as admin" in page and "nothing was recorded" in page
    assert "HX-Retarget" not in refused  # a whole page: no htmx to swap a notice in
    assert _audit_head() == head and Decision.objects.count() == decisions
    # Drawn for admin, it is answered as one sent with no reader at all (an API client, a page from before the
    # field), as it was before the field: each on a fresh subject.
    path, body = route_case(personas, route, subject)
    as_ever = browser.post(path, body)
    path, body = route_case(personas, route, subject)
    mine = browser.post(path, {**body, READER_FIELD: str(personas["admin"].user.pk)})
    assert mine.status_code == as_ever.status_code, (path, mine.content[:300])
    assert "This browser is now signed in as" not in mine.content.decode() + as_ever.content.decode()


@pytest.mark.parametrize("path", ["/", "/away", "/webhooks/", "/users/new"])
def test_every_post_form_a_page_draws_carries_its_reader_and_its_csrf_token(personas, path):
    admin = personas["admin"]
    page = console_client(admin).get("/settings/away" if path == "/away" else path).content.decode()
    forms = [f for f in re.findall(r"<form\b.*?</form>", page, flags=re.S) if 'method="post"' in f.split(">", 1)[0]]
    assert forms, path
    for form in forms:
        assert f'name="{READER_FIELD}" value="{admin.user.pk}"' in form, form[:300]
        assert 'name="csrfmiddlewaretoken"' in form, form[:300]


def test_the_task_pages_forms_carry_the_reader(personas):
    reviewer = personas["reviewer"]
    task = task_make()
    page = console_client(reviewer).get(f"/tasks/{task.pk}/").content.decode()
    forms = [f for f in re.findall(r"<form\b.*?</form>", page, flags=re.S) if 'method="post"' in f.split(">", 1)[0]]
    assert len(forms) >= 3  # the decision, a comment, a delegation; and Sign out
    for form in forms:
        assert f'name="{READER_FIELD}" value="{reviewer.user.pk}"' in form, form[:300]


def test_every_post_form_in_the_templates_goes_through_form_guard():
    """One place renders what a console POST form carries (CSRF token and reader): a form that rendered
    ``{% csrf_token %}`` alone would post without its reader."""
    root = Path(settings.BASE_DIR) / "console" / "templates"
    for template in root.rglob("*.html"):
        text = template.read_text()
        assert "{% csrf_token %}" not in text, template
        for form in re.findall(r"<form\b.*?</form>", text, flags=re.S):
            if 'method="post"' in form.split(">", 1)[0]:
                assert "{% form_guard %}" in form, (template, form[:200])
