"""The layers stay visible: runtime ← approvals (domain) ← adapters, no import upwards, no cycles.

Every import counts, function-level ones included: an import moved into a
function to dodge a cycle is still a cycle a reader has to untangle. The
known violations are listed by name so the list can only shrink: a new one
fails, and so does a listed one that has gone (delete it from the list).
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
