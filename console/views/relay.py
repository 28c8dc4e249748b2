"""The embedded-mode live relay endpoint (see ``console.live``): worker → web process → websockets."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from console import live


@csrf_exempt  # machine-to-machine; authenticated by the HMAC signature instead of a session
@require_POST
def live_relay(request: HttpRequest) -> HttpResponse:
    if settings.REDIS_URL or not settings.GATEHOUSE_LIVE_RELAY_URL:
        return HttpResponse(status=404)  # production delivers through Redis; no side door
    body = request.body
    if not live.relay_verify(body, request.headers.get(live.RELAY_HEADER, "")):
        return HttpResponse("bad signature", status=403, content_type="text/plain")
    event = live.relay_event_parse(body)
    if event is None:
        return HttpResponse("not a live event", status=400, content_type="text/plain")
    live.deliver_local(event)
    return HttpResponse(status=204)
