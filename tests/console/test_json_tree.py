"""The JSON tree of a state or payload (console.templatetags.console.json_tree): how it counts."""

from __future__ import annotations

from console.templatetags.console import json_tree


def test_a_json_tree_counts_one_key_and_one_item_in_the_singular():
    html = json_tree({"only": ["one"]})
    assert '<span class="j-count">1 key</span>' in html and '<span class="j-count">1 item</span>' in html
    assert "2 keys" in json_tree({"a": 1, "b": 2})
