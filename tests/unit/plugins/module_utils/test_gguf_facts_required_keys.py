"""The keys llama.cpp b11434 requires of a model (issue 33: a GGUF without block_count or embedding_length was
planned as 0; llama.cpp refuses both, "key not found in model"). Generated over every architecture the
collection derives: each required key left out is a refusal naming that key and the file, never a plan."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import (
    HEAD_COUNT_KEY, RECURRENT_ARCHS, REQUIRED_ARCH_KEYS, SUPPORTED_ARCHS, gguf_facts)
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError
from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib

ARCHS = sorted(SUPPORTED_ARCHS)


def complete_kv(arch):
    """What the smallest loadable header of arch holds: the required keys and what its layer kinds read."""
    a = arch + "."
    kv = {a + "block_count": 2, a + "context_length": 4096, a + "embedding_length": 64, a + HEAD_COUNT_KEY: 4,
          a + "attention.head_count_kv": 2, a + "feed_forward_length": 128, a + "attention.sliding_window": 128,
          a + "ssm.conv_kernel": 4, a + "ssm.inner_size": 128, a + "ssm.state_size": 16, a + "ssm.group_count": 1,
          a + "ssm.time_step_rank": 8}
    return kv


def _facts(tmp_path, arch, kv):
    return gguf_facts(lib.write_gguf(tmp_path / ("%s.gguf" % arch), arch, kv, {"blk.0.w": ([64, 2], "F16")}))


@pytest.mark.parametrize("arch", ARCHS)
def test_the_complete_header_of_every_supported_architecture_is_planned(tmp_path, arch):
    f = _facts(tmp_path, arch, complete_kv(arch))
    assert f["architecture_supported"] is True
    assert (f["block_count"], f["context_length"], f["embedding_length"]) == (2, 4096, 64)


@pytest.mark.parametrize("key", REQUIRED_ARCH_KEYS)
@pytest.mark.parametrize("arch", ARCHS)
def test_a_missing_required_key_is_refused_naming_it_and_the_file(tmp_path, arch, key):
    kv = complete_kv(arch)
    del kv["%s.%s" % (arch, key)]
    with pytest.raises(GGUFError) as e:
        _facts(tmp_path, arch, kv)
    assert str(e.value).startswith(str(tmp_path / ("%s.gguf" % arch)) + ": no %s.%s" % (arch, key)), str(e.value)
    assert "key not found in model" in str(e.value)


@pytest.mark.parametrize("arch", ARCHS)
def test_no_head_count_is_refused_where_layers_attend(tmp_path, arch):
    kv = complete_kv(arch)
    del kv["%s.%s" % (arch, HEAD_COUNT_KEY)]
    del kv["%s.attention.head_count_kv" % arch]
    if arch in RECURRENT_ARCHS:      # no attention at all: llama.cpp reads 0 heads, and so does the plan
        assert _facts(tmp_path, arch, kv)["head_count"] == 0
        return
    try:
        f = _facts(tmp_path, arch, kv)
    except GGUFError as exc:
        assert "no %s.%s" % (arch, HEAD_COUNT_KEY) in str(exc)
        return
    assert not set(f["layer_kinds"]) & {"attention", "swa", "nextn"}, f["layer_kinds"]


def test_the_issues_case_no_block_count_no_embedding_length(tmp_path):
    kv = complete_kv("qwen3")
    del kv["qwen3.block_count"], kv["qwen3.embedding_length"]
    with pytest.raises(GGUFError, match="no qwen3.embedding_length and no qwen3.block_count: llama.cpp b11434 refuses"):
        _facts(tmp_path, "qwen3", kv)


def test_an_unknown_architecture_is_flagged_not_refused_for_its_keys(tmp_path):
    assert _facts(tmp_path, "frobnicator", {"frobnicator.block_count": 2})["architecture_supported"] is False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arch=st.sampled_from(ARCHS), drop=st.sets(st.sampled_from(sorted(complete_kv("x")))),
       junk=st.dictionaries(st.sampled_from(["block_count", "context_length", "embedding_length", HEAD_COUNT_KEY]),
                            st.one_of(st.integers(0, 2 ** 32 - 1), st.text(max_size=4), st.booleans()), max_size=2))
def test_hostile_headers_plan_only_with_every_required_key(tmp_path, arch, drop, junk):
    kv = dict(("%s.%s" % (arch, k.split(".", 1)[1]), v) for k, v in complete_kv("x").items() if k not in drop)
    kv.update(("%s.%s" % (arch, k), v) for k, v in junk.items())
    try:
        f = _facts(tmp_path, arch, kv)
    except GGUFError as exc:
        assert str(exc).startswith(str(tmp_path / ("%s.gguf" % arch)) + ": ")
        return
    for key in REQUIRED_ARCH_KEYS:
        assert "%s.%s" % (arch, key) in kv, "planned without %s.%s" % (arch, key)
        assert isinstance(f[key], int) and not isinstance(f[key], bool), (key, f[key])
    if set(f["layer_kinds"]) & {"attention", "swa", "nextn"}:
        assert "%s.%s" % (arch, HEAD_COUNT_KEY) in kv
