"""Strict values (issue 23 item 4): booleans by Ansible's rules only, no NaN or infinity read as a number."""
import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from ansible.module_utils.parsing.convert_bool import BOOLEANS_FALSE, BOOLEANS_TRUE, boolean
from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.filter.fit_plan import FilterModule
from ansible_collections.dankfleet.llm.plugins.module_utils.base import strict_values as sv
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.module_utils.bench.bench_batch import parse_bench_output
from ansible_collections.dankfleet.llm.plugins.module_utils.base.endpoint_client import BenchError, metric_delta
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import FitPlanError, plan
from ansible_collections.dankfleet.llm.plugins.module_utils.serve.plan_actual import PlanActualError, load_records, planned_devices

MODEL = lib.fixture("frank_medium")
SERVE = {"backend": "hip", "ctx_size": 65536, "parallel": 2, "tensor_split": "auto"}
WORDS = sorted(str(w) for w in BOOLEANS_TRUE | BOOLEANS_FALSE)


def _cases(word):
    return st.sampled_from([word, word.upper(), word.capitalize(), " %s " % word])


@settings(max_examples=60, deadline=None)
@given(data=st.data(), word=st.sampled_from(WORDS), key=st.sampled_from(["kv_unified", "flash_attn"]))
def test_a_boolean_word_plans_exactly_as_the_boolean(data, word, key):
    text = data.draw(_cases(word))
    want = word in set(str(w) for w in BOOLEANS_TRUE)
    by_text = plan(lib.r9700s(), MODEL, dict(SERVE, **{key: text}))
    by_bool = plan(lib.r9700s(), MODEL, dict(SERVE, **{key: want}))
    assert by_text["tensor_split"] == by_bool["tensor_split"] and by_text["devices"] == by_bool["devices"]


def test_kv_unified_false_as_text_is_false():
    """The finding: bool("false") is True, so a text "false" planned a unified KV."""
    unified = plan(lib.r9700s(), MODEL, dict(SERVE, kv_unified=True))
    split = plan(lib.r9700s(), MODEL, dict(SERVE, kv_unified=False))
    assert unified["devices"] != split["devices"]
    assert plan(lib.r9700s(), MODEL, dict(SERVE, kv_unified="false"))["devices"] == split["devices"]
    assert plan(lib.r9700s(), MODEL, dict(SERVE, kv_unified="no"))["devices"] == split["devices"]


@settings(max_examples=60, deadline=None)
@given(value=st.text(max_size=8).filter(lambda t: t.strip().lower() not in set(WORDS) | {"auto"})
       | st.integers().filter(lambda i: i not in (0, 1)) | st.lists(st.booleans(), max_size=2),
       key=st.sampled_from(["kv_unified", "flash_attn"]))
def test_anything_else_is_refused_by_name(value, key):
    with pytest.raises(FitPlanError, match=r"serve\.%s " % key):
        plan(lib.r9700s(), MODEL, dict(SERVE, **{key: value}))


def test_the_filter_takes_the_same_rule():
    fit_plan = FilterModule().filters()["fit_plan"]
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match=r"serve\.kv_unified is 'flase', not a boolean"):
        fit_plan(lib.r9700s(), model=MODEL, serve=dict(SERVE, kv_unified="flase"))


def test_the_copied_words_are_ansibles():
    assert sv.BOOLEANS_TRUE == BOOLEANS_TRUE and sv.BOOLEANS_FALSE == BOOLEANS_FALSE


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.sampled_from(WORDS).flatmap(_cases), st.text(max_size=6), st.integers(-3, 3),
                       st.floats(allow_nan=True), st.none(), st.booleans(), st.binary(max_size=4),
                       st.lists(st.booleans(), max_size=1)))
def test_to_bool_is_ansibles_boolean(value):
    try:
        want = boolean(value, strict=True)
    except TypeError:
        with pytest.raises(ValueError, match="not a boolean"):
            sv.to_bool(value, "x")
        return
    assert sv.to_bool(value, "x") is want


NON_FINITE = [float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("value", NON_FINITE)
def test_strict_values_refuse_non_finite(value):
    assert not sv.is_finite_number(value)
    with pytest.raises(ValueError, match="NaN and infinities are refused"):
        sv.finite(value, "x")
    with pytest.raises(ValueError, match="NaN and infinities are refused"):
        sv.finite_float(repr(value), "x")
    with pytest.raises(tr.ShapeError, match="not numbers JSON allows"):
        tr.load_json(json.dumps({"a": value}), "x")


@pytest.mark.parametrize("value", NON_FINITE + ["12", True, 1.5])
def test_plan_actual_refuses_a_plan_byte_count_that_is_not_one(value):
    plan_result = {"devices": [{"name": "ROCm0", "weights_bytes": value, "total_bytes": 10}]}
    with pytest.raises(PlanActualError, match=r"plan\.devices\[0\] weights_bytes: expected an integer"):
        planned_devices(plan_result, "hip")


def test_plan_actual_refuses_nan_in_its_records_file(tmp_path):
    path = tmp_path / "plan-vs-actual.json"
    path.write_text('[{"devices": [{"measured_total": NaN}]}]')
    with pytest.raises(PlanActualError, match=r"nan is not a finite number.*move it aside"):
        load_records(str(path))


@pytest.mark.parametrize("value", NON_FINITE)
def test_a_metric_delta_over_a_non_finite_counter_is_refused(value):
    with pytest.raises(BenchError, match="llamacpp:x is .*NaN and infinities are refused"):
        metric_delta({"llamacpp:x": 1.0}, {"llamacpp:x": value}, "llamacpp:x")
    assert metric_delta({"llamacpp:x": 1.0}, {"llamacpp:x": 5.0}, "llamacpp:x") == 4.0


def test_a_bench_row_with_nan_is_dropped_not_reported():
    rows = parse_bench_output('{"n_prompt": 512, "n_gen": 0, "avg_ts": NaN}\n{"n_prompt": 0, "n_gen": 64, "avg_ts": 9.5}')
    assert rows == [{"n_prompt": 0, "n_gen": 64, "avg_ts": 9.5}]
    assert all(math.isfinite(r["avg_ts"]) for r in rows)


@pytest.mark.parametrize("word,skipped", [("false", False), ("no", False), ("0", False), ("true", True), ("yes", True)])
def test_a_gpu_flag_as_a_word_is_read_by_ansible_rules(word, skipped):
    """integrated: "false" skipped the card (any non-empty string is truthy); it is a usable GPU."""
    gpus = lib.r9700s()
    gpus[1]["integrated"] = word
    result = plan(gpus, MODEL, SERVE)
    assert [d["name"] for d in result["devices"]] == (["ROCm0"] if skipped else ["ROCm0", "ROCm1"])


def test_a_gpu_flag_that_is_no_boolean_is_refused():
    gpus = lib.r9700s()
    gpus[0]["hidden"] = "maybe"
    with pytest.raises(FitPlanError, match=r"gpus\[0\]\.hidden is 'maybe', not a boolean"):
        plan(gpus, MODEL, SERVE)


@pytest.mark.parametrize("text,want", [("12", True), ("0", True), ("", False), ("²", False), ("٣", False),
                                       ("1.5", False), ("-1", False), (" 1", False), (None, False)])
def test_digits_are_ascii_digits(text, want):
    assert sv.digits(text) is want


def test_a_unicode_digit_in_nvidia_smi_output_is_no_pid():
    from ansible_collections.dankfleet.llm.plugins.module_utils.serve.plan_actual import parse_compute_apps
    with pytest.raises(PlanActualError, match=r"line 1 pid: expected an integer from 1"):
        parse_compute_apps("\u00b2, 100")
    with pytest.raises(PlanActualError, match=r"line 1 used_memory: expected an integer"):   # refused, never N/A
        parse_compute_apps("4711, \u00b2")
    assert parse_compute_apps("4711, [N/A]")[0]["used_bytes"] is None
