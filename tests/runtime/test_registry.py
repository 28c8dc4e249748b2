"""The graph registry: langgraph.json forms, graph kinds, and loud failures naming the graph."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from runtime import registry
from runtime.registry import GraphRegistryError, UnknownGraph, graph_get, graph_names, graphs_read, registry_load
from tests.conftest import registry_restored as registry_as_found
from tests.conftest import scaled

GRAPH_MODULE = textwrap.dedent(
    """
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph


    class State(TypedDict, total=False):
        amount: int


    def step(state: State) -> dict:
        return {"amount": state.get("amount", 0) + 1}


    def _builder() -> StateGraph:
        builder = StateGraph(State)
        builder.add_node(step)
        builder.add_edge(START, "step")
        builder.add_edge("step", END)
        return builder


    uncompiled = _builder()
    compiled = _builder().compile()
    not_a_graph = 42
    SEEN_CONFIGS = []


    def factory():
        return _builder()


    def factory_compiled():
        return _builder().compile()


    def factory_with_config(config):
        SEEN_CONFIGS.append(config)
        return _builder()


    def factory_raising():
        raise RuntimeError("the model endpoint is down")


    def factory_returning_junk():
        return "not a graph"


    no_signature = max  # a builtin whose parameters inspect cannot read


    def _edge_to_nowhere() -> StateGraph:
        builder = _builder()
        builder.add_edge("step", "nowhere")
        return builder


    not_compilable = _edge_to_nowhere()


    def factory_not_compilable():
        return _edge_to_nowhere()


    def compilable_at_load_only(config):
        # What load builds (no thread) compiles; what a run builds does not.
        return _edge_to_nowhere() if config["configurable"].get("thread_id") else _builder()
    """
)


@pytest.fixture(autouse=True)
def registry_restored() -> Iterator[None]:
    """registry_load swaps the registry (with its modules and the store's configuration), sys.path and
    os.environ: put them all back."""
    saved_path = list(sys.path)
    saved_env = dict(os.environ)
    with registry_as_found():
        yield
    sys.path[:] = saved_path
    os.environ.clear()
    os.environ.update(saved_env)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "agent.py").write_text(GRAPH_MODULE)
    return tmp_path


def config_write(project: Path, config: Any) -> Path:
    path = project / "langgraph.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return path


def registry_error(project: Path, config: Any) -> str:
    with pytest.raises(GraphRegistryError) as caught:
        graphs_read(config_write(project, config))
    return str(caught.value)


# --- the two entry forms -----------------------------------------------------------


def test_it_loads_the_string_form(project):
    entries = graphs_read(config_write(project, {"graphs": {"agent": "./graphs/agent.py:uncompiled"}}))
    assert list(entries) == ["agent"]
    assert entries["agent"].spec == "./graphs/agent.py:uncompiled"
    assert entries["agent"].description == ""
    assert isinstance(entries["agent"].source, StateGraph)


def test_it_loads_the_path_and_description_form(project):
    config = {"graphs": {"agent": {"path": "./graphs/agent.py:uncompiled", "description": "Pays invoices"}}}
    entry = graphs_read(config_write(project, config))["agent"]
    assert entry.spec == "./graphs/agent.py:uncompiled"
    assert entry.description == "Pays invoices"
    assert isinstance(entry.source, StateGraph)


# --- the kinds of attr -----------------------------------------------------------------


@pytest.mark.parametrize(
    "attr,kind",
    [
        ("compiled", Pregel),
        ("uncompiled", StateGraph),
        ("factory", StateGraph),
        ("factory_compiled", Pregel),
        ("factory_with_config", StateGraph),
    ],
)
def test_it_accepts_compiled_graphs_state_graphs_and_factories(project, attr, kind):
    entry = graphs_read(config_write(project, {"graphs": {f"g_{attr}": f"./graphs/agent.py:{attr}"}}))[f"g_{attr}"]
    assert isinstance(entry.source, kind)
    assert isinstance(entry.builder, StateGraph)
    assert set(entry.state_schema.__annotations__) == {"amount"}


def test_it_passes_a_runnable_config_to_a_factory_that_takes_one(project):
    graphs_read(config_write(project, {"graphs": {"with_config": "./graphs/agent.py:factory_with_config"}}))
    module = sys.modules["gatehouse_graphs.with_config"]
    assert module.SEEN_CONFIGS == [{"configurable": {}}]


def test_it_calls_a_factory_without_parameters_with_no_arguments(project):
    entry = graphs_read(config_write(project, {"graphs": {"plain": "./graphs/agent.py:factory"}}))["plain"]
    assert isinstance(entry.source, StateGraph)


TYPED_STATE_MODULE = textwrap.dedent(
    """
    from dataclasses import dataclass
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt


    @dataclass
    class Money:
        amount: int
        currency: str


    class State(TypedDict, total=False):
        price: Money


    def quote(state: State) -> dict:
        return {"price": Money(1250, "EUR")}


    def gate(state: State) -> dict:
        interrupt({"title": "ok?"})
        return {}


    def factory() -> StateGraph:
        builder = StateGraph(State)
        builder.add_node(quote)
        builder.add_node(gate)
        builder.add_edge(START, "quote")
        builder.add_edge("quote", "gate")
        builder.add_edge("gate", END)
        return builder


    uncompiled = factory()
    compiled = factory().compile()
    """
)


@pytest.mark.usefixtures("live_db")
@pytest.mark.parametrize("attr", ["compiled", "uncompiled", "factory"])
def test_it_binds_every_graph_kind_to_the_gatehouse_checkpointer(project, attr):
    from runtime.checkpointer import checkpointer_get

    name = f"bind_{attr}"
    entry = graphs_read(config_write(project, {"graphs": {name: f"./graphs/agent.py:{attr}"}}))[name]
    compiled = entry.compiled()
    assert isinstance(compiled, Pregel)
    assert type(compiled.checkpointer) is type(checkpointer_get())
    assert compiled.checkpointer.conn is checkpointer_get().conn  # the process's one pool
    assert entry.compiled() is compiled  # compiled once


@pytest.mark.usefixtures("live_db")
@pytest.mark.parametrize("attr", ["compiled", "uncompiled", "factory"])
def test_it_restores_the_graphs_own_state_types_from_checkpoints_under_strict_msgpack(project, attr):
    """Strict msgpack is on, with the graph's schema types allowed: a dataclass in state survives a checkpoint."""
    import uuid

    from langgraph._internal import _serde

    assert _serde.STRICT_MSGPACK_ENABLED  # console.settings turns it on
    (project / "graphs" / "typed.py").write_text(TYPED_STATE_MODULE)
    name = f"typed_{attr}"
    entry = graphs_read(config_write(project, {"graphs": {name: f"./graphs/typed.py:{attr}"}}))[name]
    graph = entry.compiled()
    config = {"configurable": {"thread_id": f"registry-test-{uuid.uuid4()}"}}
    graph.invoke({}, config)
    price = graph.get_state(config).values["price"]
    money = sys.modules[f"gatehouse_graphs.{name}"].Money
    assert isinstance(price, money), f"checkpoint gave back {price!r}"
    assert price.amount == 1250


# --- bad entries fail loudly, naming the graph and the problem ---------------------------


@pytest.mark.parametrize(
    "name,value,problem",
    [
        ("missing_file", "./graphs/nowhere.py:graph", "nowhere.py does not exist"),
        ("missing_attr", "./graphs/agent.py:nope", "has no attribute 'nope'"),
        ("not_graph", "./graphs/agent.py:not_a_graph", "is an int, not a StateGraph"),
        ("factory_junk", "./graphs/agent.py:factory_returning_junk", "returned a str, not a StateGraph"),
        ("factory_raises", "./graphs/agent.py:factory_raising", "the model endpoint is down"),
        ("no_colon", "./graphs/agent.py", "is not of the form ./path/file.py:attr"),
        ("empty_attr", "./graphs/agent.py:", "is not of the form ./path/file.py:attr"),
        ("wrong_type", 42, 'expected "file.py:attr"'),
        ("path_missing", {"description": "no path"}, 'expected "file.py:attr"'),
    ],
)
def test_it_refuses_a_bad_entry_naming_the_graph_and_the_problem(project, name, value, problem):
    message = registry_error(project, {"graphs": {name: value}})
    assert f"graph {name!r}" in message
    assert problem in message


def test_it_refuses_a_graph_module_that_fails_to_import_naming_the_graph(project):
    (project / "graphs" / "broken.py").write_text("import no_such_module_anywhere\n")
    message = registry_error(project, {"graphs": {"broken": "./graphs/broken.py:graph"}})
    assert "graph 'broken'" in message
    assert "no_such_module_anywhere" in message


def test_it_names_the_bad_graph_among_good_ones(project):
    config = {"graphs": {"good": "./graphs/agent.py:compiled", "bad": "./graphs/agent.py:missing"}}
    message = registry_error(project, config)
    assert "graph 'bad'" in message
    assert "good" not in message


@pytest.mark.parametrize(
    "attr,problem",
    [
        ("State", "is a class, not a StateGraph, a compiled graph or a factory"),  # a TypedDict: callable
        ("StateGraph", "is a class, not a StateGraph, a compiled graph or a factory"),
        ("no_signature", "is a builtin_function_or_method whose parameters cannot be read"),
    ],
)
def test_it_refuses_a_class_or_a_callable_it_cannot_read_naming_the_entry(project, attr, problem):
    """A state TypedDict named by mistake got as far as ``inspect.signature(dict)``: a ValueError traceback
    from graphs_check, and a worker that started "ready" to fail every run it claimed."""
    message = registry_error(project, {"graphs": {"plain": {"path": f"./graphs/agent.py:{attr}"}}})
    assert message.startswith(f"graph 'plain': ./graphs/agent.py:{attr} {problem}")


def test_graphs_check_says_what_is_wrong_in_one_line_naming_the_file(project, settings):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    path = config_write(project, {"graphs": {"plain": {"path": "./graphs/agent.py:State"}}})
    settings.GATEHOUSE_GRAPHS = str(path)
    with pytest.raises(CommandError) as caught:
        call_command("graphs_check")
    assert str(caught.value) == (
        f"{path}: graph 'plain': ./graphs/agent.py:State is a class, not a StateGraph, a compiled graph or a factory"
    )


def test_a_file_that_declares_no_graphs_is_refused(project):
    """langgraph-cli refuses it too; Gatehouse started with nothing to run, and said nothing."""
    message = registry_error(project, {"dependencies": ["."], "graphs": {}})
    assert message == f'{project / "langgraph.json"} declares no graphs ("graphs" is empty)'


@pytest.mark.parametrize(
    "config,problem",
    [
        ('{"graphs": {"a": ', "invalid JSON"),
        ("[]", 'expected an object with a "graphs" object'),
        ({"dependencies": ["."]}, 'expected an object with a "graphs" object'),
        ({"graphs": ["./graphs/agent.py:compiled"]}, 'expected an object with a "graphs" object'),
    ],
)
def test_it_refuses_a_malformed_config_file_naming_it(project, config, problem):
    message = registry_error(project, config)
    assert problem in message
    assert "langgraph.json" in message


def test_it_refuses_a_config_file_that_does_not_exist(tmp_path):
    with pytest.raises(GraphRegistryError, match="does not exist"):
        graphs_read(tmp_path / "langgraph.json")


def test_it_refuses_an_env_file_that_does_not_exist(project):
    message = registry_error(project, {"env": ".env.missing", "graphs": {"agent": "./graphs/agent.py:compiled"}})
    assert ".env.missing" in message


def test_a_registry_error_is_an_improperly_configured_error():
    from django.core.exceptions import ImproperlyConfigured

    assert issubclass(GraphRegistryError, ImproperlyConfigured)


# --- env and dependencies --------------------------------------------------------------


def test_it_applies_an_env_dict(project, monkeypatch):
    monkeypatch.delenv("GH_TEST_REGISTRY_A", raising=False)
    config = {"env": {"GH_TEST_REGISTRY_A": "from-json"}, "graphs": {"agent": "./graphs/agent.py:compiled"}}
    graphs_read(config_write(project, config))
    assert os.environ["GH_TEST_REGISTRY_A"] == "from-json"


def test_it_applies_an_env_file(project, monkeypatch):
    for key in ("GH_TEST_REGISTRY_B", "GH_TEST_REGISTRY_C", "GH_TEST_REGISTRY_D"):
        monkeypatch.delenv(key, raising=False)
    (project / ".env").write_text(
        "# a comment\n\nGH_TEST_REGISTRY_B=plain\nexport GH_TEST_REGISTRY_C='quoted value'\n"
        'GH_TEST_REGISTRY_D="a=b"\nnot a pair\n'
    )
    graphs_read(config_write(project, {"env": ".env", "graphs": {"agent": "./graphs/agent.py:compiled"}}))
    assert os.environ["GH_TEST_REGISTRY_B"] == "plain"
    assert os.environ["GH_TEST_REGISTRY_C"] == "quoted value"
    assert os.environ["GH_TEST_REGISTRY_D"] == "a=b"


@pytest.mark.parametrize("form", ["dict", "file"])
def test_it_does_not_override_the_existing_environment(project, monkeypatch, form):
    monkeypatch.setenv("GH_TEST_REGISTRY_E", "from-process")
    if form == "dict":
        env: Any = {"GH_TEST_REGISTRY_E": "from-config"}
    else:
        (project / ".env").write_text("GH_TEST_REGISTRY_E=from-config\n")
        env = ".env"
    graphs_read(config_write(project, {"env": env, "graphs": {"agent": "./graphs/agent.py:compiled"}}))
    assert os.environ["GH_TEST_REGISTRY_E"] == "from-process"


def test_the_env_is_applied_before_graph_modules_are_imported(project, monkeypatch):
    monkeypatch.delenv("GH_TEST_REGISTRY_F", raising=False)
    (project / "graphs" / "needs_env.py").write_text(
        "import os\nfrom langgraph.graph import StateGraph\nfrom typing import TypedDict\n"
        "class S(TypedDict):\n    x: int\n"
        "MODEL = os.environ['GH_TEST_REGISTRY_F']\ngraph = StateGraph(S)\n"
        "graph.add_node('step', lambda state: {})\ngraph.set_entry_point('step')\n"
    )
    config = {"env": {"GH_TEST_REGISTRY_F": "gpt"}, "graphs": {"needs_env": "./graphs/needs_env.py:graph"}}
    graphs_read(config_write(project, config))
    assert sys.modules["gatehouse_graphs.needs_env"].MODEL == "gpt"


def test_it_puts_local_dependencies_on_sys_path(project):
    (project / "libs").mkdir()
    (project / "libs" / "gh_test_helper_pkg.py").write_text("VALUE = 'helper'\n")
    (project / "graphs" / "uses_dep.py").write_text(
        "import gh_test_helper_pkg\nHELPER = gh_test_helper_pkg.VALUE\n" + GRAPH_MODULE
    )
    config = {
        "dependencies": ["./libs", "some-installed-package"],
        "graphs": {"uses_dep": "./graphs/uses_dep.py:compiled"},
    }
    graphs_read(config_write(project, config))
    assert str((project / "libs").resolve()) in sys.path
    assert sys.modules["gatehouse_graphs.uses_dep"].HELPER == "helper"
    assert "some-installed-package" not in sys.path
    sys.modules.pop("gh_test_helper_pkg", None)


@pytest.mark.parametrize(
    "dependencies,message",
    [
        (["../nope"], "dependencies[0]: local dependency '../nope' does not exist ("),
        ([".", "./graphs/agent.py"], "dependencies[1]: local dependency './graphs/agent.py' is not a directory ("),
        (".", 'dependencies must be a list of package names and ./local/directories, like ["."], not a string'),
        ([7], "dependencies[0] must be a package name or a ./local/directory, not 7"),
    ],
)
def test_a_bad_dependency_is_refused_naming_it(project, dependencies, message):
    """As langgraph-cli refuses a local dependency that is not a directory ("Could not find local dependency")."""
    path_before = list(sys.path)
    config = {"dependencies": dependencies, "graphs": {"agent": "./graphs/agent.py:compiled"}}
    assert registry_error(project, config).startswith(message)
    assert sys.path == path_before  # checked before anything is put on sys.path


def test_an_env_that_is_neither_a_file_nor_an_object_is_refused(project):
    message = registry_error(project, {"env": ["MODEL=gpt"], "graphs": {"agent": "./graphs/agent.py:compiled"}})
    assert message == 'env must be a path to a .env file or an object like {"MODEL": "gpt-4o"}, not a list'


def test_it_adds_a_dependency_to_sys_path_only_once(project):
    config = {"dependencies": ["."], "graphs": {"agent": "./graphs/agent.py:compiled"}}
    graphs_read(config_write(project, config))
    graphs_read(config_write(project, config))
    assert sys.path.count(str(project.resolve())) == 1


# --- the module-level registry ----------------------------------------------------------


def test_registry_load_replaces_the_registry(project):
    registry_load(config_write(project, {"graphs": {"only_this": "./graphs/agent.py:compiled"}}))
    assert graph_names() == ["only_this"]
    assert graph_get("only_this").name == "only_this"


def test_graph_get_refuses_an_unknown_graph(project):
    registry_load(config_write(project, {"graphs": {"only_this": "./graphs/agent.py:compiled"}}))
    with pytest.raises(UnknownGraph) as caught:
        graph_get("kyc_onboarding")
    assert caught.value.name == "kyc_onboarding"


def test_the_default_registry_is_the_configured_file():
    from django.conf import settings

    assert Path(settings.GATEHOUSE_GRAPHS).name == "langgraph.json"
    registry_load()
    assert {"kyc_onboarding", "loan_approval"} <= set(graph_names())
    assert registry._registry is not None


# --- a graph that does not compile -------------------------------------------------------

NOT_COMPILABLE = "does not compile: ValueError: Found edge ending at unknown node `nowhere`"


@pytest.mark.parametrize("attr", ["not_compilable", "factory_not_compilable"])
def test_a_graph_that_does_not_compile_is_refused_as_it_loads_naming_it_and_the_error(project, attr):
    message = registry_error(project, {"graphs": {"broken": f"./graphs/agent.py:{attr}"}})
    assert message == f"graph 'broken' {NOT_COMPILABLE}"


def test_graphs_check_refuses_a_graph_that_does_not_compile_in_one_line(project, settings):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    config = {"graphs": {"good": "./graphs/agent.py:uncompiled", "broken": "./graphs/agent.py:not_compilable"}}
    path = config_write(project, config)
    settings.GATEHOUSE_GRAPHS = str(path)
    with pytest.raises(CommandError) as caught:
        call_command("graphs_check")
    assert str(caught.value) == f"{path}: graph 'broken' {NOT_COMPILABLE}"


def test_a_graph_built_for_a_run_that_does_not_compile_is_a_registry_error_naming_it(project):
    config = {"graphs": {"picky": "./graphs/agent.py:compilable_at_load_only"}}
    entry = graphs_read(config_write(project, config))["picky"]
    with pytest.raises(GraphRegistryError) as caught:
        entry.compiled({"configurable": {"thread_id": "t-1"}})
    assert str(caught.value) == f"graph 'picky' {NOT_COMPILABLE}"


# --- the file's "store" section: read as the registry loads ---------------------------------


def test_graphs_check_refuses_a_bad_store_section_in_one_line_naming_the_file_and_the_key(project, settings):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    store = {"index": {"embed": "./nope.py:embed", "dims": 8}}
    path = config_write(project, {"graphs": {"agent": "./graphs/agent.py:compiled"}, "store": store})
    settings.GATEHOUSE_GRAPHS = str(path)
    with pytest.raises(CommandError) as caught:
        call_command("graphs_check")
    assert str(caught.value) == f'{path}: "store.index.embed": {project / "nope.py"} does not exist'


def test_the_embedding_module_is_imported_once_by_the_registry_and_the_store(project, settings):
    from runtime.store import store_config

    imports = project / "imports.log"
    (project / "embed.py").write_text(
        f"open({str(imports)!r}, 'a').write('imported\\n')\n\n\n"
        "def embed(texts):\n    return [[1.0] * 8 for _ in texts]\n"
    )
    store = {"index": {"embed": "./embed.py:embed", "dims": 8}}
    settings.GATEHOUSE_GRAPHS = str(
        config_write(project, {"graphs": {"agent": "./graphs/agent.py:compiled"}, "store": store})
    )
    registry_load()
    index = store_config().index
    assert index is not None and index["embed"](["a"]) == [[1.0] * 8]
    assert imports.read_text() == "imported\n"


# --- factories per run, as LangGraph Server calls them ------------------------------------


def test_a_factory_that_takes_a_config_is_called_again_for_each_run_with_its_config(project):
    entry = graphs_read(config_write(project, {"graphs": {"per_run": "./graphs/agent.py:factory_with_config"}}))[
        "per_run"
    ]
    module = sys.modules["gatehouse_graphs.per_run"]
    assert module.SEEN_CONFIGS == [{"configurable": {}}]  # once at load: schema, state reads
    run_config = {"configurable": {"thread_id": "t-1", "gatehouse_run_id": "r-1"}}
    first, second = entry.compiled(run_config), entry.compiled(run_config)
    assert module.SEEN_CONFIGS[1:] == [run_config, run_config]
    assert first is not second and first.checkpointer is not None
    assert entry.compiled() is entry.compiled()  # without a run config: the one built at load
    assert len(module.SEEN_CONFIGS) == 3


def test_a_factory_without_parameters_is_called_once(project):
    entry = graphs_read(config_write(project, {"graphs": {"plain": "./graphs/agent.py:factory"}}))["plain"]
    assert entry.factory is None
    assert entry.compiled({"configurable": {"thread_id": "t"}}) is entry.compiled()


def test_a_factory_failing_for_a_run_names_the_graph(project):
    module_text = GRAPH_MODULE + textwrap.dedent(
        """
        def picky(config):
            if config["configurable"].get("thread_id") == "bad":
                raise RuntimeError("no model for this tenant")
            return _builder()
        """
    )
    (project / "graphs" / "agent.py").write_text(module_text)
    entry = graphs_read(config_write(project, {"graphs": {"picky": "./graphs/agent.py:picky"}}))["picky"]
    with pytest.raises(
        GraphRegistryError, match=r"graph 'picky': factory picky\(\) failed: .*no model for this tenant"
    ):
        entry.compiled({"configurable": {"thread_id": "bad"}})


# --- the "gatehouse" section's shape: checked before any graph module is imported ------------

AGENT = {"agent": "./graphs/agent.py:compiled"}
SECTIONS = (
    "columns, deadlines, gates, reasons, retention, runtime, schema_versions, search_metadata, sensitive_paths, "
    "store, upcasters"
)


@pytest.mark.parametrize(
    "section,hint",
    [("sensitive_pths", " (did you mean 'sensitive_paths'?)"), ("gatse", " (did you mean 'gates'?)"), ("acl", "")],
)
def test_an_unknown_section_is_refused_naming_it_and_the_sections_there_are(project, section, hint):
    """A misspelt "sensitive_pths" was ignored: the graph lost its redaction, and start-up said nothing."""
    message = registry_error(project, {"graphs": AGENT, "gatehouse": {section: {"agent": ["amount"]}}})
    assert message == f"gatehouse.{section}: unknown section{hint}; the sections are {SECTIONS}"


@pytest.mark.parametrize(
    "gatehouse,message",
    [
        ([], 'gatehouse must be an object of sections, like {"sensitive_paths": {...}}, not a list'),
        (None, 'gatehouse must be an object of sections, like {"sensitive_paths": {...}}, not null'),
        ({"sensitive_paths": ["amount"]}, "gatehouse.sensitive_paths must be an object keyed by graph name"),
        ({"retention": ["agent"]}, "gatehouse.retention must be an object keyed by graph name"),
        ({"reasons": "agent"}, "gatehouse.reasons must be an object keyed by graph name"),
        ({"schema_versions": "agent"}, "gatehouse.schema_versions must be an object keyed by graph name"),
        ({"upcasters": ["agent"]}, "gatehouse.upcasters must be an object keyed by graph name"),
        ({"store": ["applicants"]}, "gatehouse.store must be an object, not a list"),
    ],
)
def test_a_section_that_is_not_an_object_is_refused_naming_it(project, gatehouse, message):
    """``"sensitive_paths": ["amount"]`` was an AttributeError traceback ('list' object has no attribute 'get')."""
    assert registry_error(project, {"graphs": AGENT, "gatehouse": gatehouse}).startswith(message)


@pytest.mark.parametrize(
    "section,value,expected",
    [
        # list("amount"): the paths a, m, o, u, n, t were masked, and amount itself was not
        ("sensitive_paths", "amount", "a list of paths, not a string"),
        ("sensitive_paths", ["amount", 7], "a list of paths; [1] is a number"),
        ("gates", {"step": True}, 'a non-empty list of node names, like ["human_review"], not an object'),
        ("retention", 30, 'an object like {"completed_after_days": 90}, not a number'),
        ("reasons", ["edit"], 'an object like {"edit": "required"}, not a list'),
        ("deadlines", "4h", 'an object mapping gate names (or "*") to deadlines, not a string'),
        ("runtime", None, 'an object like {"recursion_limit": 25}, not null'),
        ("columns", [], "an object mapping gate names to lists of columns, not a list"),
        ("schema_versions", "2", "an integer >= 1, not a string"),
        ("schema_versions", True, "an integer >= 1, not true/false"),
        ("upcasters", ["./u.py:up"], 'a "./file.py:attr", not a list'),
        ("search_metadata", "case", "a list of metadata keys, not a string"),
    ],
)
def test_a_graphs_setting_of_the_wrong_json_type_is_refused_naming_the_key(project, section, value, expected):
    message = registry_error(project, {"graphs": AGENT, "gatehouse": {section: {"agent": value}}})
    assert message == f"graph 'agent': gatehouse.{section}.agent must be {expected}"


def test_a_setting_for_every_graph_of_the_wrong_json_type_is_refused_naming_the_key(project):
    message = registry_error(project, {"graphs": AGENT, "gatehouse": {"search_metadata": {"*": "case"}}})
    assert message == "gatehouse.search_metadata.* must be a list of metadata keys, not a string"


def test_sensitive_paths_in_a_graphs_own_entry_must_be_a_list(project):
    config = {"graphs": {"agent": {"path": "./graphs/agent.py:compiled", "sensitive_paths": "amount"}}}
    assert registry_error(project, config) == (
        "graph 'agent': graphs.agent.sensitive_paths must be a list of paths, not a string"
    )


def test_sensitive_paths_from_both_places_are_the_graphs(project):
    config = {
        "graphs": {"agent": {"path": "./graphs/agent.py:compiled", "sensitive_paths": ["iban"]}},
        "gatehouse": {"sensitive_paths": {"agent": ["amount"]}},
    }
    assert graphs_read(config_write(project, config))["agent"].sensitive_paths == ["amount", "iban"]


def test_the_section_is_checked_before_any_graph_module_is_imported(project):
    (project / "graphs" / "never_imported.py").write_text("raise RuntimeError('should not be imported')\n")
    config = {"graphs": {"never_imported": "./graphs/never_imported.py:graph"}, "gatehouse": {"sensitive_pths": {}}}
    assert registry_error(project, config).startswith("gatehouse.sensitive_pths: unknown section")
    assert "gatehouse_graphs.never_imported" not in sys.modules


# --- the reason policy ("gatehouse": {"reasons": ...}) --------------------------------------


def test_a_graph_without_a_reason_policy_requires_no_reason(project):
    entry = graphs_read(config_write(project, {"graphs": {"agent": "./graphs/agent.py:compiled"}}))["agent"]
    for outcome in ("approve", "edit", "reject", "respond"):
        assert not entry.reason_required(gate="step", outcome=outcome)


def test_the_reason_policy_is_per_graph_with_per_gate_overrides(project):
    config = {
        "graphs": {"agent": "./graphs/agent.py:compiled", "other": "./graphs/agent.py:uncompiled"},
        "gatehouse": {
            "reasons": {
                "agent": {
                    "edit": "required",
                    "reject": "required",
                    "approve": "optional",
                    "gates": {"payout": {"approve": "required", "reject": "optional"}},
                }
            }
        },
    }
    entries = graphs_read(config_write(project, config))
    agent = entries["agent"]
    assert agent.reason_required(gate="step", outcome="edit")
    assert agent.reason_required(gate="step", outcome="reject")
    assert not agent.reason_required(gate="step", outcome="approve")
    assert agent.reason_required(gate="payout", outcome="approve")  # the gate's override
    assert not agent.reason_required(gate="payout", outcome="reject")
    assert agent.reason_required(gate="payout", outcome="edit")  # not overridden: the graph's rule
    assert not entries["other"].reason_required(gate="step", outcome="edit")


@pytest.mark.parametrize(
    "policy,message",
    [
        ("required", "graph 'agent': gatehouse.reasons.agent must be an object"),
        ({"edit": "always"}, 'graph \'agent\': reasons.edit must be "required" or "optional"'),
        ({"cancel": "required"}, "graph 'agent': reasons: unknown decision 'cancel'"),
        ({"gates": ["payout"]}, "graph 'agent': reasons.gates must map gate names"),
        ({"gates": {"payout": {"approve": True}}}, "graph 'agent': reasons.gates.payout.approve must be"),
    ],
)
def test_a_bad_reason_policy_stops_loading_naming_the_graph(project, policy, message):
    config = {"graphs": {"agent": "./graphs/agent.py:compiled"}, "gatehouse": {"reasons": {"agent": policy}}}
    assert message in registry_error(project, config)


def test_the_demo_graphs_declare_a_strict_reason_policy():
    from django.conf import settings

    demo = graphs_read(Path(settings.BASE_DIR) / "demo" / "langgraph.json")
    for name in ("loan_approval", "kyc_onboarding"):
        assert demo[name].reason_required(gate="any", outcome="edit")
        assert demo[name].reason_required(gate="any", outcome="reject")
        assert not demo[name].reason_required(gate="any", outcome="approve")


# --- declared gates ("gatehouse": {"gates": ...}) -------------------------------------------

NESTED_MODULE = textwrap.dedent(
    """
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt


    class State(TypedDict, total=False):
        ok: bool


    def prepare(state: State) -> dict:
        return {}


    def sign_off(state: State) -> dict:
        return {"ok": bool(interrupt({"title": "Sign off?"}))}


    inner = StateGraph(State)
    inner.add_node(sign_off)
    inner.add_edge(START, "sign_off")
    inner.add_edge("sign_off", END)

    outer = StateGraph(State)
    outer.add_node(prepare)
    outer.add_node("child", inner.compile())
    outer.add_edge(START, "prepare")
    outer.add_edge("prepare", "child")
    outer.add_edge("child", END)
    graph = outer.compile()
    """
)


@pytest.fixture
def nested(project: Path) -> Path:
    (project / "graphs" / "nested.py").write_text(NESTED_MODULE)
    return project


def gates_config(gates: Any, **gatehouse: Any) -> dict[str, Any]:
    return {"graphs": {"nested": "./graphs/nested.py:graph"}, "gatehouse": {"gates": {"nested": gates}, **gatehouse}}


def test_declared_gates_are_the_graphs_gates_and_may_be_nodes_of_a_subgraph(nested):
    registry_load(config_write(nested, gates_config(["sign_off"])))
    assert graph_get("nested").declared_gates == ("sign_off",)
    assert registry.graph_gates("nested") == ["sign_off"]
    assert graph_get("nested").gate_is_declared("sign_off")
    assert not graph_get("nested").gate_is_declared("prepare")


def test_without_a_declaration_every_node_and_subgraph_node_is_a_gate(nested):
    registry_load(config_write(nested, {"graphs": {"nested": "./graphs/nested.py:graph"}}))
    assert graph_get("nested").declared_gates is None
    assert registry.graph_gates("nested") == ["child", "prepare", "sign_off"]
    assert graph_get("nested").gate_is_declared("prepare")  # nothing declared: every pause is expected


@pytest.mark.parametrize(
    "gates,message",
    [
        (["sign_of"], "gatehouse.gates.nested: 'sign_of' is not a node of the graph or of its subgraphs"),
        ([], "gatehouse.gates.nested must be a non-empty list of node names"),
        ("sign_off", "gatehouse.gates.nested must be a non-empty list of node names"),
        (None, "gatehouse.gates.nested must be a non-empty list of node names"),
        (["sign_off", ""], "gatehouse.gates.nested must be a non-empty list of node names"),
        (["sign_off", "sign_off"], "gatehouse.gates.nested: 'sign_off' is declared twice"),
    ],
)
def test_a_bad_gate_declaration_stops_loading_naming_the_key_and_the_name(nested, gates, message):
    error = registry_error(nested, gates_config(gates))
    assert error.startswith("graph 'nested': ") and message in error


def test_an_unknown_node_is_named_with_the_nodes_there_are(nested):
    error = registry_error(nested, gates_config(["human_review"]))
    assert "'human_review' is not a node" in error and "(nodes: child, prepare, sign_off)" in error


def test_gates_for_a_graph_that_is_not_registered_stop_loading(nested):
    config = gates_config(["sign_off"])
    config["gatehouse"]["gates"]["nestd"] = ["sign_off"]
    assert "gatehouse.gates.nestd: no graph of that name is registered (graphs: nested)" in registry_error(
        nested, config
    )


@pytest.mark.parametrize(
    "setting,where",
    [
        ({"deadlines": {"nested": {"prepare": {"due": "4h"}}}}, "gatehouse.deadlines.nested.prepare"),
        (
            {"reasons": {"nested": {"gates": {"prepare": {"approve": "required"}}}}},
            "gatehouse.reasons.nested.gates.prepare",
        ),
        ({"columns": {"nested": {"prepare": [{"key": "ok", "path": "/ok"}]}}}, "gatehouse.columns.nested.prepare"),
    ],
)
def test_a_per_gate_setting_for_an_undeclared_gate_stops_loading(nested, setting, where):
    error = registry_error(nested, gates_config(["sign_off"], **setting))
    assert f"{where}: 'prepare' is not one of the gates declared in gatehouse.gates.nested (sign_off)" in error


def test_per_gate_settings_for_declared_gates_and_the_default_load(nested):
    settings_ = {
        "deadlines": {"nested": {"sign_off": {"due": "4h"}, "*": {"due": "2d"}}},
        "reasons": {"nested": {"gates": {"sign_off": {"approve": "required"}}}},
        "columns": {"nested": {"sign_off": [{"key": "ok", "path": "/ok"}]}},
    }
    entry = graphs_read(config_write(nested, gates_config(["sign_off"], **settings_)))["nested"]
    assert set(entry.deadlines) == {"sign_off", "*"} and set(entry.options["columns"]) == {"sign_off"}


def test_without_a_declaration_per_gate_settings_may_name_any_gate(nested):
    config = {
        "graphs": {"nested": "./graphs/nested.py:graph"},
        "gatehouse": {"deadlines": {"nested": {"not_a_node": {"due": "4h"}}}},
    }
    assert "not_a_node" in graphs_read(config_write(nested, config))["nested"].deadlines


def test_the_demo_graphs_declare_the_nodes_that_interrupt():
    from django.conf import settings

    demo = graphs_read(Path(settings.BASE_DIR) / "demo" / "langgraph.json")
    assert demo["loan_approval"].gate_names() == ["human_review"]
    assert demo["kyc_onboarding"].gate_names() == ["identity_check", "compliance_review"]


# --- loading on first use ------------------------------------------------------------------


@pytest.mark.slow
def test_django_start_up_imports_no_graph_module():
    """``migrate`` and ``collectstatic`` set Django up, and nothing more: the registry waits for first use."""
    import subprocess

    code = "import django, sys; django.setup(); print(any(m.startswith('gatehouse_graphs.') for m in sys.modules))"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=scaled(120),
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


# --- a pause's node, as the graph has it now --------------------------------------------------------


def _node_graph() -> registry.GraphEntry:
    """``prepare``; ``child``, a compiled subgraph with ``sign_off``; ``runner``, whose code runs a subgraph."""
    from langgraph.graph import END, START

    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {}

    inner = StateGraph(dict)
    inner.add_node("sign_off", step)
    inner.add_edge(START, "sign_off")
    inner.add_edge("sign_off", END)
    compiled_inner = inner.compile()
    outer = StateGraph(dict)
    outer.add_node("prepare", step)
    outer.add_node("child", compiled_inner)
    outer.add_node("runner", lambda state: compiled_inner.invoke(state))
    outer.add_edge(START, "prepare")
    return registry.GraphEntry("renamed", "./graph.py:graph", source=outer)


@pytest.mark.parametrize(
    "node,namespace,missing",
    [
        ("prepare", "", None),
        ("finance_review", "", "finance_review"),  # renamed or removed since the pause
        ("sign_off", "child:4f6b", None),
        ("sign_of", "child:4f6b", "sign_of"),
        ("sign_off", "kid:4f6b", "kid"),  # the subgraph's node in the parent is the one gone
        ("prepare,child", "", None),  # a static breakpoint before two nodes
        ("prepare,gone", "", "gone"),
        ("anything", "runner:4f6b", None),  # a subgraph its code runs: its nodes are listed nowhere
    ],
)
def test_the_node_a_pause_waits_in_is_missing_only_when_the_graph_shows_it_is(node, namespace, missing):
    assert _node_graph().node_missing(node, namespace) == missing


def test_a_registry_warning_that_cannot_read_the_database_says_so_and_stops_nothing(monkeypatch):
    from django.db import OperationalError

    def unreadable(entries: dict[str, Any]) -> list[str]:
        raise OperationalError('connection to server at "db" failed: Connection refused\nIs the server running?')

    monkeypatch.setattr(registry, "registry_warnings", [unreadable, lambda entries: [f"{len(entries)} graphs"]])
    assert registry.registry_warnings_read({}) == [
        'the open tasks were not checked against the graphs: the database cannot be read (connection to server at "db" '
        "failed: Connection refused)",
        "0 graphs",
    ]
