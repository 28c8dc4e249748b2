"""A console page drawn for one user, in a browser now signed in as another (signed out and in as someone else
in another tab), records nothing: an outside tester's reject typed on reviewer's page was recorded as
reviewer2's, signed by reviewer2. And the sign-in page says how long a session lasts, as configured."""

from __future__ import annotations

import pytest
from django.test import override_settings

from approvals.models import Decision
from console.views.common import READER_HEADER
from tests.console.conftest import console_client
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
