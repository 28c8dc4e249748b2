"""The Celery application. Configuration comes from Django settings (CELERY_*)."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.beat import PersistentScheduler
from django.conf import settings  # lazy: nothing is read until Celery asks (see _DjangoSettings)
from django.core.exceptions import ImproperlyConfigured

from console.celery_json import celery_json_install

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

log = logging.getLogger("gatehouse.worker")


class _DjangoSettings:
    """Django's settings as Celery's configuration source, read when Celery first reads its configuration.

    For ``celery worker`` that is while it parses its command line, so a setting start-up refuses
    (``LOG_LEVEL=verbose``) was a traceback through click: it is one CRITICAL line and exit status 1 here,
    as daphne's (console.asgi) and the worker's graphs (``_graphs_load``) are.
    """

    def __getattr__(self, name: str) -> Any:
        # On every configuration lookup (about 20 per send_task): no imports here, only the read.
        try:
            return getattr(settings, name)
        except ImproperlyConfigured as exc:
            if not logging.getLogger().handlers:  # Django never applied LOGGING: its settings are what failed
                logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s %(message)s")
            log.critical("cannot start: %s", exc)
            raise SystemExit(1) from None

    def __dir__(self) -> list[str]:
        self.__getattr__("INSTALLED_APPS")  # the settings' first read: a refused one stops here, as above
        return dir(settings)


# Celery's Django fixup with one change: a prefork pool process keeps its database pool (console/worker_fixup.py).
app = Celery("gatehouse", fixups=["console.worker_fixup:fixup"])
app.config_from_object(_DjangoSettings(), namespace="CELERY")
# Only JSON on the wire (Celery's defaults too; said here). Not as Django settings: CELERY_ACCEPT_CONTENT and
# CELERY_TASK_SERIALIZER are also these options' Celery 3 names, and a worker warned about them at every
# start (two CDeprecationWarnings and "Please run `celery upgrade settings`"). Read with the configuration.
app.add_defaults({"accept_content": ["json"], "task_serializer": "json"})
# Each package's tasks.py: approvals.outbound.tasks is where webhook delivery lives.
app.autodiscover_tasks(["runtime", "approvals", "approvals.outbound", "lgplatform"])
celery_json_install(app)  # GATEHOUSE_LOG_FORMAT=json: no printed banners, stop lines as objects


def broker_eviction_warning(client: Any) -> str | None:
    """A warning when the Redis broker may evict keys (a queue key evicted is dispatched runs lost).

    ``client`` is a redis-py client. Managed Redis services often refuse
    ``CONFIG``: then nothing can be said, and nothing is reported.
    """
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
    except Exception:  # noqa: BLE001 - CONFIG disabled or unreachable: the check is advisory
        return None
    if policy in (None, "noeviction"):
        return None
    return (
        f"Redis maxmemory-policy is {policy!r}: under memory pressure Redis may evict Celery queue keys and "
        "lose dispatched runs (the sweeper re-sends them only after GATEHOUSE_REDISPATCH_AFTER_SECONDS). "
        "Set maxmemory-policy noeviction on the broker."
    )


def _check_broker_eviction() -> None:
    url = str(app.conf.broker_url or "")
    if not url.startswith(("redis://", "rediss://")):
        return
    import redis

    client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
    try:
        warning = broker_eviction_warning(client)
    finally:
        client.close()
    if warning:
        log.warning(warning)


def _bounded_shutdown(**_: object) -> None:
    """On warm shutdown, give in-flight runs a grace period, then hand them back and exit.

    Celery's warm shutdown (SIGTERM) waits for running tasks however long they
    take; a supervisor then SIGKILLs the worker and the runs wait out their
    leases. Instead, after GATEHOUSE_SHUTDOWN_GRACE_SECONDS the runs still going
    are released for the sweeper (another worker resumes them from their last
    checkpoint) and the process exits. If they all finish sooner, Celery exits
    normally and this timer (a daemon thread) dies with it.
    """
    grace = float(settings.GATEHOUSE_SHUTDOWN_GRACE_SECONDS)

    def hand_back_and_exit() -> None:
        from runtime.executor import worker_hand_back

        try:
            released = worker_hand_back()
            log.warning("shutdown grace of %ss is over: handed back %s run(s); exiting", grace, released)
        except Exception:
            log.exception("could not hand back runs; their leases will lapse")
        for child in multiprocessing.active_children():  # an embedded beat, pool processes
            child.terminate()
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(grace, hand_back_and_exit)
    timer.daemon = True
    timer.name = "gatehouse-shutdown-grace"
    timer.start()


def _graphs_load(**_: object) -> None:
    """Import the registered graphs before taking work: a broken one stops the worker, named."""
    from django.db import connections

    from runtime.checkpointer import CheckpointerUnavailable, checkpointer_preflight
    from runtime.registry import GraphRegistryError, registry_load, registry_warnings_read

    # Celery logs and swallows an Exception from a worker_init handler and starts "ready" all the same, to
    # fail every run it claims: whatever the graphs raise stops it here, as SystemExit (which Celery lets
    # through). Our own errors are the message; anything else is named by its type.
    problem: str | None = None
    try:
        entries = registry_load()
    except GraphRegistryError as exc:
        problem = str(exc)
    except Exception as exc:  # a worker that cannot load its graphs must not take runs
        log.debug("loading the graphs failed", exc_info=True)
        problem = f"loading the graphs of {settings.GATEHOUSE_GRAPHS} failed: {exc!r}"
    if problem is None:
        try:
            checkpointer_preflight()  # GATEHOUSE_CHECKPOINTER=redis without its modules: refuse now, not mid-run
        except CheckpointerUnavailable as exc:
            problem = str(exc)
    if problem is not None:
        log.critical("cannot start: %s", problem)
        raise SystemExit(f"gatehouse worker: {problem}")
    for line in registry_warnings_read(entries):  # open tasks no one can decide (a node renamed): said, not fatal
        log.warning("%s", line)
    connections.close_all()  # read before a prefork pool forks: no child inherits the connection


@app.on_after_finalize.connect
def _ready_probe(sender: Celery, **kwargs: object) -> None:
    from celery.signals import worker_init, worker_ready, worker_shutdown, worker_shutting_down

    from console.heap import heap_freeze
    from runtime.sessions import worker_sessions_limit

    def write_ready(**_: object) -> None:
        # A file-based readiness probe for process supervisors and tests.
        path = os.environ.get("GATEHOUSE_READY_FILE")
        if path:
            with open(path, "w") as fh:
                fh.write(str(os.getpid()))

    def remove_ready(**_: object) -> None:
        path = os.environ.get("GATEHOUSE_READY_FILE")
        if path and os.path.exists(path):
            os.unlink(path)

    def check_broker(**_: object) -> None:
        try:
            _check_broker_eviction()
        except Exception:
            log.exception("could not check the broker's eviction policy")

    worker_init.connect(worker_sessions_limit, weak=False)  # before anything opens a session
    worker_init.connect(_graphs_load, weak=False)
    worker_init.connect(heap_freeze, weak=False)  # after the graphs loaded (console/heap.py)
    worker_ready.connect(check_broker, weak=False)
    worker_ready.connect(write_ready, weak=False)
    worker_shutting_down.connect(_bounded_shutdown, weak=False)
    worker_shutdown.connect(remove_ready, weak=False)
    worker_shutdown.connect(beat_stop_ensure, weak=False)
    _ops_signals_connect()


BEAT_STOP_SECONDS = 5.0  # how long the worker waits for its beat process after each request to stop


def beat_stop_ensure(sender: Any = None, **_: object) -> None:
    """The worker's embedded beat is a child process stopped with one SIGTERM (Celery's ``_Process.stop``). A
    SIGTERM that reaches it while it is still starting, before it resets the handlers it inherited from the
    worker, is lost: the beat ran on, and the worker waited at exit to join it. A `make run` killed just as it
    started left both behind (found by ``test_a_killed_launcher_takes_its_children_with_it...``). So: wait for
    the beat to stop, ask again, then kill it."""
    beat: Any = getattr(sender, "beat", None)
    if getattr(beat, "pid", None) is None or not all(hasattr(beat, m) for m in ("join", "is_alive", "terminate")):
        return  # no beat, or one in a thread: nothing left running (Celery's is billiard's Process: no kill())
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            log.warning("beat: still running %gs after it was asked to stop; sending %s", BEAT_STOP_SECONDS, sig.name)
            with contextlib.suppress(ProcessLookupError):
                os.kill(beat.pid, sig)
        beat.join(BEAT_STOP_SECONDS)
        if not beat.is_alive():
            return


# --- health and log context (ops; see console/heartbeats.py, console/logs.py) -------------

_heartbeat: Any = None


def _ops_signals_connect() -> None:
    from celery.signals import task_postrun, task_prerun, worker_ready, worker_shutdown

    from console import logs

    def heartbeat_start(sender: Any = None, **_: object) -> None:
        global _heartbeat
        from console.heartbeats import WorkerHeartbeat

        _heartbeat = WorkerHeartbeat(getattr(sender, "hostname", None) or "celery")
        _heartbeat.start()

    def heartbeat_stop(**_: object) -> None:
        if _heartbeat is not None:
            _heartbeat.stop()

    def sweep_recorded(sender: Any = None, state: str | None = None, **_: object) -> None:
        if getattr(sender, "name", "") != "runtime.sweep_runs" or state != "SUCCESS":
            return
        from console.heartbeats import SWEEP, heartbeat_record
        from console.models import HeartbeatComponent

        try:
            heartbeat_record(name=SWEEP, component=HeartbeatComponent.SWEEP)
        except Exception:
            log.warning("could not record the sweep heartbeat", exc_info=True)

    worker_ready.connect(heartbeat_start, weak=False)
    worker_shutdown.connect(heartbeat_stop, weak=False)
    task_prerun.connect(logs.task_context_enter, weak=False)
    task_postrun.connect(logs.task_context_exit, weak=False)
    task_postrun.connect(sweep_recorded, weak=False)


# The hourly entries whose first run must not wait a whole interval after beat starts (see setup_schedule).
CATCH_UP_ENTRIES = ("anchor-audit", "prune-checkpoints")


class HeartbeatScheduler(PersistentScheduler):
    """Celery's persistent scheduler, touching GATEHOUSE_BEAT_HEARTBEAT_FILE on every tick.

    ``manage.py health_check --component beat`` reads the file's age: beat proves it is
    alive without a database or broker round trip (beat itself uses neither to tick).
    """

    def setup_schedule(self) -> None:
        """Anchoring and pruning run ``GATEHOUSE_BEAT_CATCH_UP_SECONDS`` after start when this schedule never ran
        them, not a full interval after: Celery dates an entry it has not run from beat's start, and a beat
        redeployed more often than hourly with a new schedule file (a recreated container) never anchored
        or pruned at all. An entry that ran keeps its time from the schedule file."""
        super().setup_schedule()
        catch_up = float(settings.GATEHOUSE_BEAT_CATCH_UP_SECONDS)
        now = self.app.now()
        for name in CATCH_UP_ENTRIES:
            entry = self.schedule.get(name)
            run_every = getattr(entry.schedule, "run_every", None) if entry is not None else None
            if entry is None or entry.total_run_count or not isinstance(run_every, timedelta):
                continue
            interval = run_every.total_seconds()
            if catch_up < interval:
                entry.last_run_at = now - timedelta(seconds=interval - catch_up)
                log.info("beat: %s first runs in %gs (this schedule never ran it)", name, catch_up)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        from console.heartbeats import beat_heartbeat_touch

        delay = float(super().tick(*args, **kwargs))
        try:
            beat_heartbeat_touch()
        except OSError:
            log.warning("could not touch the beat heartbeat file", exc_info=True)
        # Wake at least every heartbeat interval, however far the next schedule is.
        return min(delay, float(settings.GATEHOUSE_HEARTBEAT_SECONDS))
