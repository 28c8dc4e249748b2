"""Field-level redaction of sensitive state paths.

A graph declares sensitive paths in ``langgraph.json`` (``"sensitive_paths":
["applicant.date_of_birth", "documents[*].number"]``). A path matches at any
depth by suffix, so the same declaration masks the field in the state, in an
interrupt payload that quotes it (``details.applicant.date_of_birth``), in
diffs, exports and audit details.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

MASK = "•••• redacted"

Segment = str  # a key, or "*" for every list item / dict value
# The policy of a graph whose rules are unknown (no longer registered): every value masked, the structure
# (and null, which says nothing) kept. It fails closed for a reader without "view sensitive".
EVERY_VALUE = "**"
_EVERY = (EVERY_VALUE,)


def path_parse(path: str) -> tuple[Segment, ...]:
    segments: list[Segment] = []
    for part in path.split("."):
        while "[" in part:
            head, _, rest = part.partition("[")
            if head:
                segments.append(head)
            inner, _, part = rest.partition("]")
            segments.append("*" if inner in ("*", "") else inner)
        if part:
            segments.append(part)
    return tuple(segments)


# A name (no dots or brackets, not padded with spaces) or "*", then any "[n]", "[*]" or "[]"; dot-separated.
_SEGMENT = r"(?:[^.\[\]\s](?:[^.\[\]]*[^.\[\]\s])?)(?:\[(?:\*|\d+)?\])*"
_PATH = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT})*")


def path_valid(path: str) -> bool:
    """Whether ``path`` is a well-formed redaction path (``applicant.ssn``, ``docs[*].number``).

    ``path_parse`` reads anything leniently ("a..b" as "a.b"); a path someone declares is checked
    with this first, so a typo is refused rather than silently masking something else.
    """
    return _PATH.fullmatch(path) is not None


def redact(value: Any, paths: Sequence[str]) -> tuple[Any, list[str]]:
    """Return ``value`` with every match of ``paths`` masked, and the concrete paths masked."""
    if not paths:
        return value, []
    patterns = [path_parse(p) for p in paths]
    applied: list[str] = []
    masked = _walk(value, (), patterns, applied)
    return masked, sorted(set(applied))


def _matches(location: tuple[str, ...], pattern: tuple[Segment, ...]) -> bool:
    if len(location) < len(pattern):
        return False
    tail = location[len(location) - len(pattern) :]
    return all(p == "*" or p == loc for p, loc in zip(pattern, tail, strict=True))


def _walk(value: Any, location: tuple[str, ...], patterns: list[tuple[Segment, ...]], applied: list[str]) -> Any:
    if location and _EVERY in patterns and value is not None and not isinstance(value, dict | list):
        applied.append(_render(location))
        return MASK
    if location and any(_matches(location, p) for p in patterns):
        applied.append(_render(location))
        return MASK
    if isinstance(value, dict):
        return {k: _walk(v, (*location, str(k)), patterns, applied) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, (*location, str(i)), patterns, applied) for i, v in enumerate(value)]
    return value


def _render(location: tuple[str, ...]) -> str:
    out = ""
    for segment in location:
        out += f"[{segment}]" if segment.isdigit() else (f".{segment}" if out else segment)
    return out


class HiddenEdited(ValueError):
    """An edit put a value of its own at a location its author sees masked, where a value is stored."""

    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


_ABSENT: Any = object()


def hidden_kept(
    patch: dict[str, Any], stored: dict[str, Any], paths: Sequence[str], *, whole: bool = False
) -> dict[str, Any]:
    """A state ``patch`` by an editor who sees ``paths`` masked, with every redacted location they left
    alone (the mask sent back, or the field left out) holding its value in the ``stored`` state.

    A state edit replaces a key's whole value, so editing ``applicant.name`` in a form that showed the
    date of birth masked either sent the mask back (refused) or dropped the field, which erased the
    hidden value. Raises ``HiddenEdited`` where the edit puts any value but the mask at a redacted
    location that holds one, the stored value included: an editor cannot change what they cannot see,
    nor test a guess of it.

    ``whole``: ``patch`` replaces all of ``stored`` (a store item's value), not key by key. A redacted
    top-level key left out is kept too, and the result must hold exactly the redacted values ``stored``
    holds: one it would drop (a parent replaced by a scalar, a list cut short) or add (where nothing
    was stored) raises ``HiddenEdited`` as well, so the writer neither erases nor plants what they
    cannot read back. Key by key (a state edit), a redacted value the replaced key held and the edit would
    drop raises ``HiddenEdited`` too; a value put where none was stored is the editor's own.
    """
    patterns = [path_parse(p) for p in paths]
    if not patterns:
        return patch
    kept = {key: _keep(value, stored.get(key, _ABSENT), (key,), patterns) for key, value in patch.items()}
    if not whole:
        # A key the patch replaces keeps every redacted value it held: a list cut short, or a parent replaced
        # by a scalar, erased one its editor never saw (``{"documents": []}`` took a passport number).
        for key in kept.keys() & stored.keys():
            held: dict[tuple[str, ...], Any] = {}
            left: dict[tuple[str, ...], Any] = {}
            _hidden_at(stored[key], (str(key),), patterns, held)
            _hidden_at(kept[key], (str(key),), patterns, left)
            for location in sorted(held.keys() - left.keys()):
                raise HiddenEdited(_render(location))
        return kept
    for key, value in stored.items():
        if key not in patch and any(_matches((str(key),), p) for p in patterns):
            kept[key] = value
    before: dict[tuple[str, ...], Any] = {}
    after: dict[tuple[str, ...], Any] = {}
    _hidden_at(stored, (), patterns, before)
    _hidden_at(kept, (), patterns, after)
    for location in sorted(before.keys() | after.keys()):
        if location not in before or location not in after or before[location] != after[location]:
            raise HiddenEdited(_render(location))
    return kept


def _hidden_at(
    value: Any, location: tuple[str, ...], patterns: list[tuple[Segment, ...]], found: dict[tuple[str, ...], Any]
) -> None:
    """Every redacted location in ``value`` (as ``redact`` finds them) with the value it holds."""
    if location and any(_matches(location, p) for p in patterns):
        found[location] = value
    elif isinstance(value, dict):
        for k, v in value.items():
            _hidden_at(v, (*location, str(k)), patterns, found)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _hidden_at(v, (*location, str(i)), patterns, found)


def hidden_from(value: Any, source: Any, paths: Sequence[str]) -> Any:
    """``value`` with each of its redacted locations holding ``source``'s value there (where ``source`` has
    one): two bodies that differ only where a reader sees masks compare equal after it."""
    patterns = [path_parse(p) for p in paths]
    return _from(value, source, (), patterns) if patterns else value


def _from(value: Any, source: Any, location: tuple[str, ...], patterns: list[tuple[Segment, ...]]) -> Any:
    if location and any(_matches(location, p) for p in patterns):
        return value if source is _ABSENT else source
    if isinstance(value, dict):
        other = source if isinstance(source, dict) else {}
        return {k: _from(v, other.get(k, _ABSENT), (*location, str(k)), patterns) for k, v in value.items()}
    if isinstance(value, list):
        items = source if isinstance(source, list) else []
        return [
            _from(v, items[i] if i < len(items) else _ABSENT, (*location, str(i)), patterns)
            for i, v in enumerate(value)
        ]
    return value


def hidden_removed(value: Any, paths: Sequence[str]) -> Any:
    """``value`` without its redacted locations (a dict's key dropped, a list's item as None): what a
    writer who sees ``paths`` masked wrote themselves, once ``hidden_kept`` kept the rest."""
    patterns = [path_parse(p) for p in paths]
    return _removed(value, (), patterns) if patterns else value


def _removed(value: Any, location: tuple[str, ...], patterns: list[tuple[Segment, ...]]) -> Any:
    if isinstance(value, dict):
        return {
            k: _removed(v, (*location, str(k)), patterns)
            for k, v in value.items()
            if not any(_matches((*location, str(k)), p) for p in patterns)
        }
    if isinstance(value, list):
        out: list[Any] = []
        for i, v in enumerate(value):
            here = (*location, str(i))
            out.append(None if any(_matches(here, p) for p in patterns) else _removed(v, here, patterns))
        return out
    return value


def _keep(edited: Any, stored: Any, location: tuple[str, ...], patterns: list[tuple[Segment, ...]]) -> Any:
    if any(_matches(location, p) for p in patterns):
        if stored is _ABSENT:
            return edited  # nothing was hidden here: the editor's own value (a mask sent back is refused later)
        if edited == MASK:
            return stored
        # The stored value itself is refused like any other: accepting it made every submission a guess
        # the answer told right from wrong (a redacted date of birth found by trying dates).
        raise HiddenEdited(_render(location))
    if isinstance(edited, dict):
        before = stored if isinstance(stored, dict) else {}
        kept = {k: _keep(v, before.get(k, _ABSENT), (*location, str(k)), patterns) for k, v in edited.items()}
        for k, v in before.items():  # a redacted field left out of the edit is kept, not erased
            if k not in edited and any(_matches((*location, str(k)), p) for p in patterns):
                kept[k] = v
        return kept
    if isinstance(edited, list):
        before_list = stored if isinstance(stored, list) else []
        return [
            _keep(v, before_list[i] if i < len(before_list) else _ABSENT, (*location, str(i)), patterns)
            for i, v in enumerate(edited)
        ]
    return edited


def filter_split(wanted: dict[str, Any], paths: Sequence[str]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """Split a top-level equality filter for a reader who sees ``paths`` masked.

    Returns (plain, masked): ``plain`` keys reach no redacted location, so they
    compare with the real values exactly as with the masked ones; ``masked``
    keys hold the mask at every redacted location they reach and must be
    compared with the masked values. None when the filter puts a real value at
    a redacted location: the masked values can never equal it.
    """
    plain: dict[str, Any] = {}
    masked: dict[str, Any] = {}
    for key, value in wanted.items():
        shown, applied = redact({key: value}, paths)
        if not applied:
            plain[key] = value
        elif shown[key] == value:
            masked[key] = value
        else:
            return None
    return plain, masked


# Conversation (comments): free text cannot be masked by path, only by value.
TEXT_MASK = "•••"
# Shorter values are not masked in free text: a one-character "value" would mask every such
# letter or digit in every comment, and a value that short is no secret a mask could keep.
TEXT_MASK_MIN_LENGTH = 2


def redacted_values(value: Any, paths: Sequence[str]) -> set[str]:
    """Every scalar found at (or under) a location ``paths`` redact, as text: what a reader must not be quoted."""
    if not paths:
        return set()
    patterns = [path_parse(p) for p in paths]
    found: set[str] = set()
    _collect(value, (), patterns, found, inside=False)
    return found


def _collect(
    value: Any, location: tuple[str, ...], patterns: list[tuple[Segment, ...]], found: set[str], *, inside: bool
) -> None:
    inside = inside or bool(location and (_EVERY in patterns or any(_matches(location, p) for p in patterns)))
    if isinstance(value, dict):
        for k, v in value.items():
            _collect(v, (*location, str(k)), patterns, found, inside=inside)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _collect(v, (*location, str(i)), patterns, found, inside=inside)
    elif inside and value is not None and not isinstance(value, bool):
        text = str(value).strip()
        if len(text) >= TEXT_MASK_MIN_LENGTH and text != MASK:
            found.add(text)


def values_masked(value: Any, values: Collection[str]) -> Any:
    """``value`` (any JSON) with each scalar that is one of ``values`` replaced by ``MASK`` and each string
    quoting one masked as ``text_mask`` masks it: for what carries a redacted value under a path of its own
    (an effect's arguments: ``perform_effect("payout", args={"iban": state["employee"]["iban"]})``)."""
    if not values:
        return value
    lowered = {v.lower() for v in values}
    return _masked_by_value(value, values, lowered)


def _masked_by_value(value: Any, values: Collection[str], lowered: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: _masked_by_value(v, values, lowered) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked_by_value(v, values, lowered) for v in value]
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip()
    if text.lower() in lowered:
        return MASK
    return text_mask(value, values) if isinstance(value, str) else value


def text_mask(text: str, values: Collection[str]) -> str:
    """``text`` with every occurrence of each of ``values`` (any letter case) replaced by ``TEXT_MASK``.

    Longest values first, so a value that contains another is masked whole.
    """
    if not values or not text:
        return text
    pattern = "|".join(re.escape(v) for v in sorted(values, key=lambda v: (-len(v), v)))
    return re.sub(pattern, TEXT_MASK, text, flags=re.IGNORECASE)


def strings_masked(value: Any, values: Collection[str], *, kept: Collection[str] = ()) -> Any:
    """``value`` with every string in it through ``text_mask`` (the mask itself, and the values of keys
    named in ``kept`` at any depth, left alone)."""
    if not values:
        return value
    if isinstance(value, str):
        return value if value == MASK else text_mask(value, values)
    if isinstance(value, dict):
        return {k: v if k in kept else strings_masked(v, values, kept=kept) for k, v in value.items()}
    if isinstance(value, list):
        return [strings_masked(v, values, kept=kept) for v in value]
    return value


def is_message(value: Any) -> bool:
    """A chat message as state holds it once serialised: LangChain's (``type`` and ``content``) or an
    OpenAI-style one sent as input (``role`` and ``content``)."""
    return (
        isinstance(value, dict)
        and "content" in value
        and (isinstance(value.get("type"), str) or isinstance(value.get("role"), str))
    )


def holds_message(value: Any) -> bool:
    """Whether ``value`` is or contains a message (``is_message``) at any depth."""
    if is_message(value):
        return True
    if isinstance(value, dict):
        return any(holds_message(v) for v in value.values())
    if isinstance(value, list):
        return any(holds_message(v) for v in value)
    return False


def state_redact(value: Any, paths: Sequence[str], *, quoted: Collection[str] = ()) -> tuple[Any, list[str]]:
    """``redact``, and every message in ``value`` (a state, or anything carrying one) with the values a
    reader may not see masked in its text: its content, content blocks, tool-call arguments, every string.

    The values are those ``redacted_values`` finds in ``value`` itself, and ``quoted`` (found in what else
    the thread carried). A message is free text: a value its node put in words (``f"I know {secret}"``)
    stands at no path, so only its value can find it. The masked messages' locations join the paths.
    """
    if not paths:
        return value, []
    masked, applied = redact(value, paths)
    values = redacted_values(value, paths) | set(quoted)
    if not values:
        return masked, applied
    spoken: list[str] = []
    masked = _messages_masked(masked, (), values, spoken)
    return masked, sorted(set(applied) | set(spoken))


def _messages_masked(value: Any, location: tuple[str, ...], values: set[str], spoken: list[str]) -> Any:
    if is_message(value):
        shown = strings_masked(value, values)
        if shown != value:
            spoken.append(_render(location) or "message")
        return shown
    if isinstance(value, dict):
        return {k: _messages_masked(v, (*location, str(k)), values, spoken) for k, v in value.items()}
    if isinstance(value, list):
        return [_messages_masked(v, (*location, str(i)), values, spoken) for i, v in enumerate(value)]
    return value
