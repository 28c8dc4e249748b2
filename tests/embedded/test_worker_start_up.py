"""A worker's start-up log says nothing an operator must act on when nothing is wrong.

Every start logged two Celery ``CDeprecationWarning``s (``CELERY_ACCEPT_CONTENT``, ``CELERY_TASK_SERIALIZER``:
with the ``CELERY`` namespace those are also Celery 3's names) and "Please run `celery upgrade settings`".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.embedded.conftest import embedded_env
from tests.embedded.test_graph_loading import GRAPH_MODULE, _worker_start, graphs_write

pytestmark = pytest.mark.embedded


def test_a_worker_starts_without_a_deprecation_warning(tmp_path: Path) -> None:
    graphs = graphs_write(tmp_path, GRAPH_MODULE, "graph")
    env = embedded_env(tmp_path / "var", GATEHOUSE_GRAPHS=str(graphs), DJANGO_SETTINGS_MODULE="console.settings")
    became_ready, _, output = _worker_start(env, tmp_path)
    assert became_ready, output[-3000:]
    assert "DeprecationWarning" not in output and "celery upgrade settings" not in output, output[-3000:]
