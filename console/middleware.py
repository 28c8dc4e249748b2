"""Refuse oversized request bodies before any view or parser reads them."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
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
        if not request.META.get("CONTENT_LENGTH") and request.method in ("POST", "PUT", "PATCH", "DELETE"):
            # A chunked body announces no length: Django reads one byte past
            # the limit (DATA_UPLOAD_MAX_MEMORY_SIZE) and caches it for the view.
            try:
                length = len(request.body)
            except RequestDataTooBig:
                length = limit + 1
        if length > limit:
            return _error(
                413,
                "payload_too_large",
                f"request body is over the limit of {limit} bytes",
                "body",
            )
        return self.get_response(request)


def _error(status: int, code: str, message: str, field: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message, "field": field}}, status=status)


class ContentSecurityPolicyMiddleware:
    """Sends settings.CONTENT_SECURITY_POLICY on every response that has none."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response and not request.path.startswith(("/api/docs", "/lg/docs")):
            response["Content-Security-Policy"] = settings.CONTENT_SECURITY_POLICY
        return response
