"""fit_plan input handling, property-based: whatever JSON-ish input arrives, the filter returns a plan
or raises AnsibleFilterError naming the input -- never another exception, never a NaN in a plan."""
import copy
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible.errors import AnsibleFilterError
from ansible_collections.dankfleet.llm.plugins.filter.fit_plan import FilterModule

fit_plan_filter = FilterModule().filters()["fit_plan"]
MODEL = lib.fixture("frank_medium")
SERVE = {"backend": "hip", "ctx_size": 65536, "parallel": 2, "tensor_split": [31, 33]}
SETTINGS = dict(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

numbers = st.one_of(st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -1, 0, 2 ** 64]))
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=8),
                    st.sampled_from(["max", "auto", "nan", "inf", "-1", "1e400", "9" * 400]))
jsonish = st.recursive(scalars, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                       st.dictionaries(st.text(max_size=6), kids, max_size=4)),
                       max_leaves=12)


def _no_nan(value):
    text = json.dumps(value, default=str)
    return "NaN" not in text and "Infinity" not in text


def _call(gpus, model, serve):
    try:
        result = fit_plan_filter(gpus, model=model, serve=serve)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("dankfleet.llm.fit_plan:")
        return None
    assert isinstance(result, dict) and isinstance(result["fits"], bool)
    assert _no_nan(result), "a plan carries NaN/inf"
    assert all(math.isfinite(float(x)) for x in result["tensor_split"])
    return result


@settings(**SETTINGS)
@given(jsonish, jsonish, jsonish)
def test_arbitrary_inputs_end_in_a_plan_or_a_named_error(gpus, model, serve):
    _call(gpus, model, serve)


def _leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, path + (i,))
    else:
        yield path


MODEL_LEAVES = sorted(_leaves(MODEL), key=repr)


def _set(doc, path, value):
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


@settings(**SETTINGS)
@given(st.sampled_from(MODEL_LEAVES), scalars, st.sampled_from(sorted(SERVE) + ["floor_bytes", "lean_layers"]),
       scalars)
def test_one_bad_value_in_real_facts_is_named_or_harmless(model_leaf, model_value, serve_key, serve_value):
    result = _call(lib.r9700s(), _set(MODEL, model_leaf, model_value), SERVE)
    if model_leaf[0] not in ("metadata", "tensors") and isinstance(model_value, (int, float)) \
            and not isinstance(model_value, bool) and (
            not math.isfinite(model_value) or model_value < 0 or abs(model_value) > 2 ** 53):
        assert result is None, "%r at model%s was planned: %s" % (model_value, list(model_leaf), result["fits"])
    _call(lib.r9700s(), MODEL, dict(SERVE, **{serve_key: serve_value}))


@pytest.mark.parametrize("bad, where", [
    ({"tensor_split": [float("nan"), 1]}, "tensor_split"),
    ({"tensor_split": ["inf", 1]}, "tensor_split"),
    ({"tensor_split": [1e308, 1e308]}, "tensor_split"),
    ({"ctx_size": -4096}, "ctx_size"),
    ({"ctx_size": 1e300}, "ctx_size"),
    ({"floor_bytes": float("inf")}, "floor_bytes"),
])
def test_non_finite_and_out_of_range_serve_values_are_named(bad, where):
    with pytest.raises(AnsibleFilterError, match=where):
        fit_plan_filter(lib.r9700s(), model=MODEL, serve=dict(SERVE, **bad))


def test_nan_in_the_facts_is_named():
    gpus = lib.r9700s()
    gpus[1]["vram_total_bytes"] = float("nan")
    with pytest.raises(AnsibleFilterError, match=r"gpus\[1\]\.vram_total_bytes is nan"):
        fit_plan_filter(gpus, model=MODEL, serve=SERVE)
    with pytest.raises(AnsibleFilterError, match=r"model\.layers\[3\]\.tensor_bytes is -1"):
        fit_plan_filter(lib.r9700s(), model=_set(MODEL, ("layers", 3, "tensor_bytes"), -1), serve=SERVE)


def test_the_raw_metadata_dump_is_not_judged():
    """gguf_info's metadata dump carries whatever the file holds (a NaN in an unused key): the planner never reads it."""
    model = dict(MODEL, metadata={"general.some_float": float("nan"), "x.offset": -1})
    assert isinstance(fit_plan_filter(lib.r9700s(), model=model, serve=SERVE)["fits"], bool)
