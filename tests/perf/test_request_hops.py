"""An ASGI request crosses between the event loop and worker threads a handful of times, not once
per middleware: with the chain async, Django's own middleware (sessions, CSRF, auth, messages…)
sent its process_request and process_response each to a thread — about a dozen hops, ~40% of a
simple API request's CPU in daphne. ``console.middleware.SyncChainMiddleware`` keeps the chain sync.

The six left (16 without it): the chain itself, the ``request_started`` signal, the two sync
``process_view`` methods (CSRF, log context), the view, and closing the response."""

from __future__ import annotations

import asyncio

import pytest
from asgiref import sync
from django.test import AsyncClient

pytestmark = pytest.mark.usefixtures("live_db")

HOPS = 6


def _hops_of(monkeypatch, request) -> int:
    made = []
    real = sync.SyncToAsync.__init__

    def counted(self, *args, **kwargs):
        made.append(args[0] if args else kwargs.get("func"))
        real(self, *args, **kwargs)

    monkeypatch.setattr(sync.SyncToAsync, "__init__", counted)
    response = asyncio.run(request())
    assert response.status_code == 200, response.content
    return len(made)


def test_an_api_request_crosses_to_a_thread_a_few_times_not_per_middleware(operator, monkeypatch):
    client = AsyncClient()
    headers = {"Authorization": f"Bearer {operator.token}"}
    hops = _hops_of(monkeypatch, lambda: client.get("/api/graphs", headers=headers))
    assert hops <= HOPS, hops


def test_a_console_page_crosses_to_a_thread_a_few_times_not_per_middleware(reviewer, monkeypatch):
    client = AsyncClient()
    client.force_login(reviewer.user)
    hops = _hops_of(monkeypatch, lambda: client.get("/"))
    assert hops <= HOPS, hops
