"""Mounts the API: token (or session) auth, one JSON error shape for every failure."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer, django_auth

from approvals.api import router as approvals_router
from approvals.errors import DomainError, validation_error_describe
from approvals.inputs import StrictJsonParser, parse_error_of
from approvals.security import request_token_mark
from approvals.tokens import token_authenticate


class TokenAuth(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str) -> Any:
        user = token_authenticate(token)
        if user is not None:
            request_token_mark(request)  # only a token that authenticated counts as a fresh sign-in
        return user


api = NinjaAPI(
    title="Gatehouse API",
    version="1",
    description="Human-in-the-loop approvals for LangGraph agents. Authenticate with `Authorization: Bearer <token>` "
    "(`manage.py issue_token USERNAME`). Request bodies over GATEHOUSE_MAX_BODY_BYTES are refused with 413.",
    auth=[TokenAuth(), django_auth],
    urls_namespace="api",
    docs_url="/docs",
    parser=StrictJsonParser(),  # NUL bytes, non-finite or 64-bit-overflowing numbers, deep nesting: 4xx
)
api.add_router("/", approvals_router)
api.add_router("/", "approvals.webhooks_api.router")  # signed inbound webhooks, outbound subscriptions
api.add_router("/", "approvals.exports_api.router")  # streamed, verifiable audit exports
api.add_router("/", "approvals.users_api.router")  # user administration (admins)
api.add_router("/", "approvals.external_api.router")  # tasks created by other engines (Temporal, DBOS, ...)


def error_response(
    request: HttpRequest, status: int, code: str, message: str, field: str | None = None
) -> HttpResponse:
    return api.create_response(request, {"error": {"code": code, "message": message, "field": field}}, status=status)


@api.exception_handler(DomainError)
def on_domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
    return error_response(request, exc.status, exc.code, exc.message, exc.field)


@api.exception_handler(ValidationError)
def on_validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    error = validation_error_describe(exc.errors)
    return error_response(request, error.status, error.code, error.message, error.field)


@api.exception_handler(AuthenticationError)
def on_auth_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(
        request, 401, "unauthenticated", "send a valid API token: Authorization: Bearer <token>", "Authorization"
    )


@api.exception_handler(HttpError)
def on_http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    parse_error = parse_error_of(exc)
    if parse_error is not None:
        return error_response(request, parse_error.status, parse_error.code, parse_error.message, parse_error.field)
    if exc.status_code == 400 and "parse request body" in str(exc):
        return error_response(request, 400, "malformed_json", f"request body is not valid JSON: {exc}", "body")
    return error_response(request, exc.status_code, "error", str(exc))
