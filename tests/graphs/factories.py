"""A graph factory that takes the run's config, as LangGraph Server calls it: once per run."""

from __future__ import annotations

from typing import Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph


class BuiltState(TypedDict, total=False):
    built_for: str
    n: int


def built_per_run(config: RunnableConfig) -> StateGraph[BuiltState]:
    # What a real factory would use to pick a model or tools for this tenant/thread.
    thread_id = str(config.get("configurable", {}).get("thread_id", ""))

    def record(state: BuiltState) -> dict[str, Any]:
        return {"built_for": thread_id}

    builder = StateGraph(BuiltState)
    builder.add_node(record)
    builder.add_edge(START, "record")
    builder.add_edge("record", END)
    return builder
