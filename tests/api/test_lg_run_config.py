"""A run's ``config`` keys in LangGraph Server's types: ill-typed ``tags`` / ``run_name`` / ``metadata`` /
``configurable`` are a 422 naming the key, with no run created, as LangGraph Server refuses them.

``config={"tags": "x"}`` was accepted and silently ignored: a client meaning to tag its runs never learnt
the value was wrong (LangGraph Server: 422).
"""

from __future__ import annotations

from typing import Any

import pytest

from runtime import runs
from runtime.models import Run
from tests.conftest import loan_input
from tests.security.test_bad_input_edges import error_of

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db")]


@pytest.fixture
def lg_thread(operator, monkeypatch) -> str:
    monkeypatch.setattr(runs, "run_dispatch", lambda *, run_id: None)  # runs are created, not executed
    return str(operator.client.post("/lg/threads", {}).json()["thread_id"])


@pytest.mark.parametrize("endpoint", ["runs", "runs/wait", "runs/stream"])
@pytest.mark.parametrize(
    "config,field",
    [
        ({"tags": "x"}, "config.tags"),
        ({"tags": None}, "config.tags"),
        ({"tags": ["ok", 1]}, "config.tags[1]"),
        ({"run_name": 5}, "config.run_name"),
        ({"metadata": "x"}, "config.metadata"),
        ({"configurable": "x"}, "config.configurable"),
    ],
)
def test_an_ill_typed_config_key_is_a_422_naming_it_and_creates_no_run(operator, lg_thread, endpoint, config, field):
    body = {"assistant_id": "loan_approval", "input": loan_input(), "config": config}
    error = error_of(operator.client.post(f"/lg/threads/{lg_thread}/{endpoint}", body), 422)
    assert error["field"] == field
    assert not Run.objects.filter(thread_id=lg_thread).exists()


@pytest.mark.parametrize(
    "config", [{"tags": ["nightly", "batch"], "run_name": "nightly"}, {"tags": []}, {"metadata": {"k": 1}}]
)
def test_well_typed_tags_run_name_and_metadata_are_taken(operator, lg_thread, config: dict[str, Any]):
    body = {"assistant_id": "loan_approval", "input": loan_input(), "config": config}
    created = operator.client.post(f"/lg/threads/{lg_thread}/runs", body)
    assert created.status_code == 200, created.content
