"""The one typed reader (issue 33): every shape refuses by name what is not of it, and never raises anything
but ShapeError -- whatever JSON value, text or depth comes in."""
import json
import re
import math

import pytest
from hypothesis import given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

PROPS = tr.Obj({
    "total_slots": tr.Int(1, 4096),
    "default_generation_settings": tr.Obj({"n_ctx": tr.Int(0, 1 << 24)}, required=["n_ctx"]),
    "modalities": tr.Obj({"vision": tr.Bool()}),
    "build_info": tr.Str(max_len=200, name=True),
}, required=["total_slots", "default_generation_settings"])
REAL_PROPS = {"total_slots": 2, "default_generation_settings": {"n_ctx": 163840, "temperature": 0.6},
              "modalities": {"vision": True, "audio": False}, "build_info": "b11434-unknown"}


def test_a_real_answer_reads_to_its_typed_fields_only():
    got = tr.read(PROPS, REAL_PROPS, "/props")
    assert got == {"total_slots": 2, "default_generation_settings": {"n_ctx": 163840},
                   "modalities": {"vision": True}, "build_info": "b11434-unknown"}


@pytest.mark.parametrize("answer, text", [
    ({"total_slots": 2, "default_generation_settings": []},
     "/props default_generation_settings: expected an object, got a list"),
    ({"total_slots": 2, "default_generation_settings": {"n_ctx": 1e300}},
     "/props default_generation_settings.n_ctx: expected an integer from 0 to 16777216, got a number 1e+300"),
    ({"total_slots": "2", "default_generation_settings": {"n_ctx": 1}},
     "/props total_slots: expected an integer from 1 to 4096, got a string '2'"),
    ({"default_generation_settings": {"n_ctx": 1}}, "/props: no total_slots"),
    ({"total_slots": 2, "default_generation_settings": {"n_ctx": 1}, "modalities": "vision"},
     "/props modalities: expected an object, got a string 'vision'"),
    ({"total_slots": True, "default_generation_settings": {"n_ctx": 1}}, "/props total_slots: expected an integer"),
])
def test_a_wrong_shape_is_refused_naming_source_and_path(answer, text):
    with pytest.raises(tr.ShapeError) as err:
        tr.read(PROPS, answer, "/props")
    assert str(err.value).startswith(text)


@settings(max_examples=300, deadline=None)
@given(case=hostile.hostile_answers(REAL_PROPS))
def test_any_value_anywhere_reads_or_is_refused_by_name(case):
    path, answer = case
    try:
        got = tr.read(PROPS, answer, "/props")
    except tr.ShapeError as exc:
        assert str(exc).startswith("/props")
        return
    # what reads is typed: the fields hold their types, whatever was put where
    assert isinstance(got["total_slots"], int) and not isinstance(got["total_slots"], bool)
    assert isinstance(got["default_generation_settings"]["n_ctx"], int)
    if "modalities" in got and "vision" in got["modalities"]:
        assert isinstance(got["modalities"]["vision"], bool)


@settings(max_examples=300, deadline=None)
@given(value=hostile.json_values())
def test_load_json_never_raises_anything_but_a_shape_error(value):
    try:
        got = tr.load_json(hostile.dumps(value), "the answer")
    except tr.ShapeError as exc:
        assert str(exc).startswith("the answer")
        return
    tr.bound(got, "again")      # what loads is bounded: finite, int64, shallow


@pytest.mark.parametrize("levels", [tr.JSON_DEPTH + 2, 1000, 200000])
def test_json_nested_deeper_than_the_bound_is_refused_not_a_recursion_error(levels):
    text = "[" * levels + "]" * levels
    with pytest.raises(tr.ShapeError, match="nested deeper"):
        tr.load_json(text, "/slots")


@pytest.mark.parametrize("text, why", [
    ("NaN", "not a finite number"), ("[Infinity]", "not a finite number"), ("[1e400]", "not a finite number"),
    ("9" * 5000, "not JSON"), (b"\xff\xfe", "not UTF-8"), ("", "not JSON"), ("{", "not JSON"),
])
def test_load_json_refuses_what_is_no_bounded_json(text, why):
    with pytest.raises(tr.ShapeError, match=why):
        tr.load_json(text, "src")


def test_a_name_refuses_a_trailing_newline_a_pattern_matches_in_full():
    name = tr.Str(name=True, pattern=r"[a-z-]+")
    assert name.read("frank-medium", "s") == "frank-medium"
    for bad in ("frank-medium\n", "frank\x1b[2J", "Frank"):
        with pytest.raises(tr.ShapeError):
            name.read(bad, "s")


@pytest.mark.parametrize("text", ["1_0", "1.2.3", "0x10", "nan", "inf", "1e400", "9" * 21, "", " ", "１２", "²"])
def test_text_numbers_follow_the_grammar(text):
    with pytest.raises(tr.ShapeError):
        tr.int_text(text, "VmRSS")
    with pytest.raises(tr.ShapeError):
        tr.num_text(text, "a gauge")


def test_text_numbers_read_what_kernels_and_tools_write():
    assert tr.int_text(" 1234 ", "VmRSS") == 1234
    assert tr.num_text("12.5", "x") == 12.5
    assert tr.num_text("-3e2", "x") == -300.0


@settings(max_examples=300, deadline=None)
@given(text=hostile.hostile_text())
def test_text_numbers_never_raise_anything_but_a_shape_error(text):
    for reader in (tr.int_text, tr.num_text):
        try:
            got = reader(text, "src")
        except tr.ShapeError:
            continue
        assert math.isfinite(got)


REAL_METRICS = """# HELP llamacpp:n_drafted_total Number of speculative decoding drafted tokens
# TYPE llamacpp:n_drafted_total counter
llamacpp:n_drafted_total 120
llamacpp:prompt_tokens_seconds 123.45
llm_verify_check{check="stream",service="frank-medium"} 1
x{a="b\\"c",} 2 1700000000
"""


def test_metrics_read_by_the_grammar():
    got = tr.metrics(REAL_METRICS, "/metrics")
    assert got["llamacpp:n_drafted_total"] == 120.0
    assert got['llm_verify_check{check="stream",service="frank-medium"}'] == 1.0
    assert got['x{a="b\\"c",}'] == 2.0


@pytest.mark.parametrize("line", ["llamacpp:n_drafted_total 1_0", "llamacpp:n_drafted_total 0x10",
                                  "llamacpp:n_drafted_total ten", "9bad 1", "a{b=c} 1", "a 1 2 3",
                                  "llamacpp:n_drafted_total 1\nllamacpp:n_drafted_total 2"])
def test_a_metrics_line_off_the_grammar_is_refused_by_its_number(line):
    with pytest.raises(tr.ShapeError, match="/metrics line"):
        tr.metrics(line, "/metrics")


@settings(max_examples=300, deadline=None)
@given(text=hostile.hostile_text(200))
def test_metrics_never_raise_anything_but_a_shape_error(text):
    try:
        got = tr.metrics(text, "/metrics")
    except tr.ShapeError:
        return
    assert all(isinstance(v, float) for v in got.values())


@settings(max_examples=300, deadline=None)
@given(text=st.text())
def test_printable_leaves_no_control_character(text):
    out = tr.printable(text)
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in out)
    assert "\n" in tr.printable("a\nb", lines=True)


def test_a_refusal_quotes_no_raw_control_character():
    with pytest.raises(tr.ShapeError) as err:
        tr.Int().read("\x1b[2J" * 3, "smi")
    assert "\x1b" not in str(err.value) and "\\x1b" in str(err.value)


def test_one_of_and_optional_lists_and_maps():
    shape = tr.Obj({"efforts": tr.Map(tr.Int(100, 599)), "ids": tr.List(tr.Optional(tr.Str(name=True)), max_len=2)})
    good = {"efforts": {"low": 200}, "ids": [None, "a"]}
    assert shape.read(good, "s") == good
    for bad, where in (({"efforts": {"low": "200"}}, "s efforts.low"), ({"ids": [1]}, "s ids[0]"),
                       ({"ids": ["a", "b", "c"]}, "s ids: a list of 3")):
        with pytest.raises(tr.ShapeError) as err:
            shape.read(bad, "s")
        assert str(err.value).startswith(where)
    assert json.dumps(tr.Obj({"a": tr.Int()}, extra=tr.Json()).read({"a": 1, "b": [1]}, "s")) == '{"a": 1, "b": [1]}'


LINE_CONTROL = re.compile(u'[\x00-\x1f\x7f-\x9f]')


@settings(max_examples=200, deadline=None)
@given(st.one_of(hostile.hostile_text(200), st.lists(hostile.hostile_text(40), max_size=8).map('\n'.join)))
def test_text_lines_are_printable_lines_or_a_named_refusal(text):
    count = 0 if text == '' else len(text.split('\n')) - (1 if text.endswith('\n') else 0)
    try:
        lines = tr.text_lines(text, 'journalctl _SYSTEMD_INVOCATION_ID=x', max_chars=4000, max_lines=6, line_max=50)
    except tr.ShapeError as exc:
        assert str(exc).startswith('journalctl _SYSTEMD_INVOCATION_ID=x: ') and (len(text) > 4000 or count > 6)
        return
    assert len(text) <= 4000 and len(lines) == count <= 6
    assert all(not LINE_CONTROL.search(line) and len(line) <= 50 for line in lines)


def test_text_lines_split_on_newlines_only_and_refuse_what_is_past_their_bounds():
    text = "spec: adding speculative implementation 'draft-mtp'\r\n\x1b[2Jfake\x85line\u2028x\n"
    assert tr.text_lines(text, 'log') == ["spec: adding speculative implementation 'draft-mtp'\\x0d",
                                          '\\x1b[2Jfake\\x85line\u2028x']
    assert tr.text_lines('', 'log') == [] and tr.text_lines('\n', 'log') == ['']
    with pytest.raises(tr.ShapeError, match='^log: 3 lines: at most 2 are read$'):
        tr.text_lines('a\nb\nc\n', 'log', max_lines=2)
    with pytest.raises(tr.ShapeError, match='^log: 11 characters: at most 10 are read$'):
        tr.text_lines('a' * 11, 'log', max_chars=10)
    with pytest.raises(tr.ShapeError, match='expected text, got a list'):
        tr.text_lines(['a'], 'log')
    assert tr.text_lines('x' * 100, 'log', line_max=10) == ['xxxxxxx...']
    assert tr.text_lines('\x1b' * 100, 'log', line_max=10) == ['\\x1b\\x1...']
