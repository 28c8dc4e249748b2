"""Every operation of both APIs (``/api/``, ``/lg/``) and every console route, called with malformed
input: any 5xx is reported.

    DATABASE_URL=... python -m tests.api.malformed_walk [--only SUBSTRING] [--break-drawing]

Run by tests/api/test_malformed_everywhere.py in a process of its own, on a database of its own: the
walk creates users, threads, comments and tokens with whatever input happens to be valid, which must
not leak into the test session's database. It migrates that database, makes an operator, a reviewer,
an admin and a user for the user-management operations to act on, pauses one loan thread at its
gate (executed here; nothing consumes the dispatch queue), then reads both OpenAPI documents and, for
every operation and each persona, sends malformed path parameters, and, unless the persona is refused
the operation outright (a 403), query parameters, raw bodies, and bodies with each declared field set
to values of the wrong type, size or form. Then each console route (signed in as an admin and as a
reviewer): a GET and a form POST, as a page and as htmx asks, with every field the console's forms and
views read set to one malformed value, and (as the admin, where the route serves a POST) each field
alone. The last line printed is the JSON summary: requests sent, operations and routes walked, the
operations each persona was refused,
the answers that sent a signed-in reader to the login page (none, or the walk tested nothing), the
5xx answers (or unhandled exceptions) seen, and the API refusals that were not JSON (a malformed id
answered by Django's HTML 404, a method answered by ninja's text 405).

``--break-drawing`` makes every drawing the assistant endpoint would answer raise instead, to show the
walk reports a 5xx.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import django

# Wrong types, sizes and forms for a JSON field; and for a query or path parameter.
BAD_VALUES: list[Any] = [
    None,
    -1,
    1.5,
    "x",
    "",
    [],
    {},
    True,
    "a" * 20_000,
    "\x00",
    "\U0001f600",
    10**30,
    {"a": {"b": [1, {"c": None}]}},
    "00000000-0000-0000-0000-000000000000",
    "2026-13-45",
    # Parse as date-times, but their UTC time is in the year 10000 or 0 (OverflowError on conversion).
    "9999-12-31T23:59:59-12:00",
    "0001-01-01T00:00:00+12:00",
    [None],
    [{}],
]
BAD_PARAMS = ["", "x", "-1", "99999999999999999999999", "%00", "1e309", "nan", "2026-13-45T99:99", "a" * 3000, ",,"]
BAD_PARAMS += ["9999-12-31T23:59:59-12:00", "0001-01-01T00:00:00%2B12:00", "9999-12-31"]  # out of range in UTC
BAD_PATH = ["not-a-uuid", "00000000-0000-0000-0000-000000000000", "1" * 300, "%00", "-1", "99999999999999999999"]
RAW_BODIES = [b"", b"{", b"[]", b"null", b'"s"', b"123", b"\xff\xfe", b'{"a":' * 5000]
# Every name a console form or view reads (templates' name="...", request.GET/POST in console/ and
# approvals/): a route ignores the ones it does not read.
FORM_FIELDS = (  # noqa: SIM905 - a list of names reads best as words
    "action actor all_matching answers as_node assign assigned body checkpoint checkpoint_id checks claimed "
    "clear cursor decision delegate due edits_json email ends_at first_name gates graph input_json "
    "keep_previous kind last_name meaning message metadata_json name new_password1 new_password2 next node "
    "note ns offset outcome password q reason resume roles run since sort starts_at state status thread "
    "to_group to_user until username values via viewport"
).split()
BAD_FORM = ["x", "-1", "\x00", "a" * 20_000, "99999999999999999999999", "{", "9999-12-31T23:59:59-12:00"]
# Routes a walk must not take: signing out ends the session, the relay and password links are not
# for a signed-in reader (their own tests cover them).
CONSOLE_SKIPPED = {"logout", "live-relay", "password-set"}
# Long polls: only values that are refused, so a walk never waits out a valid timeout.
WAITS = ("timeout", "wait")
REFUSED_WAITS = {"", "x", "-1", "nan", "1e309", "%00", "99999999999999999999999"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="walk only the operations whose path contains this")
    parser.add_argument("--break-drawing", action="store_true", help="make the assistant's drawing raise")
    args = parser.parse_args()
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    if args.break_drawing:
        from lgplatform import services

        drawing = services.assistant_drawing

        def broken(*args: Any, **kwargs: Any) -> Any:
            drawing(*args, **kwargs)  # what it refuses it still refuses; what it would draw fails
            raise RuntimeError("broken on purpose by --break-drawing")

        services.assistant_drawing = broken  # type: ignore[assignment]
    walk = _Walk(_personas())
    walk.ids.update(_paused_loan(walk))
    for prefix in ("/api/", "/lg/"):
        walk.api(prefix, args.only)
    if not args.only:
        walk.console()
    summary = {
        "requests": walk.sent,
        "operations": sorted(walk.walked),
        "routes": sorted(walk.routes),
        "sent_to_login": walk.sent_to_login,
        "server_errors": walk.errors,
        "not_json": walk.not_json,
        "refused": sorted(walk.refused),
    }
    print(json.dumps(summary))
    return 0


def _personas() -> dict[str, str]:
    """API tokens of an operator, a reviewer and an admin (made once per database)."""
    from django.contrib.auth import get_user_model

    from approvals.models import GraphAssignment
    from approvals.roles import roles_ensure
    from approvals.tokens import token_issue

    users = get_user_model()
    groups = roles_ensure()
    tokens = {}
    for role in ("operator", "reviewer", "admin"):
        user, made = users.objects.get_or_create(username=f"walk-{role}")
        if made:
            user.groups.add(groups[role])
            GraphAssignment.objects.create(user=user, graph="*")
        tokens[role] = token_issue(user=user, name="walk")
    return tokens


def _paused_loan(walk: _Walk) -> dict[str, str]:
    """Ids the walk's well-formed path parameters name: a loan thread paused at its gate, its task and run,
    and a user of its own for the user-management operations (never one of the walk's personas)."""
    from django.contrib.auth import get_user_model

    from runtime.executor import run_execute
    from runtime.models import Run
    from tests.conftest import loan_input

    body = {"graph": "loan_approval", "input": loan_input(), "metadata": {}}
    thread_id = walk.client.post("/api/threads", body, content_type="application/json", headers=walk.auth("operator"))
    thread = str(thread_id.json()["id"])
    run = str(Run.objects.filter(thread_id=thread).values_list("id", flat=True).get())
    run_execute(run_id=run)
    tasks = walk.client.get("/api/tasks", {"thread": thread}, headers=walk.auth("reviewer")).json()["items"]
    if not tasks:
        status = Run.objects.values_list("status", "error").get(pk=run)
        raise RuntimeError(f"the loan thread {thread} did not pause at its gate: its run {status}")
    victim, _ = get_user_model().objects.get_or_create(username="walk-subject")
    return {"thread": thread, "task": str(tasks[0]["id"]), "run": run, "user": str(victim.pk)}


class _Walk:
    def __init__(self, tokens: dict[str, str]) -> None:
        from django.test import Client

        # Unhandled exceptions become 500 answers, as the server would send them.
        self.client = Client(SERVER_NAME="127.0.0.1", raise_request_exception=False)
        self.tokens = tokens
        self.ids: dict[str, str] = {}
        self.sent = 0
        self.walked: set[str] = set()
        self.routes: set[str] = set()
        self.sent_to_login = 0
        self.errors: list[str] = []
        self.not_json: list[str] = []
        self.refused: set[str] = set()  # "role METHOD path": the operations a role was refused (403)

    def auth(self, role: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[role]}"}

    def api(self, prefix: str, only: str) -> None:
        spec = self.client.get(f"{prefix}openapi.json", headers=self.auth("admin")).json()
        for path, operations in spec["paths"].items():
            if only not in path:
                continue
            for method, operation in operations.items():
                if method in ("get", "post", "put", "patch", "delete"):
                    self.operation(spec, path, method, operation, operations)

    def operation(
        self, spec: dict[str, Any], path: str, method: str, operation: dict[str, Any], operations: dict[str, Any]
    ) -> None:
        self.walked.add(f"{method.upper()} {path}")
        params = operation.get("parameters", [])
        in_path = [p["name"] for p in params if p["in"] == "path"]
        in_query = [p["name"] for p in params if p["in"] == "query"]
        good = {name: self._good(name) for name in in_path}
        url = _filled(path, good)
        body = _body_schema(spec, operation)
        for role in ("operator", "reviewer", "admin"):
            for name in in_path:
                for bad in BAD_PATH:
                    self.send(role, method, _filled(path, {**good, name: bad}), body={})
            for other in ("get", "post", "put", "patch", "delete"):
                if other not in operations:  # a method the path does not serve: refused in the API's shape
                    self.send(role, other, url, body=None if other == "get" else {})
            # A role refused the operation itself (403 to a read without parameters, or to a body of one
            # unknown field) meets only the API's shared validation and that refusal, whatever else it
            # sends: the roles allowed the operation take the malformed queries and bodies further. Asked
            # only what the walk would send anyway or what changes nothing: not of a long poll (without its
            # parameters it could wait), nor of a write without a body (a claim, a delete: it would act).
            takes_body = body is not None and method != "get"
            waits = any(name in WAITS for name in in_query)
            asked = not waits and (takes_body or method == "get")
            probe = {"not_a_field": 1} if takes_body else None
            if asked and self.send(role, method, url, body=probe) == 403:
                self.refused.add(f"{role} {method.upper()} {path}")
                continue
            for name in in_query:
                for bad in BAD_PARAMS:
                    if name not in WAITS or bad in REFUSED_WAITS:
                        self.send(role, method, url, query={name: bad}, body=None if method == "get" else {})
            if not takes_body:
                continue
            for raw in RAW_BODIES:
                self.send(role, method, url, raw=raw)
            for name in body.get("properties", {}):
                for bad in BAD_VALUES:
                    self.send(role, method, url, body={name: bad})
            if not asked:
                self.send(role, method, url, body={"not_a_field": 1})

    def console(self) -> None:
        from django.contrib.auth import get_user_model
        from django.test import Client
        from django.urls import reverse

        from console.urls import console_patterns

        for role in ("admin", "reviewer"):
            client = Client(SERVER_NAME="127.0.0.1", raise_request_exception=False)
            client.force_login(get_user_model().objects.get(username=f"walk-{role}"))
            for pattern in console_patterns:
                if pattern.name in CONSOLE_SKIPPED:
                    continue
                self.routes.add(str(pattern.name))
                url = reverse(f"console:{pattern.name}", kwargs=self._route_ids(pattern))
                posted = set()
                for bad in BAD_FORM:
                    every = dict.fromkeys(FORM_FIELDS, bad)
                    for htmx in (False, True):  # a page, or the fragment htmx asks for
                        self.console_send(client, role, "get", url, every, htmx=htmx)
                        posted.add(self.console_send(client, role, "post", url, every, htmx=htmx))
                # Each field alone, where a POST is served: a route that refused every POST above with 405
                # refuses it before reading a field (a 413 for the oversized values is decided before the route).
                if role == "admin" and posted - {413} != {405}:
                    for field in FORM_FIELDS:
                        self.console_send(client, role, "post", url, {field: "x"})

    def console_send(
        self, client: Any, role: str, method: str, url: str, data: dict[str, str], *, htmx: bool = False
    ) -> int:
        self.sent += 1
        headers = {"HX-Request": "true", "HX-Current-URL": f"http://127.0.0.1{url}"} if htmx else {}
        response = getattr(client, method)(url, data, headers=headers)
        if response.status_code == 302 and response.get("Location", "").startswith("/accounts/login/"):
            self.sent_to_login += 1
        if response.status_code >= 500:
            kind = "htmx " if htmx else ""
            self.errors.append(f"{response.status_code} {role} console {kind}{method.upper()} {url} {str(data)[:200]}")
        return int(response.status_code)

    def _route_ids(self, pattern: Any) -> dict[str, Any]:
        ids: dict[str, Any] = {}
        for name, converter in pattern.pattern.converters.items():
            kind = type(converter).__name__
            if kind == "UUIDConverter":
                ids[name] = next(
                    (self.ids[p] for p in ("task", "thread") if p in name), "0" * 8 + "-0000-0000-0000-" + "0" * 12
                )
            elif kind == "IntConverter":
                ids[name] = int(self.ids["user"]) if "user" in name else 1
            else:
                ids[name] = "x"
        return ids

    def _good(self, name: str) -> str:
        for part in ("task", "run", "thread", "user"):
            if part in name:
                return self.ids[part]
        return "loan_approval" if "assistant" in name or name == "graph" else "1"

    def send(
        self, role: str, method: str, url: str, *, body: Any = None, raw: bytes | None = None, query: Any = None
    ) -> int:
        self.sent += 1
        query_string = "&".join(f"{k}={v}" for k, v in (query or {}).items())
        target = f"{url}?{query_string}" if query_string else url
        data = raw if raw is not None else (json.dumps(body) if body is not None else b"")
        if method == "get":
            response = self.client.get(target, headers=self.auth(role))
        else:
            call = getattr(self.client, method)
            response = call(target, data=data, content_type="application/json", headers=self.auth(role))
        sent = raw if raw is not None else body
        if response.status_code >= 500:
            self.errors.append(f"{response.status_code} {role} {method.upper()} {target[:200]} {str(sent)[:200]}")
        elif response.status_code >= 400 and not response.get("Content-Type", "").startswith("application/json"):
            self.not_json.append(f"{response.status_code} {role} {method.upper()} {target[:200]} {str(sent)[:200]}")
        return int(response.status_code)


def _filled(path: str, values: dict[str, str]) -> str:
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    return path


def _body_schema(spec: dict[str, Any], operation: dict[str, Any]) -> dict[str, Any] | None:
    content = (operation.get("requestBody") or {}).get("content") or {}
    if not content:
        return None
    schema = next(iter(content.values())).get("schema") or {}
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return dict(schema)


if __name__ == "__main__":
    sys.exit(main())
