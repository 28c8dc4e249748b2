"""What a reader is shown of a run's chunks (lgplatform.stream): masked as values are, free text masked by
value without ever showing a piece of one, every chunk of every mode; and the modes a client may ask for."""

from __future__ import annotations

import json
import uuid
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph

from approvals.errors import InvalidInput
from approvals.models import AuditEvent
from approvals.redaction import MASK, TEXT_MASK, redact
from lgplatform.stream import Shield, _HeldText, stream_modes_parse
from runtime.models import Run, RunKind, RunStatus, Thread, ThreadStatus
from runtime.stream import _NATIVE, CLIENT_MODES
from runtime.stream_events import events_config
from runtime.stream_tap import Publisher, chunk_jsonable
from tests.graphs.streaming import chatty_review

pytestmark = pytest.mark.usefixtures("live_db")


def test_held_text_never_shows_a_piece_of_a_value_split_across_pieces():
    held = _HeldText({"1970-01-02"})
    pieces = ["born 1", "970", "-0", "1-0", "2, ok", "."]
    shown = [held.delta("m", p, final=False) for p in pieces]
    for prefix in ("19", "1970", "70-01", "-01-0"):
        assert not any(prefix in s for s in shown), (prefix, shown)
    assert "".join(shown) + held.delta("m", "", final=True) == f"born {TEXT_MASK}, ok."


def test_held_text_holds_a_tail_that_could_begin_a_value_until_it_is_settled():
    held = _HeldText({"secret"})
    assert held.delta("m", "a sec", final=False) == "a "
    assert held.delta("m", "ond", final=False) == "second"
    assert held.whole("w", "the SECRET is se", final=False) == f"the {TEXT_MASK} is "
    assert held.whole("w", "the SECRET is se", final=True) == f"the {TEXT_MASK} is se"


def test_held_text_with_overlapping_values_shows_neither():
    held = _HeldText({"abcd", "bcdz"})
    shown = [held.delta("m", p, final=False) for p in ("xab", "cd", "q")]
    assert "".join(shown) == f"x{TEXT_MASK}q" and not any("a" in s or "b" in s for s in shown)


@pytest.mark.parametrize("value", [None, "values", ["values", "updates", "values"], list(CLIENT_MODES)])
def test_known_stream_modes_are_taken_once_each_in_order(value):
    modes = stream_modes_parse(value)
    assert modes == list(dict.fromkeys([value] if isinstance(value, str) else value or ["values"]))


@pytest.mark.parametrize("value", ["telepathy", ["values", "lifecycle"], ["tools"]])
def test_an_unknown_stream_mode_is_refused_naming_the_field(value):
    with pytest.raises(InvalidInput) as refused:
        stream_modes_parse(value)
    assert refused.value.field == "stream_mode"


def _published(born: str) -> list[tuple[str, Any]]:
    """Every event the worker publishes for a chatty_review run streamed in every mode."""
    graph = chatty_review.compile(checkpointer=InMemorySaver())
    return _published_from(graph, {"applicant": {"name": "Ada", "date_of_birth": born}})


def _published_from(graph: Any, graph_input: Any) -> list[tuple[str, Any]]:
    """Every event the worker publishes for a run of ``graph`` streamed in every mode, with subgraphs."""

    class Sink:
        def __init__(self) -> None:
            self.events: list[tuple[str, str]] = []

        def append(self, run_id: str, events: Any) -> None:
            self.events.extend(events)

    sink = Sink()
    publisher = Publisher("run", set(CLIENT_MODES), True, sink)  # type: ignore[arg-type]
    config = events_config({"configurable": {"thread_id": str(uuid.uuid4())}}, publisher)
    modes: Any = sorted({"updates", *(_NATIVE[m] for m in CLIENT_MODES if m in _NATIVE)})
    for namespace, mode, chunk in graph.stream(graph_input, config, stream_mode=modes, subgraphs=True):
        publisher.chunk(tuple(namespace), mode, chunk)
    return [(event, json.loads(data)) for event, data in sink.events]


def _thread_and_run(born: str) -> tuple[Thread, Run]:
    # A finished run: nothing here executes it, and a queued one would hold up tests that wait for runs to settle.
    thread = Thread.objects.create(graph="chatty_review", status=ThreadStatus.INTERRUPTED)
    run = Run.objects.create(
        thread=thread,
        kind=RunKind.START,
        status=RunStatus.INTERRUPTED,
        input={"applicant": {"name": "Ada", "date_of_birth": born}},
    )
    return thread, run


def test_a_reader_without_reveal_rights_is_shown_no_piece_of_a_sensitive_value_in_any_mode(personas):
    born = f"cnry{uuid.uuid4().hex[:10]}dob"
    thread, run = _thread_and_run(born)
    shield = Shield(personas["operator"].user, thread, run)
    published = _published(born)
    assert {event for event, _ in published} >= {"values", "updates", "debug", "custom", "events", "messages/partial"}
    shown = [pair for event, data in published for pair in shield.shown(event, data)] + shield.flush()
    text = json.dumps(shown, ensure_ascii=False)
    for piece in (born, born[:6], born[4:10], born[-6:]):
        assert piece not in text, piece
    assert MASK in text and TEXT_MASK in text
    partials = [data[0]["content"] for event, data in shown if event == "messages/partial"]
    assert partials[-1] == f"The applicant was born on {TEXT_MASK}, it says."
    assert not AuditEvent.objects.filter(thread_id=thread.pk, action="sensitive.revealed").exists()


class _Looked(TypedDict, total=False):
    applicant: dict[str, Any]
    status: str


def test_a_value_a_node_makes_is_masked_in_every_mode_before_any_update_teaches_it(personas):
    """The value is in neither the run's input nor the thread: the node looks it up. Its node's
    ``on_chain_stream`` and ``on_chain_end`` (events), ``tasks`` and ``debug`` results are published
    before the step's ``updates``; none may show it to a reader without reveal rights."""
    born = f"cnry{uuid.uuid4().hex[:10]}dob"

    def look_up(state: _Looked) -> dict[str, Any]:
        return {"applicant": {"name": "Ada", "date_of_birth": born}, "status": "looked up"}

    builder = StateGraph(_Looked)
    builder.add_node(look_up)
    builder.add_edge(START, "look_up")
    builder.add_edge("look_up", END)
    published = _published_from(builder.compile(checkpointer=InMemorySaver()), {"applicant": {"name": "Ada"}})
    events = [data["event"] for event, data in published if event == "events"]
    assert "on_chain_stream" in events and born in json.dumps(published), "the attack needs the value published"
    carrying = [event for event, data in published if born in json.dumps(data)]
    assert carrying[0] != "updates" and "events" in carrying[: carrying.index("updates")], (
        "the attack needs chunks that carry the value before any update could teach the mask",
        carrying,
    )
    thread, run = _thread_and_run("")
    run.input = {"applicant": {"name": "Ada"}}
    shield = Shield(personas["operator"].user, thread, run)  # chatty_review: applicant.date_of_birth is sensitive
    shown = [pair for event, data in published for pair in shield.shown(event, data)] + shield.flush()
    for event, data in shown:
        text = json.dumps(data, ensure_ascii=False)
        assert born not in text and born[4:14] not in text, f"{event} shows the value"
    assert MASK in json.dumps(shown, ensure_ascii=False)


def test_a_reader_with_reveal_rights_is_shown_the_chunks_as_published_and_audited(personas):
    born = f"cnry{uuid.uuid4().hex[:10]}dob"
    thread, run = _thread_and_run(born)
    shield = Shield(personas["auditor"].user, thread, run)
    published = _published(born)
    shown = [pair for event, data in published for pair in shield.shown(event, data)]
    assert shown == published
    reveals = list(AuditEvent.objects.filter(thread_id=thread.pk, action="sensitive.revealed", subject_type="run"))
    revealing = [data for _, data in published if redact(data, ["applicant.date_of_birth"])[1]]
    shown_paths = {p for data in revealing for p in redact(data, ["applicant.date_of_birth"])[1]}
    assert {p for event in reveals for p in event.details["paths"]} == shown_paths, "every field shown is audited"
    assert 0 < len(reveals) < len(revealing), "a chunk that shows no new field is not audited again"


def test_chunks_of_a_graph_without_sensitive_paths_go_out_as_published(personas):
    thread = Thread.objects.create(graph="loan_approval", status=ThreadStatus.COMPLETED)
    run = Run.objects.create(thread=thread, kind=RunKind.START, status=RunStatus.SUCCEEDED, input={})
    shield = Shield(personas["operator"].user, thread, run)
    assert shield.plain and shield.shown("updates", {"n": {"x": 1}}) == [("updates", {"n": {"x": 1}})]


def test_interrupts_are_published_as_the_platform_api_shows_them():
    from langgraph.types import Interrupt

    # LangGraph Server (langgraph-api 0.16.7) sends response_schema, null when the interrupt declared none.
    assert chunk_jsonable({"__interrupt__": (Interrupt(value={"q": 1}, id="abc"),)}) == {
        "__interrupt__": [{"value": {"q": 1}, "id": "abc", "response_schema": None}]
    }
    declared = Interrupt(value={"q": 1}, id="abc", response_schema={"type": "object"})
    assert chunk_jsonable({"__interrupt__": [declared]})["__interrupt__"][0]["response_schema"] == {"type": "object"}
