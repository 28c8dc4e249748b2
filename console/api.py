"""Mounts the API: token (or session) auth, one JSON error shape for every failure."""

from __future__ import annotations

from approvals.api import router as approvals_router
from approvals.api_common import BearerAuth, GatehouseAPI, SessionAuthLoaded, api_errors_install, error_body_gatehouse
from approvals.inputs import StrictJsonParser

api = GatehouseAPI(
    title="Gatehouse API",
    version="1",
    description="Human-in-the-loop approvals for LangGraph agents. Authenticate with `Authorization: Bearer <token>` "
    "(`manage.py issue_token USERNAME`). Request bodies over GATEHOUSE_MAX_BODY_BYTES are refused with 413.",
    auth=[BearerAuth(mark_fresh=True), SessionAuthLoaded()],  # only a token that authenticated is a fresh sign-in
    urls_namespace="api",
    docs_url="/docs",
    parser=StrictJsonParser(),  # NUL bytes, non-finite or 64-bit-overflowing numbers, deep nesting: 4xx
)
api.add_router("/", approvals_router)
api.add_router("/", "approvals.inbound.api.router")  # signed inbound webhooks, endpoint registration
api.add_router("/", "approvals.outbound.api.router")  # outbound webhook subscriptions and deliveries
api.add_router("/", "approvals.exports.api.router")  # streamed, verifiable audit exports
api.add_router("/", "approvals.users_api.router")  # user administration (admins)
api.add_router("/", "approvals.external_api.router")  # tasks created by other engines (Temporal, DBOS, ...)
api.add_router("/", "approvals.handoffs_api.router")  # hand-offs: claims, reassign, delegate, out-of-office
api.add_router("/", "approvals.comments_api.router")  # Conversation (comments) on tasks and threads
api.add_router("/", "approvals.dashboard_api.router")  # team dashboard
api.add_router("/", "approvals.time_travel_api.router")  # time travel: fork, replay, branches, subgraph states
api.add_router("/", "approvals.bulk_api.router")  # bulk decisions (issue 14)
api.add_router("/", "approvals.run_cancel_api.router")  # cancelling a running run (interrupt / rollback)
api_errors_install(
    api,
    body=error_body_gatehouse,
    unauthenticated="send a valid API token: Authorization: Bearer <token>",
    unauthenticated_field="Authorization",
)
