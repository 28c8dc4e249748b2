"""ASGI entry point: HTTP through Django, websockets through Channels.

daphne imports this module as it starts. A start it must refuse (a setting start-up rejects, a graph
that does not load, a checkpointer that cannot work here) is one CRITICAL line naming it and exit
status 1, as the Celery worker does (``console.celery._graphs_load``): daphne printed the whole
import traceback (~50 lines) with the message on its last line.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, NoReturn

import django
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from channels.routing import ProtocolTypeRouter

log = logging.getLogger("gatehouse.web")


def _start_refuse(reason: str) -> NoReturn:
    if not settings.configured:
        # The settings are what failed, so Django never applied LOGGING: daphne's own format (no logger
        # name) is replaced by console.settings' "plain" one.
        logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s %(message)s", force=True)
    log.critical("cannot start: %s", reason)
    logging.shutdown()
    raise SystemExit(1)  # daphne (and Python) print nothing more for a SystemExit


os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
try:
    django.setup(set_prefix=False)  # what django.core.asgi.get_asgi_application() does, then its handler
except ImproperlyConfigured as exc:  # its message names the variable and what it takes
    _start_refuse(str(exc))
except Exception as exc:  # noqa: BLE001 - whatever else stops the start: one line, its type and message
    _start_refuse(f"{type(exc).__name__}: {exc}")

from runtime.registry import GraphRegistryError  # noqa: E402 - after django.setup(), like every app module


def _application_build() -> ProtocolTypeRouter:
    from channels.auth import AuthMiddlewareStack
    from channels.routing import ProtocolTypeRouter, URLRouter

    from console.origin import SameOriginValidator
    from console.request_threads import ReusedThreadASGIHandler
    from console.routing import websocket_urlpatterns
    from runtime.checkpointer import checkpointer_preflight
    from runtime.registry import registry_load

    django_asgi_app = ReusedThreadASGIHandler()
    # The graphs load as the server starts (never in migrate/collectstatic): a broken one stops it, named.
    registry_load()
    # GATEHOUSE_CHECKPOINTER=redis without RedisJSON/RediSearch (or the package): refuse at start, named.
    checkpointer_preflight()
    return ProtocolTypeRouter(
        {
            "http": django_asgi_app,
            # Scheme, host and port of the Origin, as Django's CSRF check compares them.
            "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        }
    )


try:
    application = _application_build()
except (GraphRegistryError, ImproperlyConfigured) as exc:  # CheckpointerUnavailable is an ImproperlyConfigured
    _start_refuse(str(exc))
except Exception as exc:  # noqa: BLE001 - a graph module may raise anything while it loads
    _start_refuse(f"{type(exc).__name__}: {exc}")

from console.heap import heap_freeze  # noqa: E402

# Last: everything loaded by now lives as long as the server (console/heap.py).
heap_freeze()
