"""Refuse oversized request bodies before any view or parser reads them."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse


class RequestBodyLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        limit: int = settings.GATEHOUSE_MAX_BODY_BYTES
        raw_length = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw_length)
        except ValueError:
            return _error(400, "bad_request", "Content-Length header is not a number", "Content-Length")
        if length > limit:
            return _error(
                413,
                "payload_too_large",
                f"request body is {length} bytes; the limit is {limit} bytes",
                "body",
            )
        return self.get_response(request)


def _error(status: int, code: str, message: str, field: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, "field": field}}, status=status)
