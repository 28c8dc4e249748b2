"""Arguments shared by the user_* commands: roles, graphs and gates, validated by approvals.users."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.core.management.base import CommandError, CommandParser

from approvals import users
from approvals.errors import DomainError


def access_arguments(parser: CommandParser, verb: str) -> None:
    roles = ", ".join(users.ASSIGNABLE_ROLES)
    parser.add_argument("--role", action="append", default=[], help=f"a role to {verb} (repeatable): {roles}")
    parser.add_argument(
        "--graph", action="append", default=[], help=f'a graph to {verb} (repeatable); "*" means every graph'
    )
    parser.add_argument(
        "--gate", action="append", default=[], help=f"a single gate to {verb}, as GRAPH:NODE (repeatable)"
    )


def gates_parse(values: list[str]) -> list[users.Assignment]:
    parsed = [users.Assignment.parse(v) for v in values]
    bad = [v for v, a in zip(values, parsed, strict=True) if not a.gate]
    if bad:
        raise CommandError(f"--gate {bad[0]!r}: give GRAPH:NODE")
    return parsed


def assignments_parse(graph: list[str], gate: list[str]) -> tuple[list[users.Assignment], list[tuple[str, str]]]:
    """The --graph and --gate assignments, in that order, and for each the option and value it came from (a
    refusal of ``assignments[i]`` names them)."""
    assignments = [users.Assignment(g.strip()) for g in graph] + gates_parse(gate)
    sources = [("--graph", g) for g in graph] + [("--gate", g) for g in gate]
    return assignments, sources


def user_find(username: str) -> Any:
    try:
        return users.user_by_username(username)
    except DomainError as exc:
        raise CommandError(exc.message) from None


_ITEM = re.compile(r"^(assignments|graphs)\[(\d+)\]")


def domain_call(
    call: Any, sources: Sequence[tuple[str, str]] = (), *, graph_sources: Sequence[tuple[str, str]] = ()
) -> Any:
    """Run a service; its refusal becomes a CommandError (exit status 1) naming the field, or the option and
    value an item's refusal is about: ``sources`` for ``assignments[i]`` (see :func:`assignments_parse`),
    ``graph_sources`` for ``graphs[i]`` (``user_revoke``'s graphs)."""
    try:
        return call()
    except DomainError as exc:
        item = _ITEM.match(exc.field or "")
        listed = (sources if item.group(1) == "assignments" else graph_sources) if item else ()
        if item and int(item.group(2)) < len(listed):
            option, value = listed[int(item.group(2))]
            raise CommandError(f"{option} {value!r}: {exc.message}") from None
        raise CommandError(f"{exc.field}: {exc.message}" if exc.field else exc.message) from None


def describe(user: Any) -> str:
    roles = ", ".join(users.user_roles(user)) or "no role"
    graphs = ", ".join(str(a) for a in users.user_assignments(user)) or "no graph"
    state = "active" if user.is_active else "deactivated"
    return f"{user.username}: {state}; roles: {roles}; graphs: {graphs}"
