"""A search filter of many keys is a 4xx naming it, never a 500 (the embedded SQLite refused the statement).

Each key of a ``/lg/`` search filter becomes a condition of one statement; SQLite refuses one of more
than ~1000 nested terms ("Expression tree is too large"), which answered 500 for a ``values`` filter
of 500 keys on the embedded default. Filters name at most ``FILTER_KEYS_MAX`` keys, on every database.
"""

from __future__ import annotations

import pytest

from lgplatform.schemas import FILTER_KEYS_MAX
from tests.conftest import ApiClient
from tests.sqlite_probe import ADMIN_PROBE, sqlite_probe

pytestmark = pytest.mark.usefixtures("live_db")


def _keys(count: int) -> dict[str, str]:
    return {f"k{i}": "v" for i in range(count)}


SEARCHES = [
    ("/lg/threads/search", "values"),
    ("/lg/threads/search", "metadata"),
    ("/lg/assistants/search", "metadata"),
    ("/lg/store/items/search", "filter"),
]


@pytest.mark.parametrize("path,field", SEARCHES)
def test_a_filter_of_too_many_keys_is_refused_naming_it(personas, path, field):
    api = ApiClient(personas["admin"].token)
    refused = api.post(path, {field: _keys(FILTER_KEYS_MAX + 1)})
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == field
    assert api.post(path, {field: _keys(FILTER_KEYS_MAX)}).status_code == 200


def test_history_metadata_of_too_many_keys_is_refused_naming_it(personas):
    api = ApiClient(personas["operator"].token)
    thread = api.post("/lg/threads", {}).json()["thread_id"]
    refused = api.post(f"/lg/threads/{thread}/history", {"metadata": _keys(FILTER_KEYS_MAX + 1)})
    assert (refused.status_code, refused.json()["error"]["field"]) == (422, "metadata")


_SQLITE_PROBE = (
    ADMIN_PROBE
    + """
from lgplatform.schemas import FILTER_KEYS_MAX

keys = {f"k{i}": "v" for i in range(FILTER_KEYS_MAX)}
out = {}
for path, field in [("/lg/threads/search", "values"), ("/lg/threads/search", "metadata"),
                    ("/lg/store/items/search", "filter")]:
    body = json.dumps({field: keys})
    out[f"{path} {field}"] = Client().post(path, body, content_type="application/json", headers=headers).status_code
print(json.dumps(out))
"""
)


@pytest.mark.embedded
def test_the_largest_filter_allowed_runs_on_the_embedded_sqlite(tmp_path):
    assert set(sqlite_probe(_SQLITE_PROBE, tmp_path / "var").values()) == {200}


_SQLITE_TYPES_PROBE = (
    ADMIN_PROBE
    + """
post = lambda path, body: Client().post(path, json.dumps(body), content_type="application/json", headers=headers)
literal = post("/lg/threads", {"metadata": {"flag": True, "f": False, "nul": None, "n": 5, "s": "x"}}).json()
text = post("/lg/threads", {"metadata": {"flag": "true", "f": "false", "nul": "null", "n": "5", "s": "x"}}).json()
names = {literal["thread_id"]: "literal", text["thread_id"]: "text"}
out = {}
for key, value in [("flag", True), ("flag", "true"), ("f", False), ("f", "false"), ("nul", None), ("nul", "null"),
                   ("n", 5), ("n", "5"), ("s", "x")]:
    found = post("/lg/threads/search", {"metadata": {key: value}, "limit": 10}).json()
    out[f"{key}={json.dumps(value)}"] = sorted(names[t["thread_id"]] for t in found if t["thread_id"] in names)
print(json.dumps(out))
"""
)


@pytest.mark.embedded
def test_a_metadata_filter_tells_a_json_literal_from_its_string_on_the_embedded_sqlite(tmp_path):
    """An outside tester's find: on ``make run`` ``threads.search(metadata={"flag": True})`` found threads whose
    flag was the string "true" too (and false, null likewise), as LangGraph Server's jsonb filter does not."""
    assert sqlite_probe(_SQLITE_TYPES_PROBE, tmp_path / "var") == {
        "flag=true": ["literal"],
        'flag="true"': ["text"],
        "f=false": ["literal"],
        'f="false"': ["text"],
        "nul=null": ["literal"],
        'nul="null"': ["text"],
        "n=5": ["literal"],
        'n="5"': ["text"],
        's="x"': ["literal", "text"],
    }
