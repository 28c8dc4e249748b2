"""Celery's own printed lines under ``GATEHOUSE_LOG_FORMAT=json``: a JSON log holds nothing but objects.

Celery prints, outside logging, a banner when a worker or beat starts (its configuration and task list)
and a line when a worker is asked to stop ("worker: Warm shutdown (MainProcess)"). In a JSON log those
were the only lines a log shipper could not parse. With the JSON format the banners are left out (what
they said is logged anyway: the worker's "ready", beat's "Starting...", the queues in the readiness
lines) and the stop lines are written as objects on the stream Celery chose.
"""

from __future__ import annotations

import logging
import sys
import warnings
from typing import Any, TextIO

from celery import Celery
from celery.signals import celeryd_init
from django.conf import settings


def json_logs() -> bool:
    return bool(settings.GATEHOUSE_LOG_FORMAT == "json")


def _write(logger: str, msg: str, f: TextIO | None) -> None:
    """One JSON object on ``f`` (stderr by default), without a logging handler: no lock is taken, so it is safe
    in a signal handler, as ``print`` is."""
    from console.logs import JsonFormatter

    record = logging.LogRecord(logger, logging.WARNING, __file__, 0, "%s", (msg,), None)
    stream = f if f is not None else sys.__stderr__
    if stream is None:  # no stderr at all (a daemon's): nowhere to say it
        return
    try:
        stream.write(JsonFormatter().format(record) + "\n")
        stream.flush()
    except Exception:  # noqa: BLE001, S110 - as Celery's own: a line that cannot be written is not a crash
        pass


def say_as_json(msg: str, f: TextIO | None = None) -> None:
    """``celery.apps.worker.safe_say`` (the stop lines) as a JSON object."""
    _write("celery.worker", msg, f)


def warning_as_json(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
    line: str | None = None,
) -> None:  # fmt: skip
    """``warnings.showwarning`` until Django's logging takes the warnings over: Celery warns (running as root,
    say) before the worker sets Django up, and Python printed the warning as four lines of text."""
    _write("py.warnings", warnings.formatwarning(message, category, filename, lineno, line).strip(), file)


def _worker_quiet(sender: Any = None, instance: Any = None, **_: object) -> None:
    if instance is None or not json_logs():
        return
    from celery.apps import worker as program

    instance.quiet = True  # no banner (on_before_init set it from --quiet; the banner is printed later)
    program.safe_say = say_as_json
    warnings.showwarning = warning_as_json


def celery_json_install(app: Celery) -> None:
    """Quiet banners and JSON stop lines, decided when a worker or beat starts (the settings are read then)."""
    celeryd_init.connect(_worker_quiet, weak=False)
    base = app.Beat

    class Beat(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, quiet: bool = False, **kwargs: Any) -> None:
            super().__init__(*args, quiet=quiet or json_logs(), **kwargs)

    app.Beat = Beat
