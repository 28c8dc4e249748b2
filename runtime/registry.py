"""The graph registry: ``langgraph.json`` → compiled graphs bound to our checkpointer.

Reads the file format langgraph-cli uses::

    {"dependencies": ["."], "env": ".env",
     "graphs": {"kyc": "./graphs/kyc.py:graph",
                "loan": {"path": "./graphs/loan.py:make_graph", "description": "..."}}}

``attr`` may be a compiled graph, an uncompiled ``StateGraph`` or a factory
returning either. Graph modules are imported on first use, not when Django
starts: ``migrate`` and ``collectstatic`` never import them (a factory that
needs an API key must not break a migration). The worker and the web server
load the registry as they start (``console.celery``, ``console.asgi``), so a
broken entry still stops them with a message naming it; ``manage.py
graphs_check`` does the same on demand. An uncompiled graph is compiled once
as it loads, to see that it compiles (an edge to no node stops start-up, named);
compiling against the checkpointer happens on first use, in the process that
runs the graph, and a graph a factory builds for one run that does not compile
fails that run (``GraphRegistryError``, which the executor records).

Factories behave as on LangGraph Server: a factory that takes a config
argument is called again for every run with that run's ``RunnableConfig``
(a graph built per run); it is also called once at load with an empty config
for the graph's schema, state reads and validation. A factory without
parameters is called once.

Gatehouse's own per-graph settings live in the file's ``"gatehouse"`` section
(docs/graphs.md): ``gates``, ``sensitive_paths``, ``retention``, ``schema_versions``,
``upcasters``, ``reasons`` and ``deadlines`` (and ``store``, read by ``runtime.store``). The file's
own ``store`` section (its vector index) is read as the registry loads, so a bad one stops start-up too.

The file's shape is checked before a graph module is imported: no graph at all, a local
dependency that is not a directory, an unknown section or a value of the wrong JSON type under
``"gatehouse"`` stops start-up in one line naming the key, since each would otherwise be ignored
or misread (a misspelt ``sensitive_paths`` drops a graph's redaction). An entry that is neither a
graph nor a factory (a class, say the state ``TypedDict``) is refused by name too. Every error is
a ``GraphRegistryError``; ``registry_load`` adds the file's path to it.

A gate is a node that pauses with ``interrupt()``; which nodes do cannot be read from the graph
without running it. So a graph may declare its gates (``"gates": {graph: [node, ...]}``), and
``graph_gates`` answers "the gates of this graph" for every surface that offers or checks one:
the declared list, or else every node of the graph and of its compiled subgraphs.
"""

from __future__ import annotations

import difflib
import importlib.util
import inspect
import json
import os
import re
import sys
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.db.models import TextChoices

from runtime.controls import RuntimeControls, controls_parse
from runtime.deadlines import ALL_GATES, Deadline, DeadlineError, deadlines_parse
from runtime.store import StoreConfigError, store_config_load
from runtime.upcasters import GraphSchema, schema_build

if TYPE_CHECKING:  # imported where used: Django's start and management commands do not load LangGraph
    from langgraph.graph import StateGraph
    from langgraph.pregel import Pregel


class GraphRegistryError(ImproperlyConfigured):
    pass


# Threads of external engines' tasks (approvals.external) carry graph names under this prefix:
# no LangGraph graph, no checkpoints, never run here.
EXTERNAL_GRAPH_PREFIX = "external:"
EXTERNAL_SOURCE_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,79}$"  # docs/external-tasks.md: a source is a slug


def graph_is_external(name: str) -> bool:
    return name.startswith(EXTERNAL_GRAPH_PREFIX)


def graph_external_valid(name: str) -> bool:
    """``external:<source>`` with a source an engine may name (a user may be assigned to it)."""
    source = name.removeprefix(EXTERNAL_GRAPH_PREFIX)
    return graph_is_external(name) and re.match(EXTERNAL_SOURCE_PATTERN, source) is not None


class UnknownGraph(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class ReasonRule(TextChoices):
    REQUIRED = "required"
    OPTIONAL = "optional"


# Decisions a reason policy may name ("reasons" in langgraph.json's "gatehouse" section).
REASON_OUTCOMES = ("approve", "edit", "reject", "respond")
# What else it may name, for the graph only: a fork, a replay or a copy (time travel), which needs a reason unless
# the graph says "optional" (an unmodified langgraph-sdk client has no argument to send one).
TIME_TRAVEL = "time_travel"


@dataclass
class GraphEntry:
    name: str
    spec: str
    description: str = ""
    source: Any = None  # StateGraph | Pregel, as the author wrote it
    # State paths to mask for principals without "view sensitive" (see approvals.redaction).
    sensitive_paths: list[str] = field(default_factory=list)
    # State schema version and upcasters (runtime.upcasters; docs/schema-evolution.md).
    schema_version: int | None = None
    upcasters: dict[int, Any] = field(default_factory=dict)
    # Days after completion when a thread's intermediate checkpoints go (None: the setting's default).
    retention_days: int | None = None
    # Whether a decision needs a reason, per outcome, for the graph and per gate (node) overrides.
    # No policy: none is required, as on LangGraph Server.
    reasons: dict[str, str] = field(default_factory=dict)
    gate_reasons: dict[str, dict[str, str]] = field(default_factory=dict)
    # A factory taking a RunnableConfig: called again for every run with the run's config.
    factory: Callable[[Any], Any] | None = field(default=None, repr=False)
    # Durability mode, recursion limit and run timeout (runtime.controls; docs/runtime-controls.md).
    controls: RuntimeControls = field(default_factory=RuntimeControls)
    # Deadlines per gate ("*": the graph's default), from "gatehouse": {"deadlines": ...} (docs/deadlines.md).
    deadlines: dict[str, Deadline] = field(default_factory=dict)
    # Keys of the "gatehouse" section that upper layers own, parsed by their registered parser.
    options: dict[str, Any] = field(default_factory=dict)
    # The nodes that pause for a human, from "gatehouse": {"gates": ...}; None: not declared (see gate_names).
    declared_gates: tuple[str, ...] | None = None
    _compiled: Pregel[Any, Any, Any, Any] | None = field(default=None, repr=False)

    @property
    def builder(self) -> StateGraph[Any]:
        from langgraph.graph import StateGraph

        if isinstance(self.source, StateGraph):
            return self.source
        return self.source.builder  # type: ignore[no-any-return]

    @property
    def state_schema(self) -> type:
        return self.builder.state_schema

    @property
    def input_schema(self) -> type:
        return self.builder.input_schema

    @property
    def input_declared(self) -> bool:
        """Whether the graph declares an input schema of its own (``StateGraph(..., input_schema=...)``).

        Only then are its required keys required of a thread's input: a state schema doubling as the input
        (``total=True`` by default) names the whole working state, which no caller starts with.
        """
        return self.builder.input_schema is not self.builder.state_schema

    def node_names(self) -> list[str]:
        """The nodes of the graph and of the compiled subgraphs it runs as nodes (a task's ``node`` is the
        innermost node that interrupted)."""
        names: set[str] = set()
        seen: set[int] = set()

        def walk(builder: Any) -> None:
            if id(builder) in seen:
                return
            seen.add(id(builder))
            for name, spec in builder.nodes.items():
                if not name.startswith("__"):
                    names.add(name)
                inner = getattr(spec.runnable, "builder", None)
                if inner is not None:
                    walk(inner)

        walk(self.builder)
        return sorted(names)

    def node_missing(self, node: str, checkpoint_ns: str = "") -> str | None:
        """The node on a pause's path that this graph does not have (renamed or removed since the thread
        paused there: docs/schema-evolution.md, rule 5), or None.

        ``checkpoint_ns`` (a subgraph pause's, ``outer:<task id>|inner:<task id>``) names the nodes from the
        root down to the subgraph; ``node`` is the node that paused in it (comma-joined for a static
        breakpoint). Followed only as far as the graph shows its nodes: a subgraph that a node's own code
        builds and runs lists them nowhere, so a pause inside one is never called missing.
        """
        builder: Any = self.builder
        for name in [part.split(":", 1)[0] for part in checkpoint_ns.split("|")] if checkpoint_ns else []:
            spec = builder.nodes.get(name)
            if spec is None:
                return name
            builder = getattr(spec.runnable, "builder", None)
            if builder is None:
                return None
        return next((name for name in node.split(",") if name not in builder.nodes), None)

    def gate_names(self) -> list[str]:
        """The gates of this graph: those declared, else every node, since any node may interrupt."""
        return list(self.declared_gates) if self.declared_gates is not None else self.node_names()

    def gate_is_declared(self, node: str) -> bool:
        """Whether a pause at ``node`` is one the file expects (always, for a graph that declares none)."""
        return self.declared_gates is None or node in self.declared_gates

    def reason_required(self, *, gate: str, outcome: str) -> bool:
        rule = self.gate_reasons.get(gate, {}).get(outcome) or self.reasons.get(outcome)
        return rule == ReasonRule.REQUIRED

    @property
    def time_travel_reason_required(self) -> bool:
        """A fork, replay or copy needs a reason unless the graph's policy says ``"time_travel": "optional"``."""
        return self.reasons.get(TIME_TRAVEL, ReasonRule.REQUIRED) == ReasonRule.REQUIRED

    def compiled(self, config: Any = None) -> Pregel[Any, Any, Any, Any]:
        """The graph bound to this process's checkpointer (compiled once).

        With a run's ``config``, a factory that takes one builds the graph for
        that run, as LangGraph Server does.
        """
        if config is not None and self.factory is not None:
            return _bind_checkpointer(self.name, _factory_result(self.name, self.factory, config), self.schema())
        if self._compiled is None:
            with _compile_lock:
                if self._compiled is None:
                    self._compiled = _bind_checkpointer(self.name, self.source, self.schema())
        return self._compiled

    def schema(self) -> GraphSchema:
        try:
            state_schema: type | None = self.state_schema
        except AttributeError:
            state_schema = None
        try:
            return schema_build(self.name, state_schema, version=self.schema_version, upcasters=self.upcasters)
        except ValueError as exc:
            raise GraphRegistryError(str(exc)) from exc


# Parsers of "gatehouse" keys that upper layers own (approvals.columns registers "columns"), so a bad
# value stops start-up like any other registry error: each gets (graph name, the section) and returns
# the parsed value for ``GraphEntry.options[key]``, or raises ValueError naming the key.
GatehouseOption = Callable[[str, dict[str, Any]], Any]
gatehouse_options: dict[str, GatehouseOption] = {}


def gatehouse_option_register(key: str, parse: GatehouseOption) -> None:
    gatehouse_options[key] = parse


# What upper layers can tell about the registry as loaded, from their own data (approvals: open tasks waiting in
# a node a graph no longer has): ``graphs_check`` prints it and the worker logs it as it starts. Each returns
# its warning lines; none stops anything.
RegistryWarning = Callable[[dict[str, GraphEntry]], list[str]]
registry_warnings: list[RegistryWarning] = []


def registry_warning_register(warn: RegistryWarning) -> None:
    if warn not in registry_warnings:
        registry_warnings.append(warn)


def registry_warnings_read(entries: dict[str, GraphEntry]) -> list[str]:
    """Every registered warning about ``entries``; one that cannot read the database says so instead."""
    lines: list[str] = []
    for warn in registry_warnings:
        try:
            lines.extend(warn(entries))
        except DatabaseError as exc:  # graphs_check in a build with no database: the graphs are still checked
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            lines.append(f"the open tasks were not checked against the graphs: the database cannot be read ({reason})")
    return lines


# Graph files are imported as modules of this (virtual) package: one per graph, apart from any module of the
# project's own, and findable in sys.modules by a graph's name.
GRAPH_MODULE_PREFIX = "gatehouse_graphs."

_compile_lock = threading.Lock()
_load_lock = threading.Lock()
_registry: dict[str, GraphEntry] | None = None


def registry_load(path: str | os.PathLike[str] | None = None) -> dict[str, GraphEntry]:
    """Load (or reload) the registry from ``path`` or ``settings.GATEHOUSE_GRAPHS``.

    An error names the file, whoever prints it (``graphs_check``, the worker's start-up, the web server's).
    """
    global _registry
    config_path = Path(path or settings.GATEHOUSE_GRAPHS)
    try:
        entries = graphs_read(config_path)
        # The file's "store" section too (after the graphs: its embedding module may need their env or
        # dependencies). A bad one stopped only migrate, on a new database, then failed every run.
        store_config_load(config_path)
    except (GraphRegistryError, StoreConfigError) as exc:
        named = str(config_path) in str(exc)
        if named and isinstance(exc, GraphRegistryError):
            raise
        raise GraphRegistryError(str(exc) if named else f"{config_path}: {exc}") from exc
    _registry = entries
    return _registry


def _registry_get() -> dict[str, GraphEntry]:
    # Loaded on first use; the lock keeps concurrent first requests from importing the modules twice.
    if _registry is None:
        with _load_lock:
            if _registry is None:
                return registry_load()
    assert _registry is not None  # noqa: S101 - set by registry_load above; narrows the type
    return _registry


def registry_entries() -> dict[str, GraphEntry]:
    """The registered graphs as loaded (loaded now if nothing has yet): not compiled again."""
    return _registry_get()


def graph_get(name: str) -> GraphEntry:
    try:
        return _registry_get()[name]
    except KeyError:
        raise UnknownGraph(name) from None


def graph_is_registered(name: str) -> bool:
    """Whether this instance runs ``name`` (a thread may outlive its graph's registration)."""
    return name in _registry_get()


def graph_names() -> list[str]:
    return sorted(_registry_get())


def graph_gates(name: str) -> list[str]:
    """The gates of graph ``name`` (UnknownGraph if it is not registered): what ``"gatehouse": {"gates":
    ...}`` declares for it, else every node of it and its compiled subgraphs."""
    return graph_get(name).gate_names()


def graphs_read(config_path: Path) -> dict[str, GraphEntry]:
    from langgraph.graph import StateGraph

    if not config_path.is_file():
        raise GraphRegistryError(f"GATEHOUSE_GRAPHS: {config_path} does not exist")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        raise GraphRegistryError(f"{config_path}: invalid JSON: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("graphs"), dict):
        raise GraphRegistryError(f'{config_path}: expected an object with a "graphs" object')
    if not config["graphs"]:
        # langgraph-cli refuses it too ("No graphs found in config"); a console with no graph runs nothing.
        raise GraphRegistryError(f'{config_path} declares no graphs ("graphs" is empty)')
    base = config_path.parent.resolve()
    # Everything the file says is checked before anything is imported or put on sys.path: a typo in
    # the "gatehouse" section is named without running a single graph module.
    dependencies = _dependencies_checked(base, config.get("dependencies", []))
    env = _env_checked(config.get("env"))
    # Gatehouse's own per-graph settings sit beside langgraph-cli's keys, which the CLI ignores.
    gatehouse = _gatehouse_checked(config.get("gatehouse", {}), config["graphs"])
    _dependencies_add(dependencies)
    _env_apply(base, env)

    extra = gatehouse.get("sensitive_paths", {})
    entries: dict[str, GraphEntry] = {}
    for name, value in config["graphs"].items():
        sensitive = list(extra.get(name, []))
        if isinstance(value, str):
            spec, description = value, ""
        elif isinstance(value, dict) and isinstance(value.get("path"), str):
            spec, description = value["path"], str(value.get("description", ""))
            own = value.get("sensitive_paths", [])
            if not isinstance(own, list):
                # list("amount") would be the paths a, m, o, u, n, t: amount itself never redacted
                raise GraphRegistryError(
                    f"graph {name!r}: graphs.{name}.sensitive_paths must be a list of paths, not {_json_kind(own)}"
                )
            sensitive += own
        else:
            raise GraphRegistryError(f'graph {name!r}: expected "file.py:attr" or {{"path": ...}}')
        if not all(isinstance(p, str) and p for p in sensitive):
            raise GraphRegistryError(f"graph {name!r}: sensitive_paths must be non-empty strings")
        source, factory = _source_load(name, base, spec)
        if isinstance(source, StateGraph):
            # Compiled here once, without a checkpointer, only to see that it compiles: an edge to no node
            # (anything LangGraph's compile refuses) stops start-up naming the graph, not its first run.
            _compile_checked(name, source.compile)
        entry = GraphEntry(name, spec, description, source, sensitive, factory=factory)
        _schema_options(entry, base, gatehouse)
        entry.retention_days = _retention_days(name, gatehouse)
        entry.reasons, entry.gate_reasons = _reason_policy(name, gatehouse)
        try:
            entry.controls = controls_parse(name, gatehouse)
        except ValueError as exc:
            raise GraphRegistryError(str(exc)) from None
        entry.schema()  # a bad version/upcaster map stops start-up, naming the graph
        entry.deadlines = _deadlines(name, gatehouse)
        for key, parse in gatehouse_options.items():
            try:
                entry.options[key] = parse(name, gatehouse)
            except ValueError as exc:
                raise GraphRegistryError(str(exc)) from None
        entry.declared_gates = _declared_gates(entry, gatehouse)
        _gate_settings_declared(entry)
        entries[name] = entry
    return entries


def _deadlines(name: str, gatehouse: dict[str, Any]) -> dict[str, Deadline]:
    try:
        return deadlines_parse(name, gatehouse)
    except DeadlineError as exc:
        raise GraphRegistryError(f"graph {name!r}: {exc}") from None


def _declared_gates(entry: GraphEntry, gatehouse: dict[str, Any]) -> tuple[str, ...] | None:
    """``"gates": {graph: [node, ...]}``: distinct names of nodes of the graph or its compiled subgraphs."""
    section = gatehouse.get("gates", {})  # an object of lists of strings (_gatehouse_checked)
    if entry.name not in section:
        return None
    where = f"gatehouse.gates.{entry.name}"
    declared = section[entry.name]
    if not isinstance(declared, list) or not declared or not all(isinstance(g, str) and g for g in declared):
        raise GraphRegistryError(
            f'graph {entry.name!r}: {where} must be a non-empty list of node names, like ["human_review"]'
        )
    twice = sorted({g for g in declared if declared.count(g) > 1})
    if twice:
        raise GraphRegistryError(f"graph {entry.name!r}: {where}: {twice[0]!r} is declared twice")
    nodes = entry.node_names()
    unknown = [g for g in declared if g not in nodes]
    if unknown:
        raise GraphRegistryError(
            f"graph {entry.name!r}: {where}: {unknown[0]!r} is not a node of the graph or of its subgraphs "
            f"(nodes: {', '.join(nodes)})"
        )
    return tuple(declared)


def _gate_settings_declared(entry: GraphEntry) -> None:
    """Once a graph declares its gates, a per-gate setting for another name is a typo that would leave
    the real gate without its deadline, reason rule or columns, silently: it stops start-up."""
    if entry.declared_gates is None:
        return
    name = entry.name
    columns = entry.options.get("columns") or {}  # parsed by approvals.columns, when registered
    named = [
        *((f"reasons.{name}.gates", gate) for gate in entry.gate_reasons),
        *((f"deadlines.{name}", gate) for gate in entry.deadlines if gate != ALL_GATES),
        *((f"columns.{name}", gate) for gate in columns),
    ]
    for where, gate in named:
        if gate not in entry.declared_gates:
            raise GraphRegistryError(
                f"graph {name!r}: gatehouse.{where}.{gate}: {gate!r} is not one of the gates declared in "
                f"gatehouse.gates.{name} ({', '.join(entry.declared_gates)})"
            )


# The "gatehouse" sections keyed by graph name, with what each holds for one graph (search_metadata also
# takes "*": every graph not named). Only the JSON type is checked up front (``_gatehouse_checked``); each
# section's parser checks the values as its graph loads, naming the key.
_PER_GRAPH_SECTIONS: dict[str, tuple[type, str]] = {
    "gates": (list, 'a non-empty list of node names, like ["human_review"]'),
    "sensitive_paths": (list, "a list of paths"),
    "retention": (dict, 'an object like {"completed_after_days": 90}'),
    "reasons": (dict, 'an object like {"edit": "required"}'),
    "schema_versions": (int, "an integer >= 1"),
    "upcasters": (str, 'a "./file.py:attr"'),
    "deadlines": (dict, 'an object mapping gate names (or "*") to deadlines'),
    "runtime": (dict, 'an object like {"recursion_limit": 25}'),
    "columns": (dict, "an object mapping gate names to lists of columns"),
    "search_metadata": (list, "a list of metadata keys"),
}
# Sections not keyed by graph name: runtime.store reads "store" ({"namespaces": {...}}) itself.
_OTHER_SECTIONS = ("store",)


def _gatehouse_checked(gatehouse: Any, graphs: Collection[str]) -> dict[str, Any]:
    """The ``"gatehouse"`` section, once its shape is checked: an object of known sections, each keyed by
    registered graph names, each value of the JSON type the section takes. A misspelt section or graph
    name, or a string where a list belongs, would otherwise cost a graph its redaction, limits or
    deadlines, silently (``"sensitive_paths": {"refunds": "amount"}`` would mask the paths a, m, o, u, n, t)."""
    if not isinstance(gatehouse, dict):
        raise GraphRegistryError(
            f'gatehouse must be an object of sections, like {{"sensitive_paths": {{...}}}}, not {_json_kind(gatehouse)}'
        )
    known = sorted({*_PER_GRAPH_SECTIONS, *_OTHER_SECTIONS, *gatehouse_options})
    for key in gatehouse:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise GraphRegistryError(f"gatehouse.{key}: unknown section{hint}; the sections are {', '.join(known)}")
    for key in _OTHER_SECTIONS:
        if key in gatehouse and not isinstance(gatehouse[key], dict):
            raise GraphRegistryError(f"gatehouse.{key} must be an object, not {_json_kind(gatehouse[key])}")
    for key, (kind, what) in _PER_GRAPH_SECTIONS.items():
        if key not in gatehouse:
            continue
        section = gatehouse[key]
        if not isinstance(section, dict):
            raise GraphRegistryError(
                f'gatehouse.{key} must be an object keyed by graph name, like {{"<graph>": ...}}, '
                f"not {_json_kind(section)}"
            )
        # A setting for a graph that is not registered: a misspelt name in "runtime" meant no recursion
        # limit and no run timeout at all, silently.
        wildcard = {"*"} if key == "search_metadata" else set()
        unknown = sorted(set(section) - set(graphs) - wildcard)
        if unknown:
            registered = ", ".join(sorted(graphs)) or "none"
            raise GraphRegistryError(
                f"gatehouse.{key}.{unknown[0]}: no graph of that name is registered (graphs: {registered})"
            )
        for graph, value in section.items():
            problem = _json_type_problem(value, kind)
            if problem:
                prefix = "" if graph == "*" else f"graph {graph!r}: "
                raise GraphRegistryError(f"{prefix}gatehouse.{key}.{graph} must be {what}{problem}")
    return gatehouse


def _json_type_problem(value: Any, kind: type) -> str | None:
    """Why ``value`` is not a ``kind`` (a list: of strings), as the end of a message; None if it is."""
    is_kind = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
    if not is_kind:
        return f", not {_json_kind(value)}"
    if kind is list:
        for index, item in enumerate(value):
            if not isinstance(item, str):
                return f"; [{index}] is {_json_kind(item)}"
    return None


def _json_kind(value: Any) -> str:
    """What a JSON value is, in a message's words."""
    kinds: list[tuple[type | tuple[type, ...], str]] = [
        (bool, "true/false"),
        ((int, float), "a number"),
        (str, "a string"),
        (list, "a list"),
        (dict, "an object"),
    ]
    if value is None:
        return "null"
    return next((name for types, name in kinds if isinstance(value, types)), f"a {type(value).__name__}")


def _schema_options(entry: GraphEntry, base: Path, gatehouse: dict[str, Any]) -> None:
    """Schema version and upcasters: the graph module's ``gatehouse_schema_version`` /
    ``gatehouse_upcasters``, overridden by langgraph.json ``"gatehouse": {"schema_versions": {graph: n},
    "upcasters": {graph: "./file.py:attr"}}``."""
    module = sys.modules.get(f"{GRAPH_MODULE_PREFIX}{entry.name}")
    version = getattr(module, "gatehouse_schema_version", None)
    upcasters = getattr(module, "gatehouse_upcasters", None)
    if entry.name in gatehouse.get("schema_versions", {}):
        version = gatehouse["schema_versions"][entry.name]
    if entry.name in gatehouse.get("upcasters", {}):
        upcasters = _attr_load(entry.name, base, gatehouse["upcasters"][entry.name], "upcasters")
    if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
        raise GraphRegistryError(f"graph {entry.name!r}: schema version must be an integer >= 1, not {version!r}")
    if upcasters is not None and not isinstance(upcasters, dict):
        raise GraphRegistryError(f"graph {entry.name!r}: upcasters must be a dict {{version: function}}")
    entry.schema_version = version
    entry.upcasters = dict(upcasters or {})


def _retention_days(name: str, gatehouse: dict[str, Any]) -> int | None:
    policy = gatehouse.get("retention", {}).get(name)  # an object, if any (_gatehouse_checked)
    if policy is None:
        return None
    days = policy.get("completed_after_days")
    if not isinstance(days, int) or isinstance(days, bool) or days < 0:
        raise GraphRegistryError(f'graph {name!r}: retention needs {{"completed_after_days": <integer >= 0>}}')
    return days


def _reason_policy(name: str, gatehouse: dict[str, Any]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """``"reasons": {graph: {"edit": "required", ..., "gates": {node: {"approve": "required"}}}}``."""
    policy = gatehouse.get("reasons", {}).get(name)  # an object, if any (_gatehouse_checked)
    if policy is None:
        return {}, {}
    gates = policy.get("gates", {})
    if not isinstance(gates, dict) or not all(isinstance(rules, dict) for rules in gates.values()):
        raise GraphRegistryError(f'graph {name!r}: reasons.gates must map gate names to {{"<decision>": "required"}}')
    rules = {k: v for k, v in policy.items() if k != "gates"}
    for where, checked in [("reasons", rules)] + [(f"reasons.gates.{g}", r) for g, r in gates.items()]:
        for outcome, rule in checked.items():
            named = (*REASON_OUTCOMES, TIME_TRAVEL) if where == "reasons" else REASON_OUTCOMES
            if outcome not in named:
                raise GraphRegistryError(
                    f"graph {name!r}: {where}: unknown decision {outcome!r} (one of {', '.join(named)})"
                )
            if rule not in ReasonRule.values:
                raise GraphRegistryError(f'graph {name!r}: {where}.{outcome} must be "required" or "optional"')
    return rules, {gate: dict(r) for gate, r in gates.items()}


def _attr_load(name: str, base: Path, spec: str, what: str) -> Any:
    file_part, sep, attr = str(spec).rpartition(":")
    file_path = (base / file_part).resolve()
    if not sep or not file_path.is_file():
        raise GraphRegistryError(f"graph {name!r}: {what} {spec!r} is not an existing ./path/file.py:attr")
    return _module_attr(name, file_path, attr, module_name=f"{GRAPH_MODULE_PREFIX}{name}__{what}")


def _module_attr(name: str, file_path: Path, attr: str, *, module_name: str) -> Any:
    """Import ``file_path`` as ``module_name`` and return its ``attr``; errors name the graph."""
    module_spec = importlib.util.spec_from_file_location(module_name, file_path)
    if module_spec is None or module_spec.loader is None:
        raise GraphRegistryError(f"graph {name!r}: cannot import {file_path}")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as exc:
        raise GraphRegistryError(f"graph {name!r}: importing {file_path} failed: {exc!r}") from exc
    if not hasattr(module, attr):
        raise GraphRegistryError(f"graph {name!r}: {file_path.name} has no attribute {attr!r}")
    return getattr(module, attr)


def _dependencies_checked(base: Path, dependencies: Any) -> list[Path]:
    """The local dependencies (``"."``, ``"./pkg"``): directories, as langgraph-cli requires them ("Could not
    find local dependency"); other entries are package names, expected installed."""
    if not isinstance(dependencies, list):
        raise GraphRegistryError(
            f'dependencies must be a list of package names and ./local/directories, like ["."], '
            f"not {_json_kind(dependencies)}"
        )
    local: list[Path] = []
    for index, dep in enumerate(dependencies):
        if not isinstance(dep, str) or not dep:
            raise GraphRegistryError(
                f"dependencies[{index}] must be a package name or a ./local/directory, not {json.dumps(dep)}"
            )
        if not dep.startswith("."):
            continue
        resolved = (base / dep).resolve()
        if not resolved.is_dir():
            what = "is not a directory" if resolved.exists() else "does not exist"
            raise GraphRegistryError(f"dependencies[{index}]: local dependency {dep!r} {what} ({resolved})")
        local.append(resolved)
    return local


def _dependencies_add(local: list[Path]) -> None:
    # Local dependencies become importable, as the CLI's image build would make them.
    for path in map(str, local):
        if path not in sys.path:
            sys.path.insert(0, path)


def _env_checked(env: Any) -> str | dict[str, Any] | None:
    if env is not None and not isinstance(env, str | dict):
        raise GraphRegistryError(
            f'env must be a path to a .env file or an object like {{"MODEL": "gpt-4o"}}, not {_json_kind(env)}'
        )
    return env


def _env_apply(base: Path, env: str | dict[str, Any] | None) -> None:
    if env is None:
        return
    if isinstance(env, dict):
        items = env.items()
    else:
        env_path = base / env
        if not env_path.is_file():
            raise GraphRegistryError(f"env file {env_path} does not exist")
        items = _dotenv_parse(env_path.read_text()).items()
    for key, value in items:
        os.environ.setdefault(key, str(value))  # the real environment wins


def _dotenv_parse(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.removeprefix("export ").strip()] = value.strip().strip("'\"")
    return values


def _source_load(name: str, base: Path, spec: str) -> tuple[Any, Callable[[Any], Any] | None]:
    """(the graph as loaded, the factory to call per run if it takes a config).

    Anything that is neither a graph nor a factory is refused here, naming the entry: a class (a state
    ``TypedDict`` named by mistake is callable, and ``inspect.signature`` cannot read ``dict``'s) or a
    callable whose parameters cannot be read would otherwise fail later, outside any message of ours.
    """
    from langgraph.graph import StateGraph
    from langgraph.pregel import Pregel

    file_part, sep, attr = spec.rpartition(":")
    if not sep or not file_part or not attr:
        raise GraphRegistryError(f"graph {name!r}: {spec!r} is not of the form ./path/file.py:attr")
    file_path = (base / file_part).resolve()
    if not file_path.is_file():
        raise GraphRegistryError(f"graph {name!r}: file {file_path} does not exist")
    value = _module_attr(name, file_path, attr, module_name=f"{GRAPH_MODULE_PREFIX}{name}")
    if isinstance(value, StateGraph | Pregel):
        return _graph_checked(name, attr, value), None
    kinds = "not a StateGraph, a compiled graph or a factory"
    if inspect.isclass(value):
        raise GraphRegistryError(f"graph {name!r}: {spec} is a class, {kinds}")
    if not callable(value):
        raise GraphRegistryError(f"graph {name!r}: {spec} is {_article(type(value).__name__)}, {kinds}")
    try:
        # LangGraph Server passes a RunnableConfig to factories that take one, for every run.
        takes_config = bool(inspect.signature(value).parameters)
    except (TypeError, ValueError) as exc:
        raise GraphRegistryError(
            f"graph {name!r}: {spec} is {_article(type(value).__name__)} whose parameters cannot be read ({exc}), "
            f"{kinds}"
        ) from None
    per_run = value if takes_config else None
    return _factory_result(name, value, {"configurable": {}} if takes_config else None), per_run


def _factory_result(name: str, factory: Callable[..., Any], config: Any | None) -> Any:
    """Call a factory: with ``config`` if it takes one (``_source_load`` found out), else with nothing."""
    from langgraph.graph import StateGraph
    from langgraph.pregel import Pregel

    attr = getattr(factory, "__name__", "factory")
    try:
        value = factory() if config is None else factory(config)
    except Exception as exc:
        raise GraphRegistryError(f"graph {name!r}: factory {attr}() failed: {exc!r}") from exc
    if not isinstance(value, StateGraph | Pregel):
        raise GraphRegistryError(
            f"graph {name!r}: factory {attr}() returned {_article(type(value).__name__)}, "
            "not a StateGraph or a compiled graph"
        )
    return _graph_checked(name, attr, value)


def _graph_checked(name: str, attr: str, value: StateGraph[Any] | Pregel[Any, Any, Any, Any]) -> Any:
    from langgraph.pregel import Pregel

    if isinstance(value, Pregel) and not hasattr(value, "builder"):
        raise GraphRegistryError(f"graph {name!r}: {attr} is a compiled graph without a StateGraph builder")
    return value


def _article(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _compile_checked(name: str, build: Callable[[], Pregel[Any, Any, Any, Any]]) -> Pregel[Any, Any, Any, Any]:
    """``build()``, whatever it raises made a ``GraphRegistryError`` naming the graph, in one line: the
    executor fails the run with it (a build error of any other type left the run running and its
    thread busy), and start-up prints it."""
    try:
        return build()
    except Exception as exc:
        raise GraphRegistryError(f"graph {name!r} does not compile: {type(exc).__name__}: {_one_line(exc)}") from exc


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _bind_checkpointer(name: str, source: Any, schema: GraphSchema | None = None) -> Pregel[Any, Any, Any, Any]:
    from langgraph.graph import StateGraph

    from runtime.checkpointer import checkpointer_get

    saver = checkpointer_get()  # not the graph's fault if this fails (the database): not wrapped below
    for_graph = getattr(saver, "for_graph", None)
    if schema is not None and callable(for_graph):
        # A per-graph view of the process's saver: it stamps this graph's schema
        # version on checkpoints and upcasts older ones (runtime.upcasters).
        saver = for_graph(schema)
    if isinstance(source, StateGraph):
        return _compile_checked(name, lambda: source.compile(checkpointer=saver))

    def bind() -> Pregel[Any, Any, Any, Any]:
        # compile() extends the saver's msgpack allowlist with the graph's own schema
        # types; a graph compiled without a checkpointer kept that list aside, so
        # apply it to ours (otherwise its dataclasses/models come back as dicts).
        bound_saver = saver
        apply_allowlist = getattr(source, "_apply_checkpointer_allowlist", None)
        if callable(apply_allowlist):
            bound_saver = apply_allowlist(saver)
        bound: Pregel[Any, Any, Any, Any] = source.copy(update={"checkpointer": bound_saver})
        return bound

    return _compile_checked(name, bind)
