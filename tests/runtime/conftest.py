"""Fixtures shared by the runtime tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runtime import signals
from runtime.models import Effect


@pytest.fixture
def executed() -> Iterator[list[Effect]]:
    seen: list[Effect] = []

    def on(sender: Any, effect: Effect, **kwargs: Any) -> None:
        seen.append(effect)

    signals.effect_executed.connect(on, sender=Effect, weak=False)
    yield seen
    signals.effect_executed.disconnect(on, sender=Effect)
