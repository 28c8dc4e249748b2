"""The demo loan graph for ``langgraph dev`` (bench/sdk_wait.py): the same graph as Gatehouse serves,
with the ``disburse`` node calling the fake bank directly (no effect ledger), as full_cycle's baseline."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
django.setup()  # demo/graphs/loan_approval.py imports runtime.effects

from langgraph.config import get_config  # noqa: E402

from demo.graphs import loan_approval  # noqa: E402


def _direct_effect(name: str, call: Callable[[str], Any], *, key: str | None = None, args: Any = None) -> Any:
    thread_id = get_config()["configurable"]["thread_id"]
    return call(key or f"lgdev:{thread_id}:{name}")


loan_approval.perform_effect = _direct_effect  # type: ignore[assignment]
graph = loan_approval.make_graph().compile()  # langgraph dev supplies its in-memory checkpointer
