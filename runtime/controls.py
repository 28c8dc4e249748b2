"""Per-graph runtime controls from ``langgraph.json``: durability, recursion limit, run timeout.

    "gatehouse": {"runtime": {"loan": {"durability": "sync", "recursion_limit": 40,
                                       "run_timeout_seconds": 600}}}

What each durability mode means for recovery is in docs/runtime-controls.md.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

if TYPE_CHECKING:  # Django's start reads the controls: it does not load LangGraph (runtime.registry)
    from langchain_core.runnables import RunnableConfig

Durability = Literal["sync", "async", "exit"]
DURABILITY_MODES: tuple[Durability, ...] = ("sync", "async", "exit")
# Approvals want every step saved before the next starts: a crash never loses a decided step.
DEFAULT_DURABILITY: Durability = "sync"


class RunTimeout(Exception):
    """A run went past its graph's ``run_timeout_seconds``; the run and thread fail with this message."""


class RecursionLimitReached(Exception):
    """LangGraph's GraphRecursionError, said in terms of where the limit is configured."""


@dataclass(frozen=True)
class RuntimeControls:
    graph: str = ""
    durability: Durability = DEFAULT_DURABILITY
    recursion_limit: int | None = None  # None: LangGraph's default (10,007 super-steps in langgraph 1.2)
    run_timeout_seconds: float | None = None
    recursion_limit_of_run: bool = False  # the limit is the run's own config.recursion_limit (``for_run``)

    def for_run(self, recursion_limit: int | None) -> RuntimeControls:
        """The controls of one run that asked for its own recursion limit: it may lower the graph's, never
        raise it past the operator's (``lgplatform`` refuses a higher one; a cap lowered since still holds)."""
        if recursion_limit is None or (self.recursion_limit is not None and recursion_limit >= self.recursion_limit):
            return self
        return dataclasses.replace(self, recursion_limit=recursion_limit, recursion_limit_of_run=True)

    def config(self, config: RunnableConfig) -> RunnableConfig:
        if self.recursion_limit is None:
            return config
        return cast("RunnableConfig", {**config, "recursion_limit": self.recursion_limit})

    def deadline(self) -> float | None:
        return None if self.run_timeout_seconds is None else time.monotonic() + self.run_timeout_seconds

    def check(self, deadline: float | None) -> None:
        """Between super-steps: refuse to go on past the deadline (a node is never cut mid-way)."""
        if deadline is not None and time.monotonic() > deadline:
            raise RunTimeout(
                f"run timeout: the run took longer than {self.run_timeout_seconds:g} s "
                f"(gatehouse.runtime.{self.graph}.run_timeout_seconds in langgraph.json)"
            )

    def recursion_error(self, exc: Exception) -> RecursionLimitReached:
        limit = self.recursion_limit if self.recursion_limit is not None else "LangGraph's default number of"
        where = (
            "the run's config.recursion_limit"
            if self.recursion_limit_of_run
            else f"gatehouse.runtime.{self.graph}.recursion_limit in langgraph.json"
        )
        return RecursionLimitReached(
            f"recursion limit: the run took more than {limit} steps without finishing ({where}); {exc}"
        )


def controls_parse(name: str, gatehouse: dict[str, Any]) -> RuntimeControls:
    """The graph's controls; a bad value raises ValueError naming the graph and the key."""
    section = gatehouse.get("runtime", {})
    if not isinstance(section, dict):
        raise ValueError('gatehouse.runtime must be an object {"<graph>": {...}}')
    options = section.get(name, {})
    if not isinstance(options, dict):
        raise ValueError(f"graph {name!r}: gatehouse.runtime.{name} must be an object")
    unknown = set(options) - {"durability", "recursion_limit", "run_timeout_seconds"}
    if unknown:
        raise ValueError(f"graph {name!r}: unknown runtime options {sorted(unknown)}")
    durability = options.get("durability", DEFAULT_DURABILITY)
    if durability not in DURABILITY_MODES:
        raise ValueError(f"graph {name!r}: durability must be one of {', '.join(DURABILITY_MODES)}, not {durability!r}")
    limit = options.get("recursion_limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ValueError(f"graph {name!r}: recursion_limit must be an integer >= 1")
    timeout = options.get("run_timeout_seconds")
    if timeout is not None and (
        not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout < math.inf
    ):  # JSON's 1e999 is infinity: no timeout at all, which leaving the key out already says
        raise ValueError(f"graph {name!r}: run_timeout_seconds must be a finite number > 0")
    return RuntimeControls(
        graph=name,
        durability=cast(Durability, durability),
        recursion_limit=limit,
        run_timeout_seconds=float(timeout) if timeout is not None else None,
    )
