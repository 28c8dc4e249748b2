"""ASGI entry point: HTTP through Django, websockets through Channels."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django.setup(set_prefix=False)  # what django.core.asgi.get_asgi_application() does, then its handler

from console.request_threads import ReusedThreadASGIHandler  # noqa: E402

django_asgi_app = ReusedThreadASGIHandler()

from runtime.registry import registry_load  # noqa: E402

# The graphs load as the server starts (never in migrate/collectstatic): a broken one stops it, named.
registry_load()

from runtime.checkpointer import checkpointer_preflight  # noqa: E402

# GATEHOUSE_CHECKPOINTER=redis without RedisJSON/RediSearch (or the package): refuse at start, named.
checkpointer_preflight()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from console.origin import SameOriginValidator  # noqa: E402
from console.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # Scheme, host and port of the Origin, as Django's CSRF check compares them.
        "websocket": SameOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)

from console.heap import heap_freeze  # noqa: E402

# Last: everything loaded by now lives as long as the server (console/heap.py).
heap_freeze()
