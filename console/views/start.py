"""Start a thread from the console (operators and admins): a form generated from the graph's input schema."""

from __future__ import annotations

import json
from typing import Any, cast

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.shortcuts import redirect, render

from approvals import permissions, services
from approvals.errors import DomainError
from console.forms import NUL_REFUSED, nul_fields
from console.middleware import form_text_checked
from console.schema_form import INPUT_JSON_LABEL, METADATA_JSON_LABEL, json_object, start_fields, start_input_parse
from console.views.common import HtmxHttpRequest, console_login_required, domain_errors
from console.words import case_keys, metadata_label
from runtime.registry import graph_get, graph_names
from runtime.state_schema import json_schema_for


def _graphs_for(user: Any) -> list[tuple[str, str]]:
    return [(name, graph_get(name).description) for name in graph_names() if permissions.graph_visible(user, name)]


def _nul_refuse(data: Any, fields: list[Any], errors: dict[str, str]) -> None:
    """A field holding a NUL byte is an error shown where the form shows that field's (a named metadata input
    under the metadata's), before anything is parsed or started."""
    boxes = {"metadata_json": METADATA_JSON_LABEL, "input_json": INPUT_JSON_LABEL}  # named as their labels read
    shown = {f.name for f in fields} | set(boxes)
    for name in nul_fields(data):
        where = name if name in shown else "metadata" if name.startswith("meta.") else "__all__"
        label = boxes.get(name) or name.replace("\x00", "\\u0000")
        errors.setdefault(where, f"{label}: {NUL_REFUSED}")


@form_text_checked  # a NUL byte in a field: a form error next to it (nul_fields), not the API's JSON
@console_login_required
@domain_errors
def thread_start(request: HtmxHttpRequest) -> HttpResponse:
    permissions.require(request.user, "runtime.start_thread", "start threads")
    if request.method not in ("GET", "POST"):
        return HttpResponse(status=405)
    graphs = _graphs_for(request.user)
    source = request.POST if request.method == "POST" else request.GET
    # A page opens on the first graph; a post starts the graph it names, or nothing.
    if request.method == "POST":
        graph = source.get("graph", "")
    else:
        graph = source.get("graph") or (graphs[0][0] if graphs else "")
    errors: dict[str, str] = {}
    if graph not in {g for g, _ in graphs}:
        if request.method == "POST":  # never start a thread on a graph nobody chose
            errors["graph"] = f"unknown graph {graph[:100]!r}: choose one of the list"
        graph = graphs[0][0] if graphs else ""
    schema = json_schema_for(graph_get(graph).input_schema) if graph else {"properties": {}}
    fields = start_fields(schema)
    # The metadata people name and search this graph's threads by (its search_metadata), not the demo's.
    meta_keys = case_keys(graph) if graph else ()
    if request.method == "POST" and not errors:
        _nul_refuse(request.POST, fields, errors)
    if request.method == "POST" and not errors:
        graph_input = start_input_parse(fields, request.POST, errors)
        metadata = {k: request.POST.get(f"meta.{k}", "").strip() for k in meta_keys}
        metadata = {k: v for k, v in metadata.items() if v}
        metadata.update(json_object(request.POST, "metadata_json", METADATA_JSON_LABEL, errors) or {})
        if not errors:
            try:
                thread, _ = services.thread_start(
                    actor=cast(User, request.user),  # @login_required
                    graph=graph,
                    input=graph_input,
                    metadata=metadata,
                )
            except DomainError as exc:
                field = (exc.field or "").split("[")[0]
                if field.split(".")[0] == "metadata":  # the named metadata inputs and the JSON make one object
                    field = "metadata"
                known = any(f.name == field for f in fields) or field in ("graph", "metadata")
                errors[field if known else "__all__"] = exc.message
            else:
                messages.success(request, f"Thread started on {graph}")
                return redirect("console:thread", thread_id=thread.id)
    for f in fields:
        f.error = errors.get(f.name, "")
    ctx = {
        "graphs": graphs,
        "graph": graph,
        "fields": fields,
        "errors": errors,
        "data": source,
        "schema_json": json.dumps(schema, indent=2),
        "meta_fields": [(k, metadata_label(k), source.get(f"meta.{k}", "")) for k in meta_keys],
    }
    if request.htmx and request.htmx.target == "start-fields":
        return render(request, "console/partials/start_fields.html", ctx)
    return render(request, "console/start.html", ctx, status=422 if errors else 200)
