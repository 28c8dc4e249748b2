"""A sensitive value a graph puts in words (a message's text) is masked by value wherever state is shown,
and a message that says nothing sensitive is shown as it is (``approvals.redaction.state_redact``,
``lgplatform.stream.Shield``). The surfaces, read by a real client, are in
``test_redaction_messages_surfaces.py``; these drive the masking itself with a real run of the graph.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from approvals.models import AuditEvent
from approvals.redaction import MASK, TEXT_MASK, state_redact
from lgplatform.stream import Shield
from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.stream import _NATIVE, CLIENT_MODES
from runtime.stream_events import events_config
from runtime.stream_tap import Publisher
from tests.graphs.chatty import PLAIN_REPLY, chatty_secret, spoken_pieces

pytestmark = pytest.mark.usefixtures("live_db")


def _canary() -> str:
    return f"cnry{uuid.uuid4().hex[:10]}msg"


def _pieces_of(canary: str) -> list[str]:
    """The canary and every piece of it a leak could show (each half, as the two tokens split it)."""
    half = len(canary) // 2
    return [canary, canary[:half], canary[half:], canary[2:-2]]


def _leaks(text: str, canary: str) -> list[str]:
    lower = text.lower()
    return [piece for piece in _pieces_of(canary) if piece.lower() in lower]


# --- the masking of a state document -----------------------------------------------------------------


def test_message_text_is_masked_by_the_values_at_sensitive_paths_of_the_same_state():
    secret = "S3CRETVALUEXYZ"
    state = {
        "secret": secret,
        "messages": [
            {"type": "ai", "id": "1", "content": "I know s3cretvaluexyz well"},
            {
                "type": "ai",
                "content": [{"type": "text", "text": f"blocks {secret}"}],
                "tool_calls": [{"name": "lookup", "args": {"query": f"who knows {secret}"}, "id": "c1"}],
                "additional_kwargs": {"tool_calls": [{"function": {"arguments": f'{{"q": "{secret}"}}'}}]},
            },
            {"role": "user", "content": f"my secret is {secret}"},
            {"type": "ai", "content": PLAIN_REPLY},
        ],
        "note": {"last": {"type": "human", "content": f"nested {secret}"}},
    }
    shown, applied = state_redact(state, ["secret"])
    assert secret.lower() not in json.dumps(shown).lower()
    assert shown["secret"] == MASK
    assert shown["messages"][0]["content"] == f"I know {TEXT_MASK} well"
    assert shown["messages"][1]["content"] == [{"type": "text", "text": f"blocks {TEXT_MASK}"}]
    assert shown["messages"][1]["tool_calls"][0]["args"] == {"query": f"who knows {TEXT_MASK}"}
    assert shown["messages"][2]["content"] == f"my secret is {TEXT_MASK}"
    assert shown["messages"][3] == {"type": "ai", "content": PLAIN_REPLY}, "a message with nothing sensitive is kept"
    assert shown["note"]["last"]["content"] == f"nested {TEXT_MASK}"
    assert applied == ["messages[0]", "messages[1]", "messages[2]", "note.last", "secret"]


def test_a_value_the_state_no_longer_holds_is_masked_when_the_thread_carried_it():
    state = {"messages": [{"type": "ai", "content": "was S3CRET"}]}
    shown, applied = state_redact(state, ["secret"], quoted={"S3CRET"})
    assert shown["messages"][0]["content"] == f"was {TEXT_MASK}" and applied == ["messages[0]"]


def test_strings_outside_messages_and_states_without_values_are_left_as_they_are():
    state = {"summary": "says S3CRET", "messages": [{"type": "ai", "content": "says S3CRET"}]}
    assert state_redact(state, ["secret"]) == (state, [])


# --- the streams: every mode, through the shield ------------------------------------------------------


def _published(canary: str) -> list[tuple[str, Any]]:
    """Every event the worker publishes for a run of chatty_secret streamed in every mode, with subgraphs:
    the first run to its gate, then the resume to its end."""

    class Sink:
        def __init__(self) -> None:
            self.events: list[tuple[str, str]] = []

        def append(self, run_id: str, events: Any) -> None:
            self.events.extend(events)

    graph = chatty_secret.compile(checkpointer=InMemorySaver())
    sink = Sink()
    thread = {"configurable": {"thread_id": str(uuid.uuid4())}}
    modes: Any = sorted({"updates", *(_NATIVE[m] for m in CLIENT_MODES if m in _NATIVE)})
    for graph_input in ({"secret": canary}, Command(resume={"decision": "approve"})):
        publisher = Publisher("run", set(CLIENT_MODES), True, sink)  # type: ignore[arg-type]
        config = events_config(thread, publisher)
        for namespace, mode, chunk in graph.stream(graph_input, config, stream_mode=modes, subgraphs=True):
            publisher.chunk(tuple(namespace), mode, chunk)
    return [(event, json.loads(data)) for event, data in sink.events]


def _thread_and_run(canary: str) -> tuple[Thread, Run]:
    thread = Thread.objects.create(graph="chatty_secret", status=ThreadStatus.COMPLETED)
    run = Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.SUCCEEDED, input={"secret": canary})
    return thread, run


def _shown(shield: Shield, published: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return [pair for event, data in published for pair in shield.shown(event, data)] + shield.flush()


@pytest.mark.parametrize("role", ["operator", "reviewer"])
def test_a_reader_without_reveal_rights_is_shown_no_piece_of_a_spoken_value_in_any_mode(personas, role):
    canary = _canary()
    published = _published(canary)
    modes = {event.split("|", 1)[0] for event, _ in published}
    assert modes >= {"values", "updates", "debug", "tasks", "checkpoints", "messages", "messages/partial", "events"}
    assert canary in json.dumps([d for e, d in published if e.startswith("values")]), "the attack needs the value"
    thread, run = _thread_and_run(canary)
    shown = _shown(Shield(personas[role].user, thread, run), published)
    for event, data in shown:
        leaked = _leaks(json.dumps(data, ensure_ascii=False), canary)
        assert not leaked, f"{event} shows {leaked}"
    last_values = [data for event, data in shown if event == "values"][-1]
    assert [m["content"] for m in last_values["messages"]] == [
        f"I know {TEXT_MASK} well",
        [{"type": "text", "text": f"blocks say {TEXT_MASK}"}],
        PLAIN_REPLY,
        f"Done with {TEXT_MASK}.",
    ]
    assert last_values["messages"][1]["tool_calls"][0]["args"] == {"query": f"who knows {TEXT_MASK}"}
    assert not AuditEvent.objects.filter(thread_id=thread.pk, action="sensitive.revealed").exists()


def test_a_value_split_across_two_tokens_is_never_shown_in_part_and_its_message_is_masked_not_dropped(personas):
    canary = _canary()
    published = _published(canary)
    first, second = spoken_pieces(canary)
    tuples = [data[0] for event, data in published if event == "messages" and "Chunk" in data[0]["type"]]
    assert [m["content"] for m in tuples if m["content"]][:2] == [first, second], "the attack needs the split"

    thread, run = _thread_and_run(canary)
    shown = _shown(Shield(personas["operator"].user, thread, run), published)
    pieces = [data[0]["content"] for event, data in shown if event == "messages" and "Chunk" in data[0]["type"]]
    assert "".join(pieces) == f"I know {TEXT_MASK} well"
    assert pieces[0] == "I know ", "the token's tail that begins the value is held back"
    partials = [data[0]["content"] for event, data in shown if event == "messages/partial"]
    assert f"I know {TEXT_MASK} well" in partials and not any(canary[:4] in p for p in partials)


@pytest.mark.parametrize("event", ["messages", "messages/complete"])
def test_a_message_that_says_nothing_sensitive_streams_as_it_is(personas, event):
    """A top-level sensitive path (``secret``) used to send every streamed message as the mask."""
    canary = _canary()
    published = _published(canary)
    thread, run = _thread_and_run(canary)
    shown = _shown(Shield(personas["operator"].user, thread, run), published)
    contents = [data[0]["content"] for name, data in shown if name == event]
    assert PLAIN_REPLY in contents and MASK not in contents
    assert f"Done with {TEXT_MASK}." in contents


def test_a_reader_with_reveal_rights_is_shown_the_spoken_value(personas):
    canary = _canary()
    published = _published(canary)
    thread, run = _thread_and_run(canary)
    shown = _shown(Shield(personas["auditor"].user, thread, run), published)
    assert shown == published
    assert AuditEvent.objects.filter(thread_id=thread.pk, action="sensitive.revealed").exists()
