"""Verifying an exported JSON Lines file: each row's hash, the links between rows, and the trailer.

Needs nothing but the file (and the hash function): a third party can run it
(``manage.py audit_export --verify FILE``) without access to the database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from approvals.audit import GENESIS, LEGACY_CHAIN, chain_fields, hash_form
from approvals.exports.stream import COLUMNS, HASHED, NEWER_COLUMNS
from approvals.redaction import MASK

# A CSV export carries each row's hash fields but no trailer: a file cut short, or whose newest rows were
# removed, reads exactly as a smaller whole export, and whether links are required (a whole-trail export)
# is unknown. Verifying it would prove less than it seems to, so it is refused, by name.
CSV_NOT_VERIFIABLE = (
    "a CSV export: only JSON Lines exports can be verified (their trailer shows a truncated file); "
    "export with --format jsonl"
)


def export_is_csv(first_line: str | bytes) -> bool:
    """Whether an export's first line is the CSV header (a JSONL export starts with ``{``)."""
    text = first_line.decode(errors="replace") if isinstance(first_line, bytes) else first_line
    header = text.lstrip("\ufeff").strip().split(",")
    return header[:1] == ["id"] and set(header) <= set(COLUMNS)


@dataclass
class VerifyResult:
    ok: bool
    rows: int = 0
    # Rows masked for the exporter: their fields cannot be re-hashed, so nothing offline proves them. Of
    # those, ``masked_linked`` are at least followed in the file by the next row of their chain, whose
    # prev_hash is their hash (their place in the chain is proven; their fields still are not).
    masked: int = 0
    masked_linked: int = 0
    actor_unhashed: int = 0  # rows from before the actor's user id was hashed: their actor_id is not covered
    chained: bool = False
    line: int | None = None  # first broken line (1-based)
    reason: str = ""


def export_verify(lines: Iterable[str | bytes]) -> VerifyResult:
    """Re-check a JSONL export: every row's hash over its fields, the links between rows, and the trailer.

    Links are required when the trailer says the export is ``chained`` (the
    whole trail): each row links to the row before it in its chain, and each
    chain starts at the genesis hash. In a filtered export consecutive rows of
    a chain need not be neighbours, so only each row's own hash is checked.

    A masked row's hash cannot be recomputed from what was exported: it is counted (``masked``), never
    verified. Its visible fields could have been edited and nothing here would see it; a file with masked
    rows is checked against the trail itself with ``audit_export --verify FILE --against-db``.

    Each row's hash decides whether it covers the row's ``actor_id`` (``hash_form``): once a row of a chain
    does, every later row of that chain must (rows come in id order, filtered or not), as in ``audit_verify``.
    """
    heads: dict[int, str] = {}  # chain -> hash of its newest row so far
    actor_hashed: set[int] = set()  # chains with a row whose hash covers its actor's user id
    masked_last: set[int] = set()  # chains whose newest row so far is masked
    masked_linked = 0
    last_hash: str | None = None
    prev_id = 0
    rows = masked = actor_unhashed = 0
    first_link_break: tuple[int, str] | None = None
    first_id: int | None = None
    trailer: dict[str, Any] | None = None
    last_line = 0
    for number, raw in enumerate(lines, start=1):
        last_line = number
        text = raw.decode() if isinstance(raw, bytes) else raw
        if not text.strip():
            continue
        if trailer is not None:
            return VerifyResult(False, rows, masked, line=number, reason="content after the trailer")
        try:
            data = json.loads(text)
        except ValueError:
            return VerifyResult(False, rows, masked, line=number, reason="not valid JSON")
        if isinstance(data, dict) and set(data) == {"export"}:
            trailer = data["export"]
            continue
        if not isinstance(data, dict) or not set(COLUMNS) - NEWER_COLUMNS <= set(data):
            return VerifyResult(False, rows, masked, line=number, reason="not an exported audit row")
        chain = data.get("chain", LEGACY_CHAIN)
        if not isinstance(chain, int) or isinstance(chain, bool) or chain < 0:
            return VerifyResult(False, rows, masked, line=number, reason="chain is not a chain number")
        if not isinstance(data["id"], int) or data["id"] <= prev_id:
            return VerifyResult(False, rows, masked, line=number, reason="ids are not increasing")
        if data["masked"]:
            masked += 1
        else:
            fields = chain_fields({k: data[k] for k in HASHED if k in data}, chain=chain, event_id=data["id"])
            before_cutover = chain not in actor_hashed or chain == LEGACY_CHAIN
            form = hash_form(fields, data["prev_hash"], data["hash"], before_cutover=before_cutover)
            if form is None:
                downgraded = hash_form(fields, data["prev_hash"], data["hash"], before_cutover=True) is False
                reason = (
                    f"event {data['id']}: hashed without its actor's user id after a row of chain {chain} that "
                    "covers it (downgraded)"
                    if downgraded
                    else f"event {data['id']}: hash does not match its fields (altered)"
                )
                return VerifyResult(False, rows, masked, line=number, reason=reason)
            if form:
                actor_hashed.add(chain)
            else:
                actor_unhashed += 1
        # Hashes withheld from a masked exporter (gateway.audit_hashes_withheld): this row's link and the
        # next one's cannot be told, nor are they claimed.
        withheld = data["masked"] and MASK in (data["prev_hash"], data["hash"])
        proven = not withheld and heads.get(chain) != MASK and data["prev_hash"] == heads.get(chain, GENESIS)
        linked = proven or withheld or heads.get(chain) == MASK
        if chain in masked_last and proven:
            masked_linked += 1
        masked_last.discard(chain)
        if data["masked"]:
            masked_last.add(chain)
        if not linked and first_link_break is None:
            first_link_break = (
                number,
                f"event {data['id']}: prev_hash does not link to the row before it in chain {chain}"
                if chain in heads
                else f"event {data['id']}: chain {chain} must start at the genesis hash in a whole-trail export",
            )
        if first_id is None:
            first_id = data["id"]
        heads[chain] = last_hash = data["hash"]
        prev_id = data["id"]
        rows += 1
    if trailer is None:
        return VerifyResult(False, rows, masked, line=last_line + 1, reason="no trailer: the file is truncated")
    chained = bool(trailer.get("chained"))
    result = VerifyResult(True, rows, masked, masked_linked, actor_unhashed, chained=chained)
    expected = {"count": rows, "first_id": first_id, "last_id": prev_id or None, "head_hash": last_hash}
    for key, value in expected.items():
        if trailer.get(key) != value:
            return _fail(result, last_line, f"trailer {key} is {trailer.get(key)!r}, the rows say {value!r}")
    if chained and first_link_break is not None:
        return _fail(result, *first_link_break)
    return result


def _fail(result: VerifyResult, line: int, reason: str) -> VerifyResult:
    result.ok, result.line, result.reason = False, line, reason
    return result
