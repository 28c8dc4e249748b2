"""The graph registry: ``langgraph.json`` → compiled graphs bound to our checkpointer.

Reads the file format langgraph-cli uses::

    {"dependencies": ["."], "env": ".env",
     "graphs": {"kyc": "./graphs/kyc.py:graph",
                "loan": {"path": "./graphs/loan.py:make_graph", "description": "..."}}}

``attr`` may be a compiled graph, an uncompiled ``StateGraph`` or a factory
returning either. Graph modules are imported once at start-up (so a broken
entry stops the process with a message naming it); compiling against the
checkpointer happens on first use, in the process that runs the graph.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from runtime.controls import RuntimeControls, controls_parse
from runtime.upcasters import GraphSchema, schema_build


class GraphRegistryError(ImproperlyConfigured):
    pass


# Threads of external engines' tasks (approvals.external) carry graph names under this prefix:
# no LangGraph graph, no checkpoints, never run here.
EXTERNAL_GRAPH_PREFIX = "external:"


def graph_is_external(name: str) -> bool:
    return name.startswith(EXTERNAL_GRAPH_PREFIX)


class UnknownGraph(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


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
    # Durability mode, recursion limit and run timeout (runtime.controls; docs/runtime-controls.md).
    controls: RuntimeControls = field(default_factory=RuntimeControls)
    _compiled: Pregel | None = field(default=None, repr=False)

    @property
    def builder(self) -> StateGraph[Any]:
        if isinstance(self.source, StateGraph):
            return self.source
        return self.source.builder  # type: ignore[no-any-return]

    @property
    def state_schema(self) -> type:
        return self.builder.state_schema  # type: ignore[no-any-return]

    @property
    def input_schema(self) -> type:
        return self.builder.input_schema  # type: ignore[no-any-return]

    def compiled(self) -> Pregel:
        """The graph bound to this process's checkpointer (compiled once)."""
        if self._compiled is None:
            with _compile_lock:
                if self._compiled is None:
                    self._compiled = _bind_checkpointer(self.source, self.schema())
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


_compile_lock = threading.Lock()
_registry: dict[str, GraphEntry] | None = None


def registry_load(path: str | os.PathLike[str] | None = None) -> dict[str, GraphEntry]:
    """Load (or reload) the registry from ``path`` or ``settings.GATEHOUSE_GRAPHS``."""
    global _registry
    _registry = graphs_read(Path(path or settings.GATEHOUSE_GRAPHS))
    return _registry


def graph_get(name: str) -> GraphEntry:
    registry = _registry if _registry is not None else registry_load()
    try:
        return registry[name]
    except KeyError:
        raise UnknownGraph(name) from None


def graph_names() -> list[str]:
    registry = _registry if _registry is not None else registry_load()
    return sorted(registry)


def graphs_read(config_path: Path) -> dict[str, GraphEntry]:
    if not config_path.is_file():
        raise GraphRegistryError(f"GATEHOUSE_GRAPHS: {config_path} does not exist")
    try:
        config = json.loads(config_path.read_text())
    except json.JSONDecodeError as exc:
        raise GraphRegistryError(f"{config_path}: invalid JSON: {exc}") from exc
    if not isinstance(config, dict) or not isinstance(config.get("graphs"), dict):
        raise GraphRegistryError(f'{config_path}: expected an object with a "graphs" object')
    base = config_path.parent.resolve()
    _dependencies_add(base, config.get("dependencies", []))
    _env_apply(base, config.get("env"))

    # Gatehouse's own per-graph settings sit beside langgraph-cli's keys, which the CLI ignores.
    gatehouse = config.get("gatehouse", {})
    extra = gatehouse.get("sensitive_paths", {})
    entries: dict[str, GraphEntry] = {}
    for name, value in config["graphs"].items():
        sensitive = list(extra.get(name, []))
        if isinstance(value, str):
            spec, description = value, ""
        elif isinstance(value, dict) and isinstance(value.get("path"), str):
            spec, description = value["path"], str(value.get("description", ""))
            sensitive += list(value.get("sensitive_paths", []))
        else:
            raise GraphRegistryError(f'graph {name!r}: expected "file.py:attr" or {{"path": ...}}')
        if not all(isinstance(p, str) and p for p in sensitive):
            raise GraphRegistryError(f"graph {name!r}: sensitive_paths must be non-empty strings")
        source = _source_load(name, base, spec)
        entry = GraphEntry(name, spec, description, source, sensitive)
        _schema_options(entry, base, gatehouse)
        entry.retention_days = _retention_days(name, gatehouse)
        try:
            entry.controls = controls_parse(name, gatehouse)
        except ValueError as exc:
            raise GraphRegistryError(str(exc)) from None
        entry.schema()  # a bad version/upcaster map stops start-up, naming the graph
        entries[name] = entry
    return entries


def _schema_options(entry: GraphEntry, base: Path, gatehouse: dict[str, Any]) -> None:
    """Schema version and upcasters: the graph module's ``gatehouse_schema_version`` /
    ``gatehouse_upcasters``, overridden by langgraph.json ``"gatehouse": {"schema_versions": {graph: n},
    "upcasters": {graph: "./file.py:attr"}}``."""
    module = sys.modules.get(f"gatehouse_graphs.{entry.name}")
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
    policy = gatehouse.get("retention", {}).get(name)
    if policy is None:
        return None
    days = policy.get("completed_after_days") if isinstance(policy, dict) else None
    if not isinstance(days, int) or isinstance(days, bool) or days < 0:
        raise GraphRegistryError(f'graph {name!r}: retention needs {{"completed_after_days": <integer >= 0>}}')
    return days


def _attr_load(name: str, base: Path, spec: str, what: str) -> Any:
    file_part, sep, attr = str(spec).rpartition(":")
    file_path = (base / file_part).resolve()
    if not sep or not file_path.is_file():
        raise GraphRegistryError(f"graph {name!r}: {what} {spec!r} is not an existing ./path/file.py:attr")
    return _module_attr(name, file_path, attr, module_name=f"gatehouse_graphs.{name}__{what}")


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


def _dependencies_add(base: Path, dependencies: list[str]) -> None:
    # Local dependencies ("." or "./pkg") become importable, as the CLI's
    # image build would make them; package names are expected installed.
    for dep in dependencies:
        if dep.startswith("."):
            resolved = str((base / dep).resolve())
            if resolved not in sys.path:
                sys.path.insert(0, resolved)


def _env_apply(base: Path, env: str | dict[str, str] | None) -> None:
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


def _source_load(name: str, base: Path, spec: str) -> Any:
    file_part, sep, attr = spec.rpartition(":")
    if not sep or not file_part or not attr:
        raise GraphRegistryError(f"graph {name!r}: {spec!r} is not of the form ./path/file.py:attr")
    file_path = (base / file_part).resolve()
    if not file_path.is_file():
        raise GraphRegistryError(f"graph {name!r}: file {file_path} does not exist")
    value = _module_attr(name, file_path, attr, module_name=f"gatehouse_graphs.{name}")
    if callable(value) and not isinstance(value, (StateGraph, Pregel)):
        try:
            value = _factory_call(value)
        except Exception as exc:
            raise GraphRegistryError(f"graph {name!r}: factory {attr}() failed: {exc!r}") from exc
    if isinstance(value, Pregel) and not hasattr(value, "builder"):
        raise GraphRegistryError(f"graph {name!r}: {attr} is a compiled graph without a StateGraph builder")
    if not isinstance(value, (StateGraph, Pregel)):
        raise GraphRegistryError(
            f"graph {name!r}: {attr} is a {type(value).__name__}, not a StateGraph, compiled graph or factory"
        )
    return value


def _factory_call(factory: Any) -> Any:
    # langgraph-cli passes a RunnableConfig to factories that take one.
    params = inspect.signature(factory).parameters
    return factory({"configurable": {}}) if params else factory()


def _bind_checkpointer(source: Any, schema: GraphSchema | None = None) -> Pregel:
    from runtime.checkpointer import checkpointer_get

    saver = checkpointer_get()
    for_graph = getattr(saver, "for_graph", None)
    if schema is not None and callable(for_graph):
        # A per-graph view of the process's saver: it stamps this graph's schema
        # version on checkpoints and upcasts older ones (runtime.upcasters).
        saver = for_graph(schema)
    if isinstance(source, StateGraph):
        return source.compile(checkpointer=saver)
    # compile() extends the saver's msgpack allowlist with the graph's own schema
    # types; a graph compiled without a checkpointer kept that list aside, so
    # apply it to ours (otherwise its dataclasses/models come back as dicts).
    apply_allowlist = getattr(source, "_apply_checkpointer_allowlist", None)
    if callable(apply_allowlist):
        saver = apply_allowlist(saver)
    return source.copy(update={"checkpointer": saver})
