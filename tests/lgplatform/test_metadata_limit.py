"""/lg/ thread and run metadata are bounded as the native API's are (``approvals.inputs.MAX_METADATA_BYTES``):
one thread's 900 KB of metadata made every page of threads weigh over a megabyte."""

from __future__ import annotations

import pytest

from approvals.inputs import MAX_METADATA_BYTES
from runtime.models import Run, Thread
from tests.security.test_bad_input_edges import error_of

pytestmark = pytest.mark.usefixtures("live_db")

OVERSIZED = {"notes": "x" * MAX_METADATA_BYTES}


def test_a_thread_created_with_metadata_over_the_limit_is_a_422_naming_metadata(operator):
    before = Thread.objects.count()
    error = error_of(operator.client.post("/lg/threads", {"metadata": OVERSIZED}), 422)
    assert error["field"] == "metadata" and f"at most {MAX_METADATA_BYTES}" in error["message"]
    assert Thread.objects.count() == before
    assert operator.client.post("/lg/threads", {"metadata": {"case": "C-1"}}).status_code == 200


def test_a_run_with_metadata_over_the_limit_is_a_422_naming_metadata(operator):
    thread = operator.client.post("/lg/threads", {}).json()["thread_id"]
    body = {"assistant_id": "three_steps", "input": {"x": 1}, "metadata": OVERSIZED}
    assert error_of(operator.client.post(f"/lg/threads/{thread}/runs", body), 422)["field"] == "metadata"
    assert not Run.objects.filter(thread_id=thread).exists()
