"""A recorded gpu_facts result with any key of any card replaced by any JSON value: a result or a GpuFactsError
naming the key -- never another exception (issue 23: recorded facts of a wrong type crashed gpu_facts)."""
import copy
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.host.gpu_facts import GpuFactsError, load_facts

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "gpu")
BOARDS = ["b650.facts.json", "b850-proart.facts.json"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


def _paths(value, prefix=()):
    """Every (path) to a value inside the recorded result's cards, the cards' own keys included."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _load(board):
    with open(os.path.join(FIXTURES, board)) as fh:
        return json.load(fh)


def _set(doc, path, value):
    target = doc
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value


def _write(tmp_path, doc):
    path = tmp_path / "facts.json"
    # NaN/Infinity written as JSON's non-standard tokens: the reader must refuse them, not compare with them
    path.write_text(json.dumps(doc, allow_nan=True))
    return str(path)


@pytest.mark.parametrize("board", BOARDS)
def test_the_recorded_boards_load(board, tmp_path):
    assert load_facts(_write(tmp_path, _load(board)))["gpus"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(board=st.sampled_from(BOARDS), pick=st.integers(0, 10 ** 6), value=json_values)
def test_any_key_any_value_is_a_result_or_a_named_refusal(board, pick, value, tmp_path):
    doc = _load(board)
    paths = [("gpus",) + p for p in _paths(doc["gpus"]) if p] + [("facts_warnings",), ("sources",)]
    path = paths[pick % len(paths)]
    mutated = copy.deepcopy(doc)
    _set(mutated, path, value)
    try:
        result = load_facts(_write(tmp_path, mutated))
    except GpuFactsError as exc:
        assert str(exc).startswith("facts_file "), exc
        return
    json.dumps(result, allow_nan=False)      # what comes back is JSON again: no NaN/Inf slipped through
    assert isinstance(result["topology"], str)


@pytest.mark.parametrize("key,value,match", [
    ("runtime_index", "0", r"gpus\[0\]\.runtime_index must be an integer >= 0"),
    ("cuda_arch", "sm90", r"gpus\[0\]\.cuda_arch must be a string of digits"),
    ("links", {"gbps": 1}, r"gpus\[0\]\.links must be a list"),
    ("vram_total_bytes", -1, r"gpus\[0\]\.vram_total_bytes is -1"),
    ("narrowest_link_gbps", float("nan"), r"narrowest_link_gbps: nan is not a finite number"),
])
def test_a_wrong_type_names_the_key(key, value, match, tmp_path):
    doc = _load("b850-proart.facts.json")
    doc["gpus"][0][key] = value
    if key == "narrowest_link_gbps":
        doc["gpus"][0]["links"] = []
    with pytest.raises(GpuFactsError, match=match):
        load_facts(_write(tmp_path, doc))
