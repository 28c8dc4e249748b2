"""An action whose outcome is unknown is said so, with what is true and what to do, never as "failed"."""

from __future__ import annotations

import re

import pytest

from console import words
from console.selectors import timeline_for
from runtime.models import Effect, EffectStatus
from tests.console.conftest import console_client
from tests.factories import thread_make

pytestmark = pytest.mark.usefixtures("live_db")

ERROR = "BankNoAnswer('no answer from the bank (timed out): it may have acted on the request')"


def _text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def _unknown_payment() -> Effect:
    thread = thread_make(graph="loan_approval")
    key = f"gh:{thread.pk}:disburse"
    unknown = EffectStatus.UNKNOWN
    return Effect.objects.create(key=key, name="disburse", thread=thread, status=unknown, error=ERROR, calls=1)


def test_the_thread_page_says_the_outcome_is_unknown_and_that_a_retry_asks_again(personas):
    effect = _unknown_payment()
    html = console_client(personas["operator"]).get(f"/threads/{effect.thread_id}/").content.decode()
    actions = html.split("<h3>Actions performed</h3>", 1)[1].split("</ul>", 1)[0]
    shown = _text(actions)
    assert "disburse outcome unknown" in shown and "failed" not in shown
    assert "may have acted" in shown and "same idempotency key" in shown
    assert 'class="status status-unknown"' in actions


def test_the_timeline_says_the_outcome_is_unknown(personas):
    effect = _unknown_payment()
    [entry] = [e for e in timeline_for(user=personas["operator"].user, thread=effect.thread) if e.kind == "effect"]
    assert entry.title == "Action disburse: outcome unknown"
    assert "may have acted" in entry.detail["hint"]


@pytest.mark.parametrize(
    "status,said,hinted",
    [
        (EffectStatus.UNKNOWN, "outcome unknown", True),
        (EffectStatus.FAILED, "failed", False),
        (EffectStatus.DONE, "done", False),
    ],
)
def test_each_status_is_said_in_words(status, said, hinted):
    effect = Effect(key="k", name="disburse", status=status)
    assert words.effect_status(effect) == said
    assert bool(words.effect_hint(effect)) is hinted
