"""Gatehouse settings, driven by environment variables.

No variables at all gives *embedded mode*: SQLite files under ``var/``
(``GATEHOUSE_VAR_DIR``), Celery over a SQLite broker file there, an in-memory
channel layer, demo graphs (docs/embedded.md). Setting ``DATABASE_URL`` and ``REDIS_URL`` gives production mode.
"""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from kombu.entity import Exchange, Queue

from console.env import env_bool, env_float, env_int, env_list, env_str

# Checkpoint deserialisation only admits registered types (CVE-2026-28277
# class). LangGraph reads this at import time, so it must be set before any
# langgraph module loads; settings are the first thing every process imports.
os.environ.setdefault("LANGGRAPH_STRICT_MSGPACK", "true")

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("GATEHOUSE_VAR_DIR") or BASE_DIR / "var")

DEBUG = env_bool("DEBUG", False)
DATABASE_URL = env_str("DATABASE_URL")
REDIS_URL = env_str("REDIS_URL")
EMBEDDED = not DATABASE_URL
# --- production needs Redis (ops) -------------------------------------------------
# Without it the broker and the channel layer would fall back to per-process,
# per-container stand-ins: runs dispatched by web never reach a worker, live
# updates never reach another web process. Refuse to start instead.
if DATABASE_URL and not REDIS_URL:
    raise ImproperlyConfigured(
        "REDIS_URL (or REDIS_URL_FILE) is required when DATABASE_URL is set: production mode uses Redis as the "
        "Celery broker and the Channels layer. Unset DATABASE_URL for embedded mode (SQLite, no servers)."
    )
# Any other scheme passed `check --deploy` and the worker then died with "No such transport: http".
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
if REDIS_URL and not REDIS_URL.startswith(REDIS_SCHEMES):
    raise ImproperlyConfigured(
        f"REDIS_URL must start with {', '.join(REDIS_SCHEMES)} (it is Celery's broker and the Channels layer); "
        f"it starts with {REDIS_URL.partition('://')[0][:20]!r}"  # not the rest: it may hold a password
    )


# Nothing under var/ is for anyone but this user: the signing key, the databases
# (sessions, audit trail, checkpoints) and the broker's messages.
def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    _private_mode(path, 0o700)
    return path


def _private_file(path: Path) -> Path:
    """Create ``path`` empty and owner-only if missing (SQLite gives its -wal/-shm files the database's mode)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # an existing directory may be the operator's
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        _private_mode(path, 0o600)  # tighten a file an older version left world-readable
    return path


def _private_mode(path: Path, mode: int) -> None:
    try:
        if path.stat().st_mode & 0o077:
            path.chmod(mode)
    except OSError:  # not ours (a mounted volume): leave it to the operator
        pass


SECRET_KEY = env_str("SECRET_KEY") or ""
if not SECRET_KEY:
    if not (DEBUG or EMBEDDED):
        raise ImproperlyConfigured("SECRET_KEY (or SECRET_KEY_FILE) is required when DATABASE_URL is set")
    # Embedded/dev only: a per-checkout key so sessions survive restarts.
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        import secrets

        # Written owner-only under a private name, then linked into place: the key appears
        # whole, and when web and worker start together the first link wins for both.
        _private_dir(VAR_DIR)
        draft = VAR_DIR / f".secret_key.{os.getpid()}"
        with open(os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
            handle.write(secrets.token_urlsafe(50))
        try:
            os.link(draft, key_file)
        except FileExistsError:
            pass
        finally:
            draft.unlink()
    _private_mode(key_file, 0o600)
    SECRET_KEY = key_file.read_text().strip()

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # daphne's app only gives `manage.py runserver` its ASGI server, and imports Twisted into every
    # process that sets Django up (~0.3 s per worker or manage.py start): added for runserver alone.
    # The servers run `python -m daphne` (make run, docker-compose.yml, docs/deploy.md).
    *(["daphne"] if sys.argv[1:2] == ["runserver"] else []),
    # Before django.contrib.auth: its createsuperuser and changepassword are replaced by audited ones.
    "approvals.auth_commands",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_htmx",
    "ninja",  # its templates and static files: /api/docs serves Swagger UI locally, no CDN
    "channels",
    "axes",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "runtime",
    "approvals",
    "lgplatform",  # the LangGraph Platform-compatible API at /lg/ (an adapter, like console)
    "console",
]

# A console form refused by the CSRF check gets the console's error page, not Django's bare one.
CSRF_FAILURE_VIEW = "console.views.common.csrf_failure"
MIDDLEWARE = [
    # request_id / thread_id / task_id on every log line of a request (console/logs.py), the probes' too:
    # each response echoes its X-Request-ID, and the access log writes it (console/serve.py).
    "console.logs.RequestContextMiddleware",
    # Health probes and /metrics answer before host validation and the HTTPS redirect:
    # load balancers and Prometheus call them by address over the internal network (console/health.py).
    "console.probes.ProbeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files (hashed, compressed in production) from the web process itself; see --- static files ---.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "console.middleware.RequestBodyLimitMiddleware",
    "console.middleware.RequestTextMiddleware",
    "console.middleware.ContentSecurityPolicyMiddleware",
    # A page whose database is down answers a 503 "retry shortly"; before the session middleware, whose
    # reload of the session it prevents.
    "console.middleware.DatabaseUnavailableMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Last, as django-axes requires: it turns a lockout raised during login into a response.
    # Under ASGI the chain runs in sync mode too: console.request_threads builds it so.
    "axes.middleware.AxesMiddleware",
]

# Browser pages on other origins calling /lg/ and /api/ (LangGraph Studio, agent-chat-ui, a team's own page):
# none by default (LangGraph Server allows every origin); "*" allows any. They send a bearer token or an
# x-api-key, never cookies: a session does not cross origins, so no console write can be forged this way.
GATEHOUSE_CORS_ALLOWED_ORIGINS = env_list("GATEHOUSE_CORS_ALLOWED_ORIGINS", [])
if GATEHOUSE_CORS_ALLOWED_ORIGINS:
    from corsheaders.defaults import default_headers

    if "*" in GATEHOUSE_CORS_ALLOWED_ORIGINS and GATEHOUSE_CORS_ALLOWED_ORIGINS != ["*"]:
        raise ImproperlyConfigured("GATEHOUSE_CORS_ALLOWED_ORIGINS: '*' allows every origin; list no others beside it")
    for origin in GATEHOUSE_CORS_ALLOWED_ORIGINS:
        parts = urlsplit(origin)
        if origin != "*" and (parts.scheme not in ("http", "https") or not parts.netloc or parts[2:] != ("", "", "")):
            raise ImproperlyConfigured(
                f"GATEHOUSE_CORS_ALLOWED_ORIGINS: {origin!r} is not an origin (scheme://host[:port], no path)"
            )
    INSTALLED_APPS.append("corsheaders")
    # Early: a refusal from the middleware below it (413, a NUL byte) must be readable by the page too.
    MIDDLEWARE.insert(MIDDLEWARE.index("console.probes.ProbeMiddleware") + 1, "corsheaders.middleware.CorsMiddleware")
    CORS_URLS_REGEX = r"^/(api|lg)/"
    CORS_ALLOW_ALL_ORIGINS = GATEHOUSE_CORS_ALLOWED_ORIGINS == ["*"]
    CORS_ALLOWED_ORIGINS = [] if CORS_ALLOW_ALL_ORIGINS else GATEHOUSE_CORS_ALLOWED_ORIGINS
    CORS_ALLOW_CREDENTIALS = False
    CORS_ALLOW_HEADERS = (*default_headers, "x-api-key", "x-gatehouse-reason", "x-request-id")
    CORS_EXPOSE_HEADERS = ["content-location", "location", "retry-after", "x-request-id"]
    CORS_PREFLIGHT_MAX_AGE = 600
    # A public page (hosted LangGraph Studio) calling a Gatehouse on a private address: Chromium asks first.
    CORS_ALLOW_PRIVATE_NETWORK = True

AUTHENTICATION_BACKENDS = [
    # Throttles password guessing per username and address; lockouts are audited (approvals.security).
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = env_float("AXES_COOLOFF_HOURS", 0.25, minimum=0.01)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False

# No inline script or style anywhere in the console: a strict policy holds.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' ws: wss:; frame-ancestors 'none'; base-uri 'self'; form-action 'self'; object-src 'none'"
)

ROOT_URLCONF = "console.urls"
ASGI_APPLICATION = "console.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "console" / "templates"],  # inside the package: a wheel install has them
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# How long the PostgreSQL pools (Django's, the checkpointer's) retry a failed connection before the next
# checkout starts afresh (see the pool options below).
GATEHOUSE_DB_POOL_RECONNECT_SECONDS = env_float("GATEHOUSE_DB_POOL_RECONNECT_SECONDS", 5.0, minimum=1.0)
DATABASES: dict[str, Any]
if EMBEDDED:
    _private_dir(VAR_DIR)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": _private_file(VAR_DIR / "gatehouse.sqlite3"),
            "OPTIONS": {
                # The web server and the worker are separate processes: WAL
                # lets readers run beside the writer, IMMEDIATE takes the
                # write lock up front so transactions queue instead of failing.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 30,
            },
        }
    }
else:
    try:
        DATABASES = {"default": dj_database_url.parse(DATABASE_URL or "")}
    except (ValueError, KeyError, TypeError) as _exc:  # dj_database_url's errors name neither the variable nor
        # what is wrong with it in terms of it; the URL itself is not repeated (it may hold a password).
        raise ImproperlyConfigured(
            "DATABASE_URL is not a database URL such as postgres://USER:PASSWORD@HOST:5432/NAME "
            f"(special characters in the password percent-encoded): {type(_exc).__name__}"
        ) from None
    # A per-process psycopg pool: daphne and the Celery thread pool start and
    # end threads freely, and persistent per-thread connections (CONN_MAX_AGE)
    # exhausted PostgreSQL's connection limit under load. A killed connection is
    # replaced on checkout, not handed out.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        # Django's backend with a pool check that makes its round trip only for a doubtful
        # connection (runtime/postgresql); CONN_HEALTH_CHECKS would make it on every checkout.
        DATABASES["default"]["ENGINE"] = "runtime.postgresql"
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
    _pool_min = env_int("GATEHOUSE_DB_POOL_MIN", 2, minimum=0)
    _pool_max = env_int("GATEHOUSE_DB_POOL_MAX", 20, minimum=1)
    if _pool_min > _pool_max:  # psycopg_pool refuses the pool, so every database access failed instead
        raise ImproperlyConfigured(
            f"GATEHOUSE_DB_POOL_MIN ({_pool_min}) must not exceed GATEHOUSE_DB_POOL_MAX ({_pool_max})"
        )
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": _pool_min,
        "max_size": _pool_max,
        "timeout": env_float("GATEHOUSE_DB_POOL_TIMEOUT", 10.0, minimum=0.1),
        # psycopg_pool retries a failed connection with exponential backoff (1, 2, 4, … s) for this
        # long (its default: 300 s), so after an outage the next attempt could be minutes away: a
        # 150 s outage left the worker failing ~95 s more. Given up sooner, the next checkout starts
        # a fresh attempt at once: back within seconds of PostgreSQL (docs/deploy.md, "Outages").
        "reconnect_timeout": GATEHOUSE_DB_POOL_RECONNECT_SECONDS,
    }
    if not env_bool("GATEHOUSE_DB_PREPARED_STATEMENTS", True):
        # For a pooler that cannot carry prepared statements (runtime/postgresql/base.py).
        DATABASES["default"]["OPTIONS"]["prepare_threshold"] = None

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "staticfiles"
# console/static is found as the console app's static directory (it ships inside the package).

# --- static files (ops) -----------------------------------------------------------
# WhiteNoise serves /static/ from every web process. In production (DATABASE_URL set,
# DEBUG off) files are collected at image build (`manage.py collectstatic`) with content-hashed
# names (cached for a year) and gzip copies. Embedded mode and the test suite serve straight
# from the apps' static directories (no collectstatic step, unhashed names).
GATEHOUSE_STATIC_MANIFEST = env_bool("GATEHOUSE_STATIC_MANIFEST", not EMBEDDED and not DEBUG)
STORAGES: dict[str, Any] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if GATEHOUSE_STATIC_MANIFEST
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = not GATEHOUSE_STATIC_MANIFEST
if WHITENOISE_USE_FINDERS:
    STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise warns about a missing root; finders win anyway
WHITENOISE_AUTOREFRESH = DEBUG

LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"

# --- request limits ------------------------------------------------------
# Bodies over this many bytes are refused with 413 before any view runs.
GATEHOUSE_MAX_BODY_BYTES = env_int("GATEHOUSE_MAX_BODY_BYTES", 1_048_576, minimum=1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = GATEHOUSE_MAX_BODY_BYTES

# --- graphs and runtime --------------------------------------------------
GATEHOUSE_GRAPHS = env_str("GATEHOUSE_GRAPHS") or str(BASE_DIR / "demo" / "langgraph.json")
GATEHOUSE_CHECKPOINT_SQLITE = Path(env_str("GATEHOUSE_CHECKPOINT_SQLITE") or VAR_DIR / "checkpoints.sqlite3")
if EMBEDDED:
    _private_file(GATEHOUSE_CHECKPOINT_SQLITE)
GATEHOUSE_CHECKPOINT_POOL_SIZE = env_int("GATEHOUSE_CHECKPOINT_POOL_SIZE", 8, minimum=1)
# A claimed run's lease; the worker renews it after every super-step. A run
# whose lease lapsed (its worker died) is claimed again by the sweeper.
GATEHOUSE_LEASE_SECONDS = env_float("GATEHOUSE_LEASE_SECONDS", 60.0, minimum=0.5)
GATEHOUSE_SWEEP_SECONDS = env_float("GATEHOUSE_SWEEP_SECONDS", 15.0, minimum=0.2)
# A worker session idle inside a transaction this long is ended by PostgreSQL, releasing its locks (a worker
# cut off mid-transaction must not hold its thread or audit chain against the takeover: runtime/sessions.py).
# Below the lease, so the lock is gone by the time the run can be claimed again. 0 turns it off.
GATEHOUSE_WORKER_IDLE_IN_TRANSACTION_SECONDS = env_float(
    "GATEHOUSE_WORKER_IDLE_IN_TRANSACTION_SECONDS", 10.0, minimum=0
)
# Queued runs older than this with no worker on them are dispatched again.
GATEHOUSE_REDISPATCH_AFTER_SECONDS = env_float("GATEHOUSE_REDISPATCH_AFTER_SECONDS", 30.0, minimum=0.2)
GATEHOUSE_MAX_RUN_ATTEMPTS = env_int("GATEHOUSE_MAX_RUN_ATTEMPTS", 5, minimum=1)
# A run whose worker died, or that hit a transient error (database connection
# lost, deadlock), is dispatched again no sooner than its lease expiry plus
# base * 2**(attempts-1) seconds, capped; after GATEHOUSE_MAX_RUN_ATTEMPTS it is
# marked failed (dead letter) with its last error, for an operator to retry.
GATEHOUSE_RETRY_BACKOFF_SECONDS = env_float("GATEHOUSE_RETRY_BACKOFF_SECONDS", 1.0, minimum=0.0)
GATEHOUSE_RETRY_BACKOFF_MAX_SECONDS = env_float("GATEHOUSE_RETRY_BACKOFF_MAX_SECONDS", 300.0, minimum=0.0)
# On SIGTERM a worker stops taking work and lets in-flight runs finish (Celery's
# warm shutdown); runs still going after this many seconds are handed back
# (their lease released for the sweeper) and the process exits. Keep it below
# your supervisor's kill timeout (docker stop: 10 s by default; set
# stop_grace_period above it).
GATEHOUSE_SHUTDOWN_GRACE_SECONDS = env_float("GATEHOUSE_SHUTDOWN_GRACE_SECONDS", 8.0, minimum=0.1)
# Redis as the broker, fault-tolerance settings that are not ours to pick in code:
# - CELERY_VISIBILITY_TIMEOUT (below, default 3600 s) is when Redis hands an
#   unacknowledged message to another worker. It must exceed the longest run
#   (a node that waits on a slow API included), or a healthy run is delivered
#   twice; the fence makes the duplicate harmless but wasteful. A run whose
#   worker died does not wait for it: the sweeper re-dispatches it once its
#   lease lapses (GATEHOUSE_LEASE_SECONDS + backoff).
# - Redis must run with maxmemory-policy noeviction: under memory pressure an
#   evicting policy may drop a queue key, i.e. lose dispatched runs (the sweeper
#   would re-send them after GATEHOUSE_REDISPATCH_AFTER_SECONDS, but only while
#   their rows say queued). The worker logs a warning at start when it is not.
# /lg/ runs.wait, join and stream hold the request at most this long.
GATEHOUSE_PLATFORM_WAIT_SECONDS = env_float("GATEHOUSE_PLATFORM_WAIT_SECONDS", 120.0, minimum=1.0)
# --- governance ----------------------------------------------------------------
# Apply separation of duties to every gate (otherwise only to multi-approver
# gates and gates whose payload sets "separation_of_duties": true).
GATEHOUSE_SEPARATION_OF_DUTIES = env_bool("GATEHOUSE_SEPARATION_OF_DUTIES", False)
# Signing a decision needs the password again when the sign-in is older than this.
GATEHOUSE_REAUTH_SECONDS = env_int("GATEHOUSE_REAUTH_SECONDS", 15 * 60, minimum=30)
# The audit trail's hash chains: events go to one by a hash of their thread, each chain
# with its own lock, so audited transactions in different chains never wait for each other.
GATEHOUSE_AUDIT_CHAINS = env_int("GATEHOUSE_AUDIT_CHAINS", 8, minimum=1)
# How often beat records every audit chain's head as an anchor.
GATEHOUSE_ANCHOR_SECONDS = env_float("GATEHOUSE_ANCHOR_SECONDS", 3600.0, minimum=1.0)
# Each anchor is also appended (one JSON line, O_APPEND, mode 0600) to this file,
# kept where the database role cannot rewrite it; `audit_verify --sink` checks it.
GATEHOUSE_AUDIT_ANCHOR_SINK = env_str("GATEHOUSE_AUDIT_ANCHOR_SINK") or ""
GATEHOUSE_DEMO = env_bool("GATEHOUSE_DEMO", EMBEDDED)

# --- crons (lgplatform/crons.py): how often beat looks for due crons; a schedule's finest step is a minute ---
GATEHOUSE_CRON_SECONDS = env_float("GATEHOUSE_CRON_SECONDS", 10.0, minimum=1.0)

# --- deadlines: the reminder/escalation sweep, and the e-mail it sends (approvals.deadlines) ---
GATEHOUSE_DEADLINE_SWEEP_SECONDS = env_float("GATEHOUSE_DEADLINE_SWEEP_SECONDS", 30.0, minimum=1.0)
# Links in e-mails point here (e.g. https://gatehouse.example.com); empty: paths only.
GATEHOUSE_PUBLIC_URL = env_str("GATEHOUSE_PUBLIC_URL") or ""
# Embedded mode writes each e-mail to a file under var/mail/; otherwise SMTP when EMAIL_HOST is set,
# else the console (the process's log). EMAIL_BACKEND overrides either.
EMAIL_HOST = env_str("EMAIL_HOST") or "localhost"
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER") or ""
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_BACKEND = env_str("EMAIL_BACKEND") or (
    "django.core.mail.backends.filebased.EmailBackend"
    if EMBEDDED
    else "django.core.mail.backends.smtp.EmailBackend"
    if env_str("EMAIL_HOST")
    else "django.core.mail.backends.console.EmailBackend"
)
EMAIL_FILE_PATH = VAR_DIR / "mail"
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL") or "gatehouse@localhost"

# --- Celery ----------------------------------------------------------------
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any]
if REDIS_URL:
    CELERY_BROKER_URL = REDIS_URL
    # Unacked messages come back after this long; it must exceed the longest
    # run. Runs whose worker died are recovered sooner by the lease sweeper.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600, minimum=60),
        # A broker host that drops packets (a partition, a firewall) held each dispatch for ~135 s in the
        # web request that queued it (the kernel's connect retries); refused connections fail at once. The
        # sweeper re-sends what an outage kept from going (docs/operations.md).
        "socket_connect_timeout": 3,
    }
    if REDIS_URL.startswith(("redis://", "rediss://")):
        # kombu's Redis transport with one client kept per channel (console/redis_transport.py)
        CELERY_BROKER_TRANSPORT = "console.redis_transport:Transport"
else:
    # Embedded: one SQLite file is the broker (console/broker.py; why not kombu's
    # filesystem transport: docs/embedded.md). No remote control: its fanout
    # queues would only add polling.
    CELERY_BROKER_URL = f"sqlite:///{_private_file(VAR_DIR / 'broker.sqlite3')}"
    CELERY_BROKER_TRANSPORT = "console.broker:Transport"
    CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 0.05, "busy_timeout": 30}
    CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
CELERY_TASK_DEFAULT_QUEUE = env_str("GATEHOUSE_QUEUE") or "gatehouse"
# The worker model `celery -A console worker` gets without --pool/--concurrency: threads, 8 per
# process; scale with one worker process per core (docs/performance.md, "Worker model": prefork ties
# with threads but opens pools per pool process, 4 and 8 threads tied, a second process on 2 cores gained most).
# Celery swaps an explicit `--pool=prefork` for this setting: choose prefork here, not on the command line.
CELERY_WORKER_POOL = env_str("GATEHOUSE_WORKER_POOL") or "threads"
if CELERY_WORKER_POOL not in ("threads", "prefork", "solo"):
    raise ImproperlyConfigured(f"GATEHOUSE_WORKER_POOL={CELERY_WORKER_POOL!r}: use threads, prefork or solo")
CELERY_WORKER_CONCURRENCY = env_int("GATEHOUSE_WORKER_CONCURRENCY", 8, minimum=1)  # ≤ GATEHOUSE_CHECKPOINT_POOL_SIZE
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
# Only JSON on the wire: console/celery.py sets accept_content and task_serializer under their own names
# (as CELERY_* settings they are also Celery 3's names, which every worker start warned about).
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
# Outbound webhook retries back off exponentially from this base.
GATEHOUSE_WEBHOOK_BACKOFF_SECONDS = env_float("GATEHOUSE_WEBHOOK_BACKOFF_SECONDS", 10.0, minimum=0.05)
# Outbound webhooks never go to loopback, private, link-local, multicast, reserved or
# cloud-metadata addresses, except to networks (CIDR) or host names listed here.
GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS = env_list("GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS", [])
for _entry in GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_entry, strict=False)
    except ValueError:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?\.?", _entry):
            raise ImproperlyConfigured(
                f"GATEHOUSE_OUTBOUND_ALLOWED_NETWORKS: {_entry!r} is neither a network (CIDR) nor a host name"
            ) from None
# Outbound webhook deliveries run on their own queue, so slow receivers never hold up runs.
# A worker started without -Q consumes both queues; one with -Q must name both.
GATEHOUSE_OUTBOUND_QUEUE = f"{CELERY_TASK_DEFAULT_QUEUE}.outbound"
# Each queue with its own exchange and routing key: two queues bound alike would both get every message.
CELERY_TASK_QUEUES = [
    Queue(name, Exchange(name), routing_key=name) for name in (CELERY_TASK_DEFAULT_QUEUE, GATEHOUSE_OUTBOUND_QUEUE)
]
CELERY_TASK_ROUTES = {"approvals.deliver_webhook": {"queue": GATEHOUSE_OUTBOUND_QUEUE}}
CELERY_BEAT_SCHEDULE = {
    "sweep-runs": {"task": "runtime.sweep_runs", "schedule": GATEHOUSE_SWEEP_SECONDS},
    "sweep-webhooks": {"task": "approvals.sweep_webhooks", "schedule": max(GATEHOUSE_SWEEP_SECONDS, 5.0)},
    "anchor-audit": {"task": "approvals.anchor_audit", "schedule": GATEHOUSE_ANCHOR_SECONDS},
    "sweep-deadlines": {"task": "approvals.sweep_deadlines", "schedule": GATEHOUSE_DEADLINE_SWEEP_SECONDS},  # deadlines
    "fire-crons": {"task": "lgplatform.fire_crons", "schedule": GATEHOUSE_CRON_SECONDS},  # client.crons
}

# --- Channels ------------------------------------------------------------
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            # Redis pub/sub: a group_send is one PUBLISH that Redis pushes to the web processes
            # subscribed to the group, instead of the core layer's three round trips per group and a
            # polling receive; what a lost message costs is a stale screen until the next event,
            # which live events accept anyway (console/live.py, docs/performance.md). Gatehouse's subclass
            # logs an outage once and tells the open pages, which reconnect (console/channel_layer.py).
            "BACKEND": "console.channel_layer.PubSubChannelLayer",
            # Several deployments (or test sessions) may share one Redis: groups are namespaced.
            "CONFIG": {"hosts": [REDIS_URL], "prefix": env_str("GATEHOUSE_CHANNEL_PREFIX") or "asgi"},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# --- security --------------------------------------------------------------
SESSION_COOKIE_AGE = env_int("SESSION_COOKIE_AGE", 8 * 3600, minimum=60)
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG and not EMBEDDED:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    # Only for a deployment served over plain http on a trusted network (or a test);
    # browsers drop Secure cookies over http, so signing in would fail.
    SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# --- logging (ops) ----------------------------------------------------------------
# GATEHOUSE_LOG_FORMAT=json: one JSON object per line with request, thread, run and task
# ids wherever they are known (console/logs.py); "plain" (default) for people reading a terminal.
GATEHOUSE_LOG_FORMAT = (env_str("GATEHOUSE_LOG_FORMAT") or "plain").strip().lower()
if GATEHOUSE_LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f'GATEHOUSE_LOG_FORMAT={GATEHOUSE_LOG_FORMAT!r} must be "plain" or "json"')
GATEHOUSE_LOG_HOUSEKEEPING = env_bool("GATEHOUSE_LOG_HOUSEKEEPING", False)
# logging's own refusal ("Unable to configure root logger") named neither the variable nor the choices.
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL = (env_str("LOG_LEVEL") or "INFO").strip().upper()
if LOG_LEVEL not in LOG_LEVELS:
    raise ImproperlyConfigured(f"LOG_LEVEL={env_str('LOG_LEVEL')!r} must be one of {', '.join(LOG_LEVELS)}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "context": {"()": "console.logs.ContextFilter"},
        "housekeeping": {"()": "console.logs.HousekeepingFilter"},
        "pool_attempts": {"()": "console.logs.PoolAttemptFilter"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "console.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": GATEHOUSE_LOG_FORMAT,
            # Beat's sweeps every few seconds, and the worker receiving and finishing them, are not logged
            # at INFO unless GATEHOUSE_LOG_HOUSEKEEPING is true (their warnings and errors always are).
            "filters": ["context"] if GATEHOUSE_LOG_HOUSEKEEPING else ["context", "housekeeping"],
        }
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "httpx": {"level": "WARNING"},
        # One line per failure while the database is down, not one per pool connection attempt (console/logs.py).
        "psycopg.pool": {"filters": ["pool_attempts"]},
    },
}

# --- reviewer console --------------------------------------------------------
# A claim keeps other reviewers off a task this long unless released earlier.
GATEHOUSE_CLAIM_SECONDS = env_int("GATEHOUSE_CLAIM_SECONDS", 30 * 60, minimum=60)
# Serve /static/ from every web process with WhiteNoise (see --- static files ---); turn off
# when a proxy or CDN serves a copy of STATIC_ROOT.
GATEHOUSE_SERVE_STATIC = env_bool("GATEHOUSE_SERVE_STATIC", True)
if not GATEHOUSE_SERVE_STATIC:
    MIDDLEWARE.remove("whitenoise.middleware.WhiteNoiseMiddleware")
# Embedded mode only: where workers relay live events to the web process (see console/live.py).
GATEHOUSE_LIVE_RELAY_URL = env_str("GATEHOUSE_LIVE_RELAY_URL") or (
    "" if REDIS_URL else f"http://127.0.0.1:{env_int('PORT', 8000, minimum=1)}/internal/live/"
)
# The session cookie age becomes an idle timeout: every request renews it.
SESSION_SAVE_EVERY_REQUEST = True
LOGOUT_REDIRECT_URL = LOGIN_URL

# --- checkpoint storage: large values, retention (runtime/blobs.py, runtime/retention.py) -----
# Checkpoint values whose serialised form is over this are stored once, by SHA-256, outside the checkpoint.
GATEHOUSE_BLOB_THRESHOLD_BYTES = env_int("GATEHOUSE_BLOB_THRESHOLD_BYTES", 4096, minimum=256)
# "db" (the runtime_blob table), "s3" (django-storages, AWS_* / GATEHOUSE_BLOB_S3_* settings) or "storage:<alias>".
GATEHOUSE_BLOB_STORAGE = env_str("GATEHOUSE_BLOB_STORAGE") or "db"
if GATEHOUSE_BLOB_STORAGE not in ("db", "s3") and not GATEHOUSE_BLOB_STORAGE.startswith("storage:"):
    raise ImproperlyConfigured('GATEHOUSE_BLOB_STORAGE must be "db", "s3" or "storage:<STORAGES alias>"')
if GATEHOUSE_BLOB_STORAGE == "s3":
    # Added to the STORAGES above: replacing the dict dropped "default" and "staticfiles",
    # and every page using {% static %} failed.
    STORAGES = {
        **STORAGES,
        "gatehouse_blobs": {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": env_str("GATEHOUSE_BLOB_S3_BUCKET") or "",
                "endpoint_url": env_str("GATEHOUSE_BLOB_S3_ENDPOINT_URL"),
                "region_name": env_str("GATEHOUSE_BLOB_S3_REGION"),
                "access_key": env_str("GATEHOUSE_BLOB_S3_ACCESS_KEY_ID"),
                "secret_key": env_str("GATEHOUSE_BLOB_S3_SECRET_ACCESS_KEY"),
                "default_acl": None,
                "file_overwrite": True,  # content-addressed: same name, same bytes
            },
        },
    }
    if not STORAGES["gatehouse_blobs"]["OPTIONS"]["bucket_name"]:
        raise ImproperlyConfigured("GATEHOUSE_BLOB_STORAGE=s3 needs GATEHOUSE_BLOB_S3_BUCKET")
# Per-process cache of loaded blobs (immutable, so always safe to cache).
GATEHOUSE_BLOB_CACHE_BYTES = env_int("GATEHOUSE_BLOB_CACHE_BYTES", 64 * 1024 * 1024, minimum=0)
# An unreferenced blob is collected only once nobody has written it for this long.
GATEHOUSE_BLOB_GRACE_SECONDS = env_int("GATEHOUSE_BLOB_GRACE_SECONDS", 3600, minimum=60)
# Completed threads keep only their final and decision checkpoints after this many days
# (per graph: langgraph.json "gatehouse": {"retention": {"<graph>": {"completed_after_days": N}}}); 0 = never prune.
GATEHOUSE_RETENTION_COMPLETED_AFTER_DAYS = env_int("GATEHOUSE_RETENTION_COMPLETED_AFTER_DAYS", 30, minimum=0)
# Checkpoint ids other apps refer to, kept by retention: "app_label.Model.field@lookup to the thread".
GATEHOUSE_RETENTION_PROTECT = env_list(
    "GATEHOUSE_RETENTION_PROTECT",
    ["approvals.Decision.checkpoint_id@task__thread", "approvals.ApprovalTask.checkpoint_id@thread"],
)
GATEHOUSE_RETENTION_SECONDS = env_int("GATEHOUSE_RETENTION_SECONDS", 3600, minimum=1)
CELERY_BEAT_SCHEDULE["prune-checkpoints"] = {
    "task": "runtime.prune_checkpoints",
    "schedule": GATEHOUSE_RETENTION_SECONDS,
}

# --- health and metrics (ops; console/health.py, console/metrics.py, docs/operations.md) ------
# Workers write a heartbeat row this often; readiness fails when none is fresher than the stale limit.
GATEHOUSE_HEARTBEAT_SECONDS = env_float("GATEHOUSE_HEARTBEAT_SECONDS", 10.0, minimum=0.1)
GATEHOUSE_HEARTBEAT_STALE_SECONDS = env_float(
    "GATEHOUSE_HEARTBEAT_STALE_SECONDS", max(3 * GATEHOUSE_HEARTBEAT_SECONDS, 30.0), minimum=0.2
)
# Beat touches this file on every tick (`manage.py health_check --component beat` reads its age).
GATEHOUSE_BEAT_HEARTBEAT_FILE = Path(env_str("GATEHOUSE_BEAT_HEARTBEAT_FILE") or VAR_DIR / "beat.heartbeat")
CELERY_BEAT_SCHEDULER = "console.celery:HeartbeatScheduler"
# A beat whose schedule never ran the audit anchoring and the pruning runs them this long after it starts,
# not one full interval later (console.celery.HeartbeatScheduler); at or above an interval: Celery's way.
GATEHOUSE_BEAT_CATCH_UP_SECONDS = env_float("GATEHOUSE_BEAT_CATCH_UP_SECONDS", 30.0, minimum=0.0)
# GET /metrics needs "Authorization: Bearer <this>"; unset = /metrics answers 404.
GATEHOUSE_METRICS_TOKEN = env_str("GATEHOUSE_METRICS_TOKEN") or ""
if GATEHOUSE_METRICS_TOKEN and len(GATEHOUSE_METRICS_TOKEN) < 24:
    raise ImproperlyConfigured("GATEHOUSE_METRICS_TOKEN must be at least 24 characters (a random secret)")
# Time-to-decision histogram buckets, seconds (1 min … 7 days).
GATEHOUSE_METRICS_DECISION_BUCKETS = [60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 3 * 86400.0, 7 * 86400.0]

# --- single sign-on: OpenID Connect (console/sso.py, docs/users.md) -----------------------------
# Off unless OIDC_RP_CLIENT_ID is set. The provider's endpoints come from its discovery document
# (OIDC_OP_ISSUER + /.well-known/openid-configuration) unless all four are given explicitly.
OIDC_RP_CLIENT_ID = env_str("OIDC_RP_CLIENT_ID") or ""
GATEHOUSE_OIDC_ENABLED = bool(OIDC_RP_CLIENT_ID)
# The sign-in page's single sign-on button; no button without single sign-on.
GATEHOUSE_OIDC_BUTTON = ""
if GATEHOUSE_OIDC_ENABLED:
    import json as _json

    OIDC_RP_CLIENT_SECRET = env_str("OIDC_RP_CLIENT_SECRET") or ""
    OIDC_OP_ISSUER = (env_str("OIDC_OP_ISSUER") or "").rstrip("/")
    OIDC_OP_AUTHORIZATION_ENDPOINT = env_str("OIDC_OP_AUTHORIZATION_ENDPOINT") or ""
    OIDC_OP_TOKEN_ENDPOINT = env_str("OIDC_OP_TOKEN_ENDPOINT") or ""
    OIDC_OP_USER_ENDPOINT = env_str("OIDC_OP_USER_ENDPOINT") or ""
    OIDC_OP_JWKS_ENDPOINT = env_str("OIDC_OP_JWKS_ENDPOINT") or ""
    _explicit = (OIDC_OP_AUTHORIZATION_ENDPOINT, OIDC_OP_TOKEN_ENDPOINT, OIDC_OP_USER_ENDPOINT, OIDC_OP_JWKS_ENDPOINT)
    if not OIDC_OP_ISSUER:
        raise ImproperlyConfigured("OIDC_RP_CLIENT_ID is set: set OIDC_OP_ISSUER (the provider's issuer URL) too")
    if not OIDC_RP_CLIENT_SECRET:
        raise ImproperlyConfigured("OIDC_RP_CLIENT_ID is set: set OIDC_RP_CLIENT_SECRET or OIDC_RP_CLIENT_SECRET_FILE")
    if any(_explicit) and not all(_explicit):
        raise ImproperlyConfigured(
            "set all of OIDC_OP_AUTHORIZATION_ENDPOINT, _TOKEN_, _USER_ and _JWKS_ENDPOINT, or none (discovery)"
        )
    OIDC_RP_SIGN_ALGO = env_str("OIDC_RP_SIGN_ALGO") or "RS256"
    OIDC_RP_SCOPES = env_str("OIDC_RP_SCOPES") or "openid email profile"
    OIDC_USE_PKCE = env_bool("OIDC_USE_PKCE", True)
    OIDC_TIMEOUT = env_float("OIDC_TIMEOUT_SECONDS", 10.0, minimum=0.5)
    OIDC_AUTHENTICATION_CALLBACK_URL = "oidc:callback"
    LOGIN_REDIRECT_URL_FAILURE = "/accounts/login/?sso=failed"
    # The claim whose value(s) select roles and graphs, and the mapping from each value:
    # {"gh-reviewers": {"roles": ["reviewer"], "graphs": ["loan_approval"], "gates": ["kyc:review"]}}
    GATEHOUSE_OIDC_ROLE_CLAIM = env_str("GATEHOUSE_OIDC_ROLE_CLAIM") or "groups"
    GATEHOUSE_OIDC_USERNAME_CLAIM = env_str("GATEHOUSE_OIDC_USERNAME_CLAIM") or "preferred_username"
    GATEHOUSE_OIDC_BUTTON = env_str("GATEHOUSE_OIDC_BUTTON") or "Sign in with single sign-on"
    try:
        GATEHOUSE_OIDC_MAPPING = _json.loads(env_str("GATEHOUSE_OIDC_MAPPING") or "{}")
    except ValueError as _exc:
        raise ImproperlyConfigured(f"GATEHOUSE_OIDC_MAPPING is not JSON: {_exc}") from None
    if not isinstance(GATEHOUSE_OIDC_MAPPING, dict):
        raise ImproperlyConfigured("GATEHOUSE_OIDC_MAPPING must be a JSON object: claim value → roles and graphs")
    AUTHENTICATION_BACKENDS = [*AUTHENTICATION_BACKENDS, "console.sso.GatehouseOIDCBackend"]
    AXES_WHITELIST_CALLABLE = "console.sso.axes_exempt"  # callbacks are no password guesses (console/sso.py)

# Long-term memory store and the checkpointer choice (runtime/store.py, runtime/checkpointer.py;
# docs/memory-store.md, docs/runtime-controls.md).
GATEHOUSE_STORE_SQLITE = Path(env_str("GATEHOUSE_STORE_SQLITE") or VAR_DIR / "store.sqlite3")
if EMBEDDED:
    _private_file(GATEHOUSE_STORE_SQLITE)  # memories are as private as checkpoints
GATEHOUSE_CHECKPOINTER = (env_str("GATEHOUSE_CHECKPOINTER") or "").strip().lower()
if GATEHOUSE_CHECKPOINTER not in ("", "redis"):
    raise ImproperlyConfigured(
        "GATEHOUSE_CHECKPOINTER must be unset (the database's own saver: PostgreSQL or SQLite) or redis, "
        f"not {GATEHOUSE_CHECKPOINTER!r}"
    )
GATEHOUSE_CHECKPOINTER_REDIS_URL = (
    env_str("GATEHOUSE_CHECKPOINTER_REDIS_URL") or REDIS_URL or "redis://127.0.0.1:6379/0"
)
