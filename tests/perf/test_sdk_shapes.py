"""bench/sdk_shapes.py: what it compares of two answers, and that only listed differences are accepted."""

from __future__ import annotations

from bench.sdk_shapes import _accepted, compare, shape


def test_values_are_not_compared_but_keys_types_and_statuses_are():
    ours = {"thread_id": "a", "status": "idle", "values": {"amount": 1}, "tasks": [{"id": "x", "result": None}]}
    theirs = {"thread_id": "b", "status": "idle", "values": {"amount": 2}, "tasks": [{"id": "y", "result": None}]}
    assert compare({"call": shape(ours)}, {"call": shape(theirs)}) == []
    found = compare(
        {"call": shape({**ours, "status": "interrupted", "extra": 1})},
        {"call": shape({**theirs, "values": None, "state_updated_at": "t"})},
    )
    assert {(f["path"], f["what"]) for f in found} == {
        (".status", "gatehouse 'interrupted', langgraph dev 'idle'"),
        (".extra", "only gatehouse sends it"),
        (".state_updated_at", "only langgraph dev sends it"),
        (".values", "gatehouse an object, langgraph dev null"),
    }


def test_ids_used_as_keys_and_list_elements_are_merged_before_comparing():
    ours = {"interrupts": {"8556626f-a24d-4e5d-86db-e03c3f4b04c1": [{"id": "1", "value": 1}, {"id": "2", "value": 2}]}}
    theirs = {"interrupts": {"9f4feee2-f7ef-5627-0310-73475fd67078": [{"id": "3", "value": 3}]}}
    assert compare({"c": shape(ours)}, {"c": shape(theirs)}) == []
    # an object in one element and null in another is "an object or null", on either side alike
    assert compare({"c": shape([None, {"a": 1}])}, {"c": shape([{"a": 2}, None])}) == []


def test_a_difference_is_accepted_only_where_a_reason_names_it():
    server_key = {"call": "threads.get_state (idle)", "path": ".metadata.langgraph_version", "what": ""}
    assert _accepted(server_key)
    assert not _accepted({**server_key, "path": ".metadata.step"})
    assert not _accepted({"call": "runs.get", "path": ".status", "what": "gatehouse 'interrupted'"})
    assert _accepted({"call": "stream values start: end", "path": "", "what": "only gatehouse"})
    assert not _accepted({"call": "threads.get (idle)", "path": "", "what": "only gatehouse"})
    assert _accepted({"call": "threads.get_history (idle)", "path": "[].state_unreadable", "what": "only gatehouse"})
