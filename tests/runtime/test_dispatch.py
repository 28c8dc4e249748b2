"""``run_dispatch`` when the broker cannot be reached: one line naming the run and the error, the run left queued.

A real Celery app (the project's Redis transport) pointed at a port nothing listens on: the
connection is refused, as by a Redis that is down.
"""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, current_app

from runtime.runs import run_dispatch


def _closed_port() -> int:
    with socket.socket() as probe:  # bound, never listening: a connection to it is refused
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def broker_down() -> Iterator[Celery]:
    previous = current_app._get_current_object()
    app = Celery("broker-down", broker=f"redis://127.0.0.1:{_closed_port()}/0", set_as_current=False)
    app.conf.broker_transport = "console.redis_transport:Transport"
    app.set_current()
    try:
        yield app
    finally:
        previous.set_current()
        app.close()


def _dispatch_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "runtime.runs" and "dispatch" in r.getMessage()]


def test_an_unreachable_broker_is_one_line_naming_the_run_and_the_error(broker_down, caplog):
    run_id = uuid.uuid4()
    with caplog.at_level(logging.INFO, logger="runtime.runs"):
        run_dispatch(run_id=run_id)  # not raised: the sweeper re-sends
    [record] = _dispatch_records(caplog)
    message = record.getMessage()
    assert record.levelno == logging.ERROR
    assert str(run_id) in message and "the sweeper will retry" in message
    assert "OperationalError" in message and "Connection refused" in message
    assert record.exc_info is None and "\n" not in caplog.text.strip()


class _Broken(Celery):
    def send_task(self, *args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug, not an outage")


def test_an_unexpected_error_keeps_its_traceback(caplog):
    previous = current_app._get_current_object()
    app = _Broken("broken", set_as_current=False)
    app.set_current()
    try:
        with caplog.at_level(logging.INFO, logger="runtime.runs"):
            run_dispatch(run_id=uuid.uuid4())
    finally:
        previous.set_current()
    [record] = _dispatch_records(caplog)
    assert record.exc_info is not None and record.exc_info[0] is ZeroDivisionError
