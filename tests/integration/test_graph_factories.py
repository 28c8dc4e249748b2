"""A graph factory that takes a config is called for each run with that run's config (as on LangGraph Server)."""

from __future__ import annotations

import pytest

from tests.conftest import thread_settled, thread_start

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("live_db", "live_worker")]


def test_each_run_gets_a_graph_built_from_its_own_config(operator, reviewer):
    threads = [thread_start(operator, "built_per_run", {"n": n}) for n in range(2)]
    for thread in threads:
        done = thread_settled(reviewer, thread["id"])
        assert done["status"] == "completed", done
        assert done["values"]["built_for"] == thread["id"]
