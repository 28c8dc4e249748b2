"""Settings for the test process: the real services (PostgreSQL, Redis), short leases.

Only environment defaults live here; everything else is ``console.settings``.
"""

import os
import uuid
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gatehouse")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ.setdefault("SECRET_KEY", "test-only-" + uuid.uuid4().hex)
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("GATEHOUSE_GRAPHS", str(_ROOT / "tests" / "graphs" / "langgraph.json"))
os.environ.setdefault("GATEHOUSE_LEASE_SECONDS", "2")
os.environ.setdefault("GATEHOUSE_SWEEP_SECONDS", "0.5")
os.environ.setdefault("GATEHOUSE_REDISPATCH_AFTER_SECONDS", "3")
# Tests drive the deadline sweep themselves (approvals.deadlines.deadlines_sweep, scoped to their graph):
# the session worker's beat must not escalate other tests' overdue tasks under them.
os.environ.setdefault("GATEHOUSE_DEADLINE_SWEEP_SECONDS", "86400")
# Likewise crons (lgplatform.crons.crons_fire): tests fire them at the times they choose.
os.environ.setdefault("GATEHOUSE_CRON_SECONDS", "86400")
# No idle connections kept open per process: two sessions, each with its workers and several daphnes (every
# process started from here inherits this), kept two each and reached PostgreSQL's 100 connections near the
# end of a run (99 measured; a test's own connection was then refused: "too many clients already").
os.environ.setdefault("GATEHOUSE_DB_POOL_MIN", "0")
# Nor anchor and prune under them as each worker's beat starts (every restart has a new schedule file):
# tests/ops/test_beat_catch_up.py starts a beat that does.
os.environ.setdefault("GATEHOUSE_BEAT_CATCH_UP_SECONDS", "86400")
# Static files straight from the apps (no collectstatic per session); tests/ops covers the manifest.
os.environ.setdefault("GATEHOUSE_STATIC_MANIFEST", "false")
# One queue per test session, so two sessions on one Redis never share work; one channel-layer
# namespace, so another session's live events never reach this one's sockets; one var dir (the
# beat's heartbeat file, mail). Under `pytest -n 2` each xdist worker is a session of its own but
# inherits the environment the controller's import of this module filled in: there the names are
# set, not defaulted.
_SESSION = uuid.uuid4().hex[:8]
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_session_env = os.environ.__setitem__ if _XDIST_WORKER else os.environ.setdefault
_session_env("GATEHOUSE_QUEUE", f"gatehouse-test-{_SESSION}")
_session_env("GATEHOUSE_CHANNEL_PREFIX", f"asgi-test-{_SESSION}")
_session_env("GATEHOUSE_VAR_DIR", str(_ROOT / "var" / "test" / (_XDIST_WORKER or "")))
# The suite's fake webhook receivers listen on 127.0.0.1, which outbound webhooks refuse by
# default; tests of that refusal clear this setting (tests/security/test_outbound_webhooks.py).
os.environ.setdefault("GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS", "127.0.0.1/32")

from console.settings import *  # noqa: E402,F403

# One database per test session (several sessions may share this machine);
# conftest drops the ones whose session process is gone.
DATABASES["default"]["TEST"] = {"NAME": f"test_gatehouse_{os.getpid()}"}  # noqa: F405

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast test users
