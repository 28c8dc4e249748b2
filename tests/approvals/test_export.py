"""Audit export: filters, masking, permissions, a verifiable chain, tamper detection, bounded memory."""

from __future__ import annotations

import itertools
import json
import os
import threading
import time
import tracemalloc
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client
from django.urls import reverse

from approvals.audit import GENESIS, audit_anchor, audit_record, event_hash
from approvals.exports.stream import COLUMNS
from approvals.exports.verify import export_verify
from approvals.models import AuditEvent
from approvals.redaction import MASK
from approvals.tokens import token_issue
from tests.conftest import ApiClient, Persona, scaled

pytestmark = pytest.mark.django_db

URL = "/api/audit/export"


def event(
    action: str = "test.export",
    *,
    graph: str = "loan_approval",
    actor: str = "exporter",
    thread: uuid.UUID | None = None,
    **details: Any,
) -> AuditEvent:
    return audit_record(
        actor=None,
        actor_label=actor,
        action=action,
        subject_type="test",
        subject_id=action,
        thread_id=thread,
        graph=graph,
        details=details,
    )


def download(client: ApiClient, **params: Any) -> bytes:
    response = client.get(URL, **params)
    assert response.status_code == 200, response.content
    assert response.streaming
    return b"".join(response.streaming_content)


def jsonl(body: bytes) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    lines = [json.loads(line) for line in body.decode().splitlines()]
    assert set(lines[-1]) == {"export"}, "the last line is the trailer"
    return lines[:-1], lines[-1]["export"]


# --- filters ----------------------------------------------------------------------------


def test_it_filters_by_graph_thread_actor_action_and_time(auditor):
    thread = uuid.uuid4()
    a = event("test.export.one", thread=thread, actor="alice")
    b = event("test.export.two", thread=thread, actor="bob", graph="kyc_onboarding")
    c = event("test.export.one", actor="alice")
    client = auditor.client

    def ids(**params: Any) -> list[int]:
        return [row["id"] for row in jsonl(download(client, **params))[0]]

    assert ids(thread=str(thread)) == [a.id, b.id]
    assert ids(thread=str(thread), graph="kyc_onboarding") == [b.id]
    assert ids(action="test.export.one", actor="ALICE") == [a.id, c.id]  # actor is case-insensitive
    assert ids(action="test.export.", since=a.at.isoformat()) == [a.id, b.id, c.id]  # trailing dot: prefix
    assert ids(action="test.export.", since=b.at.isoformat(), until=c.at.isoformat()) == [b.id]
    assert ids(action="test.export.", thread="", graph="", actor="") == [a.id, b.id, c.id]  # blank = any


@pytest.mark.parametrize("action", ["decison.made", "nothing.", "decision.made."])
def test_an_action_the_trail_does_not_record_is_refused_on_every_audit_surface(auditor, action):
    # A typo used to read as an empty trail ("nothing happened"); each surface now names the field.
    event("test.export.known")
    response = auditor.client.get("/api/audit/export", action=action)
    assert response.status_code == 422 and response.json()["error"]["field"] == "action"
    response = auditor.client.get("/api/audit", action="decison.made")
    assert response.status_code == 422 and response.json()["error"]["field"] == "action"
    browser = Client()
    browser.force_login(auditor.user)
    page = browser.get(reverse("console:audit"), {"action": action})
    assert page.status_code == 200 and "is not an audit action" in page.content.decode()
    # Recorded actions and families still filter: the enum's, and any the trail holds.
    assert auditor.client.get("/api/audit", action="decision.made").status_code == 200
    assert auditor.client.get("/api/audit/export", action="test.export.").status_code == 200
    assert auditor.client.get("/api/audit/export", action="webhook.").status_code == 200


def test_each_row_carries_exactly_the_hashed_fields_and_the_chain_hashes(auditor):
    e = event("test.export.fields", note="x")
    [row], trailer = jsonl(download(auditor.client, action="test.export.fields"))
    assert list(row) == list(COLUMNS)
    keys = ("at", "actor", "actor_id", "action", "subject", "thread", "graph", "details", "chain", "id")
    hashed = {k: row[k] for k in keys}
    assert row["chain"] == e.chain != 0  # a partitioned chain: its hash covers its chain and id too
    assert row["actor_id"] == e.actor_id  # and the actor's user id, not only its name
    assert row["hash"] == e.hash == event_hash(hashed, row["prev_hash"])
    assert trailer["count"] == 1 and trailer["first_id"] == trailer["last_id"] == e.id
    assert trailer["head_hash"] == e.hash and trailer["chained"] is False


def test_csv_has_a_header_and_one_row_per_event(auditor):
    import csv
    import io

    e = event("test.export.csv", note='a, "quoted" value')
    rows = list(csv.DictReader(io.StringIO(download(auditor.client, format="csv", action="test.export.csv").decode())))
    assert [int(r["id"]) for r in rows] == [e.id]
    assert json.loads(rows[0]["details"]) == {"note": 'a, "quoted" value'}
    assert rows[0]["hash"] == e.hash and rows[0]["masked"] == "false"


def test_a_bad_filter_is_a_422_naming_the_field(auditor):
    response = auditor.client.get(URL, thread="not-a-uuid")
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "thread"
    assert auditor.client.get(URL, format="xml").status_code == 422


# --- masking and permissions ------------------------------------------------------------


def test_sensitive_paths_are_masked_for_a_reader_without_view_sensitive(auditor):
    e = event("test.export.kyc", graph="kyc_onboarding", applicant={"name": "Ada", "date_of_birth": "1920-07-25"})
    reader = User.objects.create_user(f"export-reader-{uuid.uuid4().hex[:6]}")
    reader.user_permissions.add(
        Permission.objects.get(codename="view_audit"), Permission.objects.get(codename="view_all_graphs")
    )
    for fmt in ("jsonl", "csv"):
        body = download(ApiClient(token_issue(user=reader)), action="test.export.kyc", format=fmt)
        assert b"1920-07-25" not in body and MASK.encode() in body
    [row], trailer = jsonl(download(ApiClient(token_issue(user=reader)), action="test.export.kyc"))
    assert row["details"]["applicant"] == {"name": "Ada", "date_of_birth": MASK} and row["masked"] is True
    # The hash covers the unmasked date of birth: a reader could test each of a century's dates against it.
    assert row["hash"] == row["prev_hash"] == MASK and e.hash not in json.dumps(row) and trailer["masked"] == 1
    [full], _ = jsonl(download(auditor.client, action="test.export.kyc"))
    assert full["details"]["applicant"]["date_of_birth"] == "1920-07-25" and full["masked"] is False


@pytest.mark.parametrize(
    "persona,status",
    [("reviewer", 403), ("operator", 403), ("outsider", 403), ("anonymous", 401), ("auditor", 200), ("admin", 200)],
)
def test_only_audit_readers_may_export(personas: dict[str, Persona], persona, status):
    client = ApiClient(None) if persona == "anonymous" else personas[persona].client
    response = client.get(URL, thread=str(uuid.uuid4()))  # nothing to export
    assert response.status_code == status
    if status >= 400:
        assert set(response.json()["error"]) == {"code", "message", "field"}


def test_a_signed_in_console_session_may_export(auditor):
    browser = Client()
    browser.force_login(auditor.user)
    response = browser.get(URL, {"format": "csv", "thread": str(uuid.uuid4())})
    assert response.status_code == 200
    assert response["Content-Disposition"].startswith('attachment; filename="gatehouse-audit-')


def test_the_export_itself_is_audited_with_its_filters_and_count(auditor):
    e = event("test.export.audited")
    download(auditor.client, action="test.export.audited", format="csv")
    record = AuditEvent.objects.filter(action="audit.exported").latest("id")
    assert record.actor_label == auditor.username
    assert record.details["filters"] == {"action": "test.export.audited"}
    assert record.details["count"] == 1 and record.details["complete"] is True
    assert record.details["last_id"] == e.id and record.details["format"] == "csv"


# --- verification -----------------------------------------------------------------------


def whole_chain(auditor: Persona, tmp_path: Path) -> Path:
    event("test.export.chain", n=1)
    event("test.export.chain", n=2)
    event("test.export.chain", n=3)
    path = tmp_path / "audit.jsonl"
    path.write_bytes(download(auditor.client))
    return path


@pytest.mark.usefixtures("audit_quiet")  # the export is compared with a count of the whole trail
def test_a_whole_trail_export_verifies_from_genesis(auditor, tmp_path):
    path = whole_chain(auditor, tmp_path)
    result = export_verify(path.open("rb"))
    assert result.ok, result
    # Every event up to the last one exported is in the export (its own audit.exported comes after). Counted up
    # to that id, not the whole table: a session's live worker may append in chain 0, which audit_quiet does
    # not hold, between the export and the count (CI: 3 rows more, a run finishing in the background).
    last = max(json.loads(line)["id"] for line in path.read_text().splitlines()[:-1])
    assert result.chained and result.rows == AuditEvent.objects.filter(id__lte=last).count()
    assert json.loads(path.read_text().splitlines()[0])["prev_hash"] == GENESIS


def test_a_whole_trail_export_links_every_chain_from_genesis(auditor, tmp_path):
    event("test.export.chains", n=1)
    audit_anchor()  # an event in every chain
    path = tmp_path / "audit.jsonl"
    path.write_bytes(download(auditor.client))
    rows = [json.loads(line) for line in path.read_text().splitlines()[:-1]]
    chains = {row["chain"] for row in rows}
    assert {0, *range(1, 9)} <= chains  # the migrations' chain 0 and every partitioned chain
    for chain in chains:
        mine = [row for row in rows if row["chain"] == chain]
        assert mine[0]["prev_hash"] == GENESIS
        assert all(b["prev_hash"] == a["hash"] for a, b in itertools.pairwise(mine))
    assert export_verify(path.open("rb")).ok


def test_a_row_moved_to_another_chain_in_an_export_is_found(auditor, tmp_path):
    event("test.export.moved", n=1)
    audit_anchor()
    path = tmp_path / "audit.jsonl"
    path.write_bytes(download(auditor.client))
    lines = path.read_text().splitlines()
    target = next(i for i, line in enumerate(lines) if json.loads(line).get("action") == "test.export.moved")
    row = json.loads(lines[target])
    row["chain"] = row["chain"] % 8 + 1
    lines[target] = json.dumps(row)
    path.write_text("\n".join(lines) + "\n")
    result = export_verify(path.open("rb"))
    assert not result.ok and result.line == target + 1 and "altered" in result.reason  # its hash covers its chain


def test_an_export_from_before_chains_still_verifies(auditor, tmp_path):
    """Files exported before partitioning have no chain column: all their rows are chain 0."""
    path = tmp_path / "audit.jsonl"
    path.write_bytes(download(auditor.client, action="permission."))  # chain-0 events from the migrations
    lines = path.read_text().splitlines()
    rows = [json.loads(line) for line in lines[:-1]]
    legacy = [row for row in rows if row["chain"] == 0]
    assert legacy
    for row in legacy:
        del row["chain"]
    trailer = json.loads(lines[-1])
    trailer["export"].update(count=len(legacy), first_id=legacy[0]["id"], last_id=legacy[-1]["id"])
    trailer["export"]["head_hash"] = legacy[-1]["hash"]
    path.write_text("".join(json.dumps(row) + "\n" for row in [*legacy, trailer]))
    assert export_verify(path.open("rb")).ok


def rewrite(path: Path, index: int, change: Any) -> None:
    lines = path.read_text().splitlines()
    lines[index] = change(lines[index])
    path.write_text("\n".join(line for line in lines if line is not None) + "\n")


def test_an_altered_row_is_found_at_its_line(auditor, tmp_path):
    path = whole_chain(auditor, tmp_path)
    target = len(path.read_text().splitlines()) - 3  # the second test.export.chain row (0-based)

    def alter(line: str) -> str:
        row = json.loads(line)
        row["details"]["n"] = 999
        return json.dumps(row)

    rewrite(path, target, alter)
    result = export_verify(path.open("rb"))
    assert not result.ok and result.line == target + 1 and "altered" in result.reason


def test_a_removed_row_breaks_the_links(auditor, tmp_path):
    path = whole_chain(auditor, tmp_path)
    target = len(path.read_text().splitlines()) - 3
    rewrite(path, target, lambda line: None)
    rewrite(path, -1, lambda line: line.replace('"count":', '"count_was":'))  # even with a doctored trailer
    result = export_verify(path.open("rb"))
    assert not result.ok


def test_a_removed_row_with_a_recounted_trailer_is_still_found_by_its_links(auditor, tmp_path):
    path = whole_chain(auditor, tmp_path)
    lines = path.read_text().splitlines()
    # A row near the end whose chain has a later row: that row's link names it. (The newest row of a chain
    # has nothing after it to link to it; the chains' heads are proven by the anchors, not by links. The
    # third-to-last row was one whenever the suite's other events happened to end its chain.)
    rows = [json.loads(line) for line in lines[:-1]]
    later_chains = set()
    target = None
    for index in range(len(rows) - 1, -1, -1):
        if rows[index]["chain"] in later_chains and index < len(rows) - 1:
            target = index
            break
        later_chains.add(rows[index]["chain"])
    assert target is not None
    trailer = json.loads(lines[-1])
    trailer["export"]["count"] -= 1
    del lines[target]
    lines[-1] = json.dumps(trailer)
    path.write_text("\n".join(lines) + "\n")
    result = export_verify(path.open("rb"))
    assert not result.ok and result.line == target + 1 and "link" in result.reason


def test_a_truncated_export_is_refused(auditor, tmp_path):
    path = whole_chain(auditor, tmp_path)
    path.write_text("\n".join(path.read_text().splitlines()[:-1]) + "\n")
    result = export_verify(path.open("rb"))
    assert not result.ok and "truncated" in result.reason


def test_the_command_exports_and_verifies(tmp_path, capsys):
    event("test.export.cmd", n=1)
    event("audit.anchor", graph="", head="x")
    out = tmp_path / "cmd.jsonl"
    out.write_text("an older file, readable by all")
    out.chmod(0o644)
    call_command("audit_export", "--format", "jsonl", "--output", str(out), "--action", "test.export.cmd")
    assert "exported 1 events" in capsys.readouterr().err
    assert out.stat().st_mode & 0o777 == 0o600  # the trail's details, unmasked: its owner's only
    call_command("audit_export", "--verify", str(out))
    assert "OK, 1 events" in capsys.readouterr().out
    anchors = tmp_path / "anchors.jsonl"
    call_command("audit_export", "--output", str(anchors), "--anchors", "--no-progress")
    rows = [json.loads(line) for line in anchors.read_text().splitlines()[:-1]]
    assert rows and {r["action"] for r in rows} == {"audit.anchor"}
    whole = tmp_path / "whole.jsonl"
    call_command("audit_export", "--output", str(whole), "--no-progress")
    call_command("audit_export", "--verify", str(whole))
    assert "from genesis" in capsys.readouterr().out
    rewrite(whole, 0, lambda line: line.replace('"actor":"', '"actor":"x', 1))
    with pytest.raises(CommandError, match="BROKEN at line 1"):
        call_command("audit_export", "--verify", str(whole))


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_verify_refuses_a_csv_export_by_name_rather_than_call_it_broken(tmp_path, capsys, bom):
    """A CSV export has the hash columns but no trailer: a file cut short would read as a smaller whole one."""
    event("test.export.csvverify")
    out = tmp_path / "audit.csv"
    call_command("audit_export", "--format", "csv", "--output", str(out), "--action", "test.export.csvverify")
    if bom:  # as a spreadsheet saves it
        out.write_text(bom + out.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(CommandError) as refused:
        call_command("audit_export", "--verify", str(out))
    message = str(refused.value)
    assert "only JSON Lines exports can be verified" in message and "--format jsonl" in message
    assert "BROKEN" not in message and "\n" not in message


# --- memory ------------------------------------------------------------------------------

BULK = 200_000


def bulk_load(n: int) -> tuple[int, str]:
    """Append ``n`` events to chain 0 with valid links via COPY, inside the test's transaction (rolled back after).

    Chain 0 holds the events from before the trail was partitioned (the migrations' own, here): nothing else
    appends to it, so no other writer forks it.
    """
    from approvals.audit import event_fields

    prev = AuditEvent.objects.filter(chain=0).order_by("-id").values_list("hash", flat=True).first() or GENESIS
    base = datetime.now(UTC) - timedelta(days=1)
    thread = uuid.uuid4()
    columns = "chain, at, actor_label, action, subject_type, subject_id, thread_id, graph, details, prev_hash, hash"
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY approvals_auditevent ({columns}) FROM STDIN") as cp:
        for i in range(n):
            ev = AuditEvent(
                at=base + timedelta(microseconds=i * 7),
                actor_label="bulk",
                action="test.bulk",
                subject_type="task",
                subject_id=str(i),
                thread_id=thread,
                graph="loan_approval",
                details={"n": i, "decision": "approve", "reason": "bulk load for the export test"},
            )
            digest = event_hash(event_fields(ev), prev)
            cp.write_row(
                (
                    0,
                    ev.at,
                    ev.actor_label,
                    ev.action,
                    ev.subject_type,
                    ev.subject_id,
                    thread,
                    ev.graph,
                    json.dumps(ev.details),
                    prev,
                    digest,
                )
            )
            prev = digest
    return n, prev


class RssSampler(threading.Thread):
    """Samples this process's resident set every 2 ms: the peak growth over the baseline at start."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.base = self.peak = self.rss()
        self.done = threading.Event()

    def rss(self) -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * self.page

    def run(self) -> None:
        while not self.done.wait(0.002):
            self.peak = max(self.peak, self.rss())

    def stop(self) -> int:
        self.done.set()
        self.join(timeout=scaled(5))
        self.peak = max(self.peak, self.rss())
        return self.peak - self.base


def lines_of(chunks: Iterator[bytes]) -> Iterator[bytes]:
    rest = b""
    for chunk in chunks:
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        yield from parts
    if rest:
        yield rest


TRACED_ROWS = 50_000  # tracemalloc slows allocation ~8x: trace the first rows, sample RSS over all of them


@pytest.mark.slow
def test_an_export_of_200k_events_streams_in_bounded_memory(auditor):
    """RSS (which also sees libpq's buffers) over the whole stream; tracemalloc over its first 50,000 rows."""
    t0 = time.perf_counter()
    _, head = bulk_load(BULK)
    loaded = time.perf_counter()
    sampler = RssSampler()
    sampler.start()
    tracemalloc.start()
    response = auditor.client.get(URL, action="test.bulk")
    assert response.status_code == 200
    size = rows = 0
    traced_peak = 0
    last = b""
    for line in lines_of(response.streaming_content):
        size += len(line) + 1
        rows += 1
        last = line
        if rows == TRACED_ROWS:
            traced_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    rss_peak = sampler.stop()
    done = time.perf_counter()
    print(
        f"\nexport of {rows - 1:,} events ({size / 2**20:.0f} MiB JSONL) through the test client: "
        f"peak RSS growth {rss_peak / 2**20:.1f} MiB over the whole stream, tracemalloc peak "
        f"{traced_peak / 2**20:.1f} MiB over the first {TRACED_ROWS:,} rows "
        f"({TRACED_ROWS * size / rows / 2**20:.0f} MiB of output); "
        f"bulk load {loaded - t0:.1f}s, export {done - loaded:.1f}s"
    )
    trailer = json.loads(last)["export"]
    assert trailer["count"] == rows - 1 == BULK and trailer["head_hash"] == head
    assert rss_peak < 50 * 2**20, f"peak RSS growth {rss_peak / 2**20:.1f} MiB"
    assert 0 < traced_peak < 50 * 2**20, f"tracemalloc peak {traced_peak / 2**20:.1f} MiB"


def test_the_console_audit_page_links_an_export_of_its_current_filter(auditor):
    from django.test import Client

    browser = Client()
    browser.force_login(auditor.user)
    page = browser.get("/audit/", {"action": "decision.made", "graph": "loan_approval", "before": "99"})
    assert page.status_code == 200
    html = page.content.decode()
    assert 'href="/api/audit/export?action=decision.made&amp;graph=loan_approval&amp;format=csv"' in html
    assert 'href="/api/audit/export?action=decision.made&amp;graph=loan_approval&amp;format=jsonl"' in html
