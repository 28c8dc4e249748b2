"""The layers stay visible: runtime ← approvals (domain) ← adapters, no import upwards, no cycles.

Every import counts, function-level ones included: an import moved into a
function to dodge a cycle is still a cycle a reader has to untangle. The
known violations are listed by name so the list can only shrink: a new one
fails, and so does a listed one that has gone (delete it from the list).

The tests keep one rule of their own: every deadline stretches with the suite's time factor.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lower number = lower floor. A module may import only from its own floor or below.
LAYERS: dict[str, int] = {"runtime": 0, "approvals": 1, "console": 2, "lgplatform": 2, "demo": 2}

# Known debts, to be paid by the architecture pass (issue 12); never add to them.
KNOWN_UPWARD: set[tuple[str, str]] = set()
KNOWN_CYCLES: set[frozenset[str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _app_modules() -> dict[str, Path]:
    modules: dict[str, Path] = {}
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            modules[_module_name(path)] = path
    return modules


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    """The app modules ``module`` imports (resolved to the longest known module name)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from pkg import mod`` imports pkg.mod; ``from pkg.mod import name`` imports pkg.mod.
            names = [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            for end in range(len(parts), 0, -1):
                candidate = ".".join(parts[:end])
                if candidate in known and candidate != module:
                    targets.add(candidate)
                    break
    return targets


def _graph() -> dict[str, set[str]]:
    modules = _app_modules()
    known = set(modules)
    return {name: _imports(path, name, known) for name, path in modules.items()}


def _layer(module: str) -> int:
    return LAYERS[module.split(".")[0]]


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            if len(component) > 1:
                found.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_a_higher_layer() -> None:
    upward = {
        (source, target)
        for source, targets in _graph().items()
        for target in targets
        if _layer(target) > _layer(source)
    }
    new = sorted(upward - KNOWN_UPWARD)
    assert not new, f"upward imports (a lower layer may not import a higher one): {new}"
    paid = sorted(KNOWN_UPWARD - upward)
    assert not paid, f"these known upward imports are gone; remove them from KNOWN_UPWARD: {paid}"


def test_there_are_no_new_import_cycles() -> None:
    cycles = _cycles(_graph())
    new = [sorted(c) for c in cycles - KNOWN_CYCLES]
    assert not new, f"import cycles: {new}"
    paid = [sorted(c) for c in KNOWN_CYCLES - cycles]
    assert not paid, f"these known cycles are gone; remove them from KNOWN_CYCLES: {paid}"


@pytest.mark.parametrize(
    "source,expected",
    [
        ("from runtime.models import Run\n", {"runtime.models"}),
        ("from . import models\n", {"runtime.models"}),
        ("def f():\n    import console.live\n", {"console.live"}),
    ],
)
def test_the_import_scanner_sees_every_form_of_import(tmp_path: Path, source: str, expected: set[str]) -> None:
    path = tmp_path / "probe.py"
    path.write_text(source)
    known = {"runtime.models", "runtime.probe", "console.live"}
    assert _imports(path, "runtime.probe", known) == expected


# --- every deadline in the tests scales --------------------------------------------
#
# One time factor stretches the suite's deadlines on a busy machine (tests.conftest.scaled): a literal
# timeout does not stretch, and fails there. Wrap it in scaled(...).

# Helpers that scale their own ``timeout`` (with scaled, or by passing it to wait_for): a literal given
# to them is stretched already.
SELF_SCALING: set[str] = {
    "wait_for",
    "pending_tasks",
    "thread_settled",
    "process_group_stop",
    "wait_serving",  # tests.embedded.conftest.Stack
    "_until_run_settles",  # tests.faults.test_poison_runs
    "_until",  # tests.console.test_task_live
}

# Calls whose first positional argument is a timeout: Event.wait(10), Thread.join(10), Future.result(10).
POSITIONAL_TIMEOUT: set[str] = {"wait", "join", "result"}

# Short literal timeouts that are the behaviour under test, not a guard against a hang:
# (path, a fragment of the call's source) -> why it must not stretch.
UNSCALED_TIMEOUTS: dict[tuple[str, str], str] = {
    ("tests/runtime/test_sqlite_wal.py", "sqlite3.connect(path, timeout=0.05)"): "the lock wait must run out",
    ("tests/external/test_client.py", "decision_wait(task.id, timeout=1.0,"): "the long poll must time out (timed)",
    ("tests/perf/test_push.py", 'wait_for="completed", timeout=0.3)'): "the API's long-poll timeout, waited out",
    ("tests/perf/test_push.py", 'wait_for="completed", timeout=0)'): "the API's long-poll timeout: no wait",
    ("tests/perf/test_push.py", "watch.wait(0.05)"): "a watch that must not wake: a short look, not a deadline",
    ("tests/approvals/test_export.py", "self.done.wait(0.002)"): "the RSS sampler's 2 ms period, not a deadline",
}


def _numeric(node: ast.expr) -> bool:
    """A number written out (10, 0.5, 2 * 60): nothing in it scales."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.UnaryOp):
        return _numeric(node.operand)
    if isinstance(node, ast.BinOp):
        return _numeric(node.left) and _numeric(node.right)
    return False


def _literal_timeouts(source: str) -> list[tuple[int, str]]:
    """(line, call) for each call given a literal timeout: ``timeout=10``, ``httpx.Timeout(30)``,
    ``event.wait(10)``, ``asyncio.wait_for(coro, 10)``; calls to the self-scaling helpers aside."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = ast.unparse(node.func)
        name = callee.rpartition(".")[2]
        if name in SELF_SCALING and "asyncio." not in callee:
            continue
        literal = any(kw.arg == "timeout" and _numeric(kw.value) for kw in node.keywords)
        if name == "Timeout":  # httpx.Timeout(30.0), httpx.Timeout(None, connect=5)
            literal |= any(_numeric(value) for value in [*node.args, *(kw.value for kw in node.keywords)])
        if name in POSITIONAL_TIMEOUT:
            literal |= bool(node.args) and _numeric(node.args[0])
        if "asyncio.wait_for" in callee:
            literal |= len(node.args) > 1 and _numeric(node.args[1])
        if literal:
            found.append((node.lineno, ast.get_source_segment(source, node) or callee))
    return found


def test_every_timeout_in_the_tests_scales_with_the_time_factor() -> None:
    unscaled: list[str] = []
    allowed: set[tuple[str, str]] = set()
    for path in sorted((ROOT / "tests").rglob("*.py")):
        relative = str(path.relative_to(ROOT))
        for line, call in _literal_timeouts(path.read_text()):
            matches = {key for key in UNSCALED_TIMEOUTS if key[0] == relative and key[1] in call}
            allowed |= matches
            if not matches:
                unscaled.append(f"{relative}:{line}: {call.splitlines()[0]}")
    assert not unscaled, "literal timeouts (wrap them in tests.conftest.scaled):\n" + "\n".join(unscaled)
    gone = sorted(set(UNSCALED_TIMEOUTS) - allowed)
    assert not gone, f"these allowed timeouts are gone; remove them from UNSCALED_TIMEOUTS: {gone}"


# A long poll's own timeout, sent to the API, must not outgrow what the API accepts (30 s scaled at factor 6
# is 180 s, over the 120 s limit: a 422, and the poll never starts). tests.conftest.api_wait scales and
# caps it; a long-poll timeout (a ``timeout=``/``wait=`` query in a URL, a ``wait=`` client keyword, a
# ``"timeout"``/``"wait"`` query entry) built with scaled(...) is refused here.
QUERY_WAITS = ("timeout=", "wait=")


def _calls_scaled(node: ast.expr) -> bool:
    return any(
        isinstance(inner, ast.Call) and ast.unparse(inner.func).rpartition(".")[2] == "scaled"
        for inner in ast.walk(node)
    )


def _scaled_long_polls(source: str) -> list[tuple[int, str]]:
    """(line, expression) for each long-poll timeout sent to the API that is scaled without a cap."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        values: list[ast.expr] = []
        if isinstance(node, ast.JoinedStr):  # f"/api/threads/{id}?wait_for=...&timeout={scaled(30)}"
            pairs = zip(node.values, node.values[1:], strict=False)
            values += [
                b.value
                for a, b in pairs
                if isinstance(a, ast.Constant)
                and str(a.value).endswith(QUERY_WAITS)
                and isinstance(b, ast.FormattedValue)
            ]
        elif isinstance(node, ast.Dict):  # params={"timeout": scaled(30)}
            values += [
                v
                for k, v in zip(node.keys, node.values, strict=True)
                if isinstance(k, ast.Constant) and k.value in ("timeout", "wait")
            ]
        elif isinstance(node, ast.Call) and ast.unparse(node.func).rpartition(".")[2] in ("get", "post"):
            values += [kw.value for kw in node.keywords if kw.arg == "wait"]  # client.get(url, wait=scaled(30))
        found += [(v.lineno, ast.get_source_segment(source, v) or "") for v in values if _calls_scaled(v)]
    return found


def test_no_long_poll_timeout_sent_to_the_api_is_scaled_without_its_cap() -> None:
    uncapped = [
        f"{path.relative_to(ROOT)}:{line}: {expr}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        for line, expr in _scaled_long_polls(path.read_text())
    ]
    assert not uncapped, "long-poll timeouts scaled past the API's limit (use tests.conftest.api_wait):\n" + "\n".join(
        uncapped
    )


@pytest.mark.parametrize(
    "source,found",
    [
        ('client.get(f"/api/threads/{tid}?wait_for=completed&timeout={scaled(30)}")\n', 1),
        ('client.post(url, params={"wait": scaled(30)})\nclient.get(url, wait=scaled(30))\n', 2),
        ('client.get(f"/api/threads/{tid}?timeout={api_wait(30)}")\nproc.wait(timeout=scaled(10))\n', 0),
        ('client.get(url, params={"timeout": 5}, timeout=scaled(30))\n', 0),
    ],
)
def test_the_long_poll_scanner_sees_a_scaled_api_timeout(source: str, found: int) -> None:
    assert len(_scaled_long_polls(source)) == found


@pytest.mark.parametrize(
    "source,found",
    [
        ("proc.wait(timeout=10)\n", 1),
        ("client = httpx.Client(timeout=httpx.Timeout(30.0))\n", 1),
        ("bumper.join(10)\nasyncio.wait_for(coro, 5)\nsubprocess.run(cmd, timeout=2 * 60)\n", 3),
        ("proc.wait(timeout=scaled(10))\nhttpx.Timeout(scaled(30))\nbumper.join(scaled(10))\n", 0),
        ("wait_for(ready, timeout=40)\nstack.wait_serving(timeout=90)\n' '.join(parts)\n", 0),
    ],
)
def test_the_timeout_scanner_sees_every_form_of_literal_timeout(source: str, found: int) -> None:
    assert len(_literal_timeouts(source)) == found


# --- async views hold no pooled connection while they wait ------------------------------------------

# Async code that may call sync_to_async itself: it does not wait between its database calls, or it
# must hold its connection (the audit export streams from a server-side cursor in one transaction).
DIRECT_SYNC_TO_ASYNC = {"approvals/exports/api.py"}


def _direct_sync_to_async(source: str) -> list[int]:
    """Lines where an ``async def`` calls ``sync_to_async`` (or Channels' ``database_sync_to_async``) itself."""
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.AsyncFunctionDef):
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func).rpartition(".")[2] in (
                    "sync_to_async",
                    "database_sync_to_async",
                ):
                    found.append(call.lineno)
    return found


def test_async_views_make_their_database_calls_through_between_waits() -> None:
    """An async view that waits (``runs.wait``, joins, streams, long polls) gives its pooled connection back
    after each database call (``runtime.notify.between_waits``): held through its waits, as many waiting
    requests as the pool holds made every other request fail (round 24 of docs/performance.md)."""
    paths = [*sorted((ROOT / "lgplatform").glob("*.py")), *sorted((ROOT / "approvals").rglob("*api*.py"))]
    direct = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in paths
        if str(path.relative_to(ROOT)) not in DIRECT_SYNC_TO_ASYNC
        for line in _direct_sync_to_async(path.read_text())
    ]
    assert paths and not direct, "call runtime.notify.between_waits instead:\n" + "\n".join(direct)


def test_the_sync_to_async_scanner_sees_a_call_inside_an_async_view() -> None:
    source = (
        "async def view(request):\n    return await sync_to_async(read)(request)\n"
        "def helper():\n    return sync_to_async(read)\n"
        "async def other():\n    await between_waits(read)()\n"
    )
    assert _direct_sync_to_async(source) == [2]
