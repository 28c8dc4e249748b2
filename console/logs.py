"""Log context and the JSON log format (``GATEHOUSE_LOG_FORMAT=json``).

Every log line carries the ids known where it was emitted: ``request_id``
(web; taken from a sane ``X-Request-ID`` header or generated, and echoed back),
``thread_id`` and ``task_id`` (from the URL of the request being served, or the
run being executed), ``run_id`` and ``celery_task_id`` (worker). They live in
context variables, so a value set for one request or run never leaks into
another thread's lines. The plain format ignores them; the JSON format writes
one object per line with whichever are set.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any

from django.core.signals import request_finished
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse

from runtime import signals

FIELDS = ("request_id", "thread_id", "run_id", "task_id", "celery_task_id")
_vars: dict[str, ContextVar[str | None]] = {name: ContextVar(f"gatehouse_{name}", default=None) for name in FIELDS}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_for(incoming: str) -> str:
    """The id a request (or a websocket) is logged under: the client's ``X-Request-ID`` when it is a plain
    token (a proxy's or the caller's, to follow one request across systems), else one made up here."""
    return incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex


def log_context_get() -> dict[str, str]:
    return {name: value for name, var in _vars.items() if (value := var.get()) is not None}


def log_context_set(**values: str | None) -> dict[str, Token[str | None]]:
    unknown = set(values) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown log context fields {sorted(unknown)}")
    return {name: _vars[name].set(None if value is None else str(value)) for name, value in values.items()}


def log_context_reset(tokens: dict[str, Token[str | None]]) -> None:
    for name, token in tokens.items():
        _vars[name].reset(token)


@contextmanager
def log_context(**values: str | None) -> Iterator[None]:
    tokens = log_context_set(**values)
    try:
        yield
    finally:
        log_context_reset(tokens)


class ContextFilter(logging.Filter):
    """Copies the context ids onto each record (``record.request_id`` …) for any formatter to use."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = log_context_get()
        for name in FIELDS:
            setattr(record, name, context.get(name))
        return True


class HousekeepingFilter(logging.Filter):
    """Drops Celery's INFO lines about the periodic housekeeping tasks (``CELERY_BEAT_SCHEDULE``).

    Beat sends a sweep every few seconds, and the worker logs receiving it and its success: six lines
    every 15 s in ``make run``'s terminal and in production logs, burying the runs and requests a
    reader is looking for. Their warnings and errors pass (a failed sweep is logged at ERROR), and so
    does everything the sweeps log themselves (``sweeper: re-dispatching run …``). Kept with
    ``GATEHOUSE_LOG_HOUSEKEEPING=true``.
    """

    LOGGERS = frozenset({"celery.beat", "celery.worker.strategy", "celery.app.trace"})

    def __init__(self, tasks: Iterable[str] | None = None) -> None:
        super().__init__()
        if tasks is None:
            from django.conf import settings

            tasks = [str(entry["task"]) for entry in settings.CELERY_BEAT_SCHEDULE.values()]
        self.tasks = frozenset(tasks)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.WARNING or record.name not in self.LOGGERS:
            return True
        return _celery_task_name(record) not in self.tasks


class PoolAttemptFilter(logging.Filter):
    """Drops psycopg_pool's WARNING per failed connection attempt (``error connecting in 'pool-1': …``,
    ``reconnection attempt in pool … failed``), unless ``LOG_LEVEL=DEBUG``.

    While the database is down one API request wrote seven lines (each pool worker's attempts) and
    ``health_check`` sixteen, where the docs promise one: the request's ``database unavailable`` WARNING
    (``approvals.api_common``, ``console.middleware``) or the command's error line, which say the same once,
    per failure. The pool's other warnings (a connection returned inside a transaction) pass.
    """

    ATTEMPTS = ("error connecting in ", "reconnection attempt in pool ")

    def filter(self, record: logging.LogRecord) -> bool:
        if logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return True
        return not (isinstance(record.msg, str) and record.msg.startswith(self.ATTEMPTS))


def _celery_task_name(record: logging.LogRecord) -> str | None:
    """The task a Celery INFO line is about: ``%(name)s`` of the worker's lines, the second argument of beat's."""
    args = record.args
    if isinstance(args, dict):
        name = args.get("name")
        return name if isinstance(name, str) else None
    if isinstance(args, tuple) and len(args) == 2 and record.name == "celery.beat":
        return str(args[1])  # "Scheduler: Sending due task %s (%s)": the entry, then its task
    return None


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, thread name, context ids, exception, and
    ``http`` (client, request, status, size) on the web process's access lines (console/serve.py)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
            "thread_name": record.threadName,
        }
        context = log_context_get()
        for name in FIELDS:
            value = getattr(record, name, None) or context.get(name)
            if value:
                entry[name] = value
        http = getattr(record, "http", None)
        if isinstance(http, dict):
            entry["http"] = http
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


# --- web: one context per request ---------------------------------------------------


class RequestContextMiddleware:
    """Sets request_id (and thread_id / task_id from the URL) for everything logged while serving a request.

    The ids stay set until ``request_finished`` (sent when the response is closed), not only
    while the middleware runs: Django logs 4xx/5xx responses after the middleware chain returns.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = request_id_for(request.headers.get("X-Request-ID", ""))
        # Every field, so nothing from an earlier request on this thread survives.
        log_context_set(request_id=request_id, thread_id=None, run_id=None, task_id=None, celery_task_id=None)
        response = self.get_response(request)
        response["X-Request-ID"] = request_id
        return response

    def process_view(
        self, request: HttpRequest, view: Callable[..., Any], args: Any, kwargs: dict[str, Any]
    ) -> HttpResponse | None:
        for field in ("thread_id", "task_id"):
            if kwargs.get(field) is not None:
                _vars[field].set(str(kwargs[field]))
        return None


@receiver(request_finished)
def _request_finished(**_: object) -> None:
    log_context_set(**dict.fromkeys(FIELDS))


# --- worker: one context per Celery task --------------------------------------------

_task_tokens = threading.local()


def task_context_enter(task_id: str | None = None, task: Any = None, kwargs: Any = None, **_: object) -> None:
    run_id = (kwargs or {}).get("run_id") if isinstance(kwargs, dict) else None
    _task_tokens.tokens = {
        name: _vars[name].set(value)
        for name, value in (("celery_task_id", task_id), ("run_id", run_id), ("thread_id", None), ("task_id", None))
    }


def task_context_exit(**_: object) -> None:
    tokens = getattr(_task_tokens, "tokens", None)
    if tokens:
        for name, token in reversed(list(tokens.items())):
            _vars[name].reset(token)
        _task_tokens.tokens = None


runs_log = logging.getLogger("gatehouse.runs")


@receiver(signals.run_claimed)
def _run_claimed(sender: Any, run: Any, **_: object) -> None:
    # Sent inside run_claim, in the thread about to execute the run: the ids stay set for
    # every line the run logs, until task_context_exit restores the task's context.
    _vars["run_id"].set(str(run.id))
    _vars["thread_id"].set(str(run.thread_id))
    runs_log.info("run %s claimed (%s, attempt %s)", run.id, run.kind, run.attempts)


@receiver(signals.run_interrupted)
@receiver(signals.run_completed)
def _run_finished(sender: Any, run: Any, **_: object) -> None:
    runs_log.info("run %s finished: %s", run.id, run.status)


@receiver(signals.run_failed)
def _run_failed(sender: Any, run: Any, error: str, **_: object) -> None:
    runs_log.warning("run %s failed: %s", run.id, error.splitlines()[0][:200] if error else "")
