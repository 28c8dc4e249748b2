"""The worker's start-up (console.celery): whatever stops the graphs loading stops the worker, in one line.

Celery logs an Exception raised by a ``worker_init`` handler and starts "ready" all the same; a worker
whose graphs did not load then claims runs only to fail them. SystemExit is what Celery lets through.
"""

from __future__ import annotations

import logging

import pytest
from django.conf import settings

import runtime.registry
from console.celery import _graphs_load


def _load_failing(exc: Exception):
    def registry_load(path: object = None) -> None:
        raise exc

    return registry_load


@pytest.mark.parametrize(
    "exc,problem",
    [
        (runtime.registry.GraphRegistryError("/app/langgraph.json: graph 'kyc': broken"), None),
        (ValueError("no signature found for builtin type <class 'dict'>"), "ValueError"),
        (KeyError("columns"), "KeyError"),
    ],
)
def test_any_error_loading_the_graphs_stops_the_worker_with_one_critical_line(monkeypatch, caplog, exc, problem):
    monkeypatch.setattr(runtime.registry, "registry_load", _load_failing(exc))
    with caplog.at_level(logging.INFO, logger="gatehouse.worker"), pytest.raises(SystemExit) as exited:
        _graphs_load()
    expected = str(exc) if problem is None else f"loading the graphs of {settings.GATEHOUSE_GRAPHS} failed: {exc!r}"
    critical = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert critical == [f"cannot start: {expected}"]
    assert caplog.records[-1].levelno == logging.CRITICAL
    assert exited.value.code == f"gatehouse worker: {expected}"


def test_only_json_is_sent_and_accepted():
    # Set under Celery's own names (console/celery.py); a worker start warns about no setting.
    from console.celery import app

    assert (app.conf.task_serializer, list(app.conf.accept_content)) == ("json", ["json"])
    assert not app.conf.deprecated_settings
