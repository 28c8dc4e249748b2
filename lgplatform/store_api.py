"""``/lg/store/...``: the LangGraph Platform store endpoints, so ``client.store`` works unchanged.

Same routes, bodies and answers as LangGraph Server (``langgraph_api``'s store routes):
``PUT /store/items`` → 204, ``GET /store/items?namespace=a.b&key=k`` → the item or
``null``, ``DELETE /store/items`` (JSON body) → 204, ``POST /store/items/search`` →
``{"items": [...]}``, ``POST /store/namespaces`` → ``{"namespaces": [[...], ...]}``.
Handlers translate only; permission, redaction and audit are ``approvals.store``'s.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router

from approvals import store
from approvals.permissions import token_needs
from lgplatform.responses import StoreItemsOut, StoreNamespacesOut
from lgplatform.schemas import StoreDeleteIn, StoreGetQuery, StoreNamespacesIn, StorePutIn, StoreSearchIn

router = Router(tags=["store"])


def _user(request: HttpRequest) -> Any:
    return request.auth  # type: ignore[attr-defined]


@router.put("/store/items", response={204: None})
@token_needs("runtime.write_store")
def store_item_put(request: HttpRequest, body: StorePutIn) -> HttpResponse:
    store.store_item_put(
        actor=_user(request), namespace=body.namespace, key=body.key, value=body.value, index=body.index, ttl=body.ttl
    )
    return HttpResponse(status=204)


@router.get("/store/items")
def store_item_get(request: HttpRequest, query: Query[StoreGetQuery]) -> Any:
    # The SDK sends the namespace dotted (labels cannot hold dots).
    namespace = query.namespace.split(".") if query.namespace else []
    return store.store_item_get(user=_user(request), namespace=namespace, key=query.key, refresh_ttl=query.refresh_ttl)


@router.delete("/store/items", response={204: None})
@token_needs("runtime.write_store")
def store_item_delete(request: HttpRequest, body: StoreDeleteIn) -> HttpResponse:
    store.store_item_delete(actor=_user(request), namespace=body.namespace, key=body.key)
    return HttpResponse(status=204)


@router.post("/store/items/search", response=StoreItemsOut)
@token_needs("runtime.view_store")
def store_items_search(request: HttpRequest, body: StoreSearchIn) -> StoreItemsOut:
    items = store.store_items_search(
        user=_user(request),
        namespace_prefix=body.namespace_prefix,
        filter=body.filter,
        limit=body.limit,
        offset=body.offset,
        query=body.query,
        refresh_ttl=body.refresh_ttl,
    )
    return StoreItemsOut(items=items)


@router.post("/store/namespaces", response=StoreNamespacesOut)
@token_needs("runtime.view_store")
def store_namespaces_list(request: HttpRequest, body: StoreNamespacesIn) -> StoreNamespacesOut:
    namespaces = store.store_namespaces_list(
        user=_user(request),
        prefix=body.prefix,
        suffix=body.suffix,
        max_depth=body.max_depth,
        limit=body.limit,
        offset=body.offset,
    )
    return StoreNamespacesOut(namespaces=namespaces)
