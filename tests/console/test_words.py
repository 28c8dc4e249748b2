"""What the console says instead of runtime identifiers (console.words): checkpoints, runs, errors, actors."""

from __future__ import annotations

import uuid
from types import SimpleNamespace as NS

import pytest

from console import words
from runtime.models import RunKind, RunStatus
from runtime.registry import graph_get
from runtime.state import CheckpointView

# What runtime.executor stores for an exception raised in a node (Python 3.11 prints LangGraph's note).
BANK_DOWN = (
    "demo.bank_client.BankUnavailable: core banking timed out\n"
    "During task with name 'disburse' and id '1f0c2b4e-0000-6000-8000-000000000000'"
)


def _view(source: str, step: int, *, writes=None, next=()) -> CheckpointView:
    return CheckpointView(
        checkpoint_id="1f0",
        parent_id="",
        step=step,
        source=source,
        created_at="",
        next=list(next),
        values={},
        writes=writes,
    )


@pytest.mark.parametrize(
    ("view", "says"),
    [
        (_view("input", -1, next=["__start__"]), "Input received"),
        (_view("loop", 0, writes={"__start__": None}), "Started"),
        (_view("loop", 0), "Started"),
        (_view("loop", 3, writes={"score_risk": None, "pull_documents": None}), "Ran pull_documents, score_risk"),
        (_view("update", 3, writes={"gate": None}), "State changed by an operator"),
        (_view("fork", 3), "Replayed from an earlier checkpoint"),
    ],
    ids=["input", "start", "start-unnamed", "nodes", "update", "replay"],
)
def test_a_checkpoint_is_said_in_words_not_langgraph_sources(view, says):
    assert words.checkpoint_summary(view) == says


def test_an_update_at_a_past_checkpoint_says_it_forked():
    assert words.checkpoint_summary(_view("update", 3), forked=True) == "State changed by an operator (fork)"


def test_a_checkpoint_without_writes_is_named_by_what_its_parent_was_to_run():
    assert words.checkpoint_summary(_view("loop", 2), ran=["score_risk"]) == "Ran score_risk"


def test_where_a_checkpoint_goes_next():
    assert words.checkpoint_next(_view("loop", 2, next=["human_review"]), waiting=True) == "Waiting at human_review"
    assert words.checkpoint_next(_view("loop", 2, next=["disburse"])) == "Next: disburse"
    assert words.checkpoint_next(_view("loop", 5)) == "Finished"


@pytest.mark.parametrize(
    ("kind", "status", "error", "says"),
    [
        (RunKind.START, RunStatus.INTERRUPTED, "", "Start run — paused for a decision"),
        (RunKind.RESUME, RunStatus.SUCCEEDED, "", "Resume run — succeeded"),
        (RunKind.RESUME, RunStatus.FAILED, BANK_DOWN, "Resume run — failed: core banking timed out"),
    ],
)
def test_a_run_says_its_status_once(kind, status, error, says):
    assert words.run_summary(NS(kind=kind, status=status, error=error)) == says


def test_an_effects_error_stored_as_a_repr_reads_as_its_message():
    """The effect ledger keeps repr(exc): "BankUnavailable('no answer …')" was shown as it is."""
    assert words.error_summary("BankUnavailable('no answer from the bank')") == "no answer from the bank"
    assert words.error_summary('KeyError("amount")') == "KeyError: amount"


def test_an_error_summary_drops_the_module_path_and_langgraphs_task_note():
    assert words.error_summary(BANK_DOWN) == "core banking timed out"
    assert words.error_is_summarised(BANK_DOWN)


def test_a_builtin_exception_keeps_its_name_and_a_plain_message_stays_whole():
    assert words.error_summary("KeyError: 'amount'\nDuring task with name 'x' and id 'y'") == "KeyError: 'amount'"
    cancelled = "cancelled by ada (rollback): customer withdrew"
    assert words.error_summary(cancelled) == cancelled and not words.error_is_summarised(cancelled)


@pytest.mark.parametrize(
    ("label", "says"),
    [
        ("worker:vm:14448:140486542091968", "worker (vm)"),
        ("webhook:bank-callbacks", "webhook (bank-callbacks)"),
        ("sso:ada", "ada (single sign-on)"),
        ("anonymous:mallory", "sign-in attempt (mallory)"),
        ("runtime", "runtime"),
        ("ada", "ada"),
    ],
)
def test_an_audit_actor_is_said_in_words(label, says):
    assert words.actor_short(label) == says


def test_thread_metadata_keys_get_labels():
    assert words.metadata_label("external_source") == "Source"
    assert words.metadata_label("external_key") == "Key"
    assert words.metadata_label("due_date") == "Due date"


def test_a_thread_is_named_by_its_case_or_its_graph_and_a_short_id():
    pk = uuid.uuid4()
    assert words.thread_name(NS(pk=pk, graph="loan_approval", metadata={"case": "C-7", "applicant": "Ada"})) == (
        "C-7 · Ada"
    )
    external = NS(pk=pk, graph="external:pay", metadata={"external_source": "pay", "external_key": "INV-9"})
    assert words.thread_name(external) == "pay INV-9"
    assert words.thread_name(NS(pk=pk, graph="loan_approval", metadata={})) == f"loan_approval · {str(pk)[:8]}"


def test_a_long_case_or_applicant_is_clipped_in_a_threads_name():
    """A 305-character case and a 480-character applicant named the thread in 10 lines of heading."""
    metadata = {"case": "CASE-" + "X" * 300, "applicant": "A" * 480}
    name = words.thread_name(NS(pk=uuid.uuid4(), graph="loan_approval", metadata=metadata))
    case, applicant = name.split(" · ")
    assert len(case) == len(applicant) == words.NAME_PART_MAX and case.endswith("…") and applicant.endswith("…")
    assert case.startswith("CASE-XXX")


def test_a_thread_without_a_case_is_named_by_its_graphs_description(monkeypatch):
    """It read "kyc_onboarding 9e10d524": the registry's description says what the graph is."""
    pk = uuid.uuid4()
    entry = graph_get("kyc_onboarding")
    monkeypatch.setattr(entry, "description", "KYC onboarding: documents, screening, identity vendor, review")
    assert words.thread_name(NS(pk=pk, graph="kyc_onboarding", metadata={})) == f"KYC onboarding · {str(pk)[:8]}"
    monkeypatch.setattr(entry, "description", "a description far too long to stand for the graph's name in a title")
    assert words.graph_label("kyc_onboarding") == "kyc_onboarding"
    assert words.graph_label("no_such_graph") == "no_such_graph"
