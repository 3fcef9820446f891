"""A release's BUILD_STAMP.json is read through its shape (issue 33): the release dir belongs to the build user,
so a stamp of any other shape is no stamp -- the plan then refuses the release by name -- never a crash."""
import json

from hypothesis import HealthCheck, given, settings

from ansible_collections.dankfleet.llm.plugins.module_utils.host import llama_cpp_release as lcr
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile

REAL = {"inputs": {"backend": "cpu", "build_number": 11434, "source": {"type": "archive", "sha256": "ab" * 32}},
        "outputs": {"build_number": 11434, "commit": "", "build_seconds": 61.2, "jobs": 2}}


def test_the_stamp_write_stamp_writes_reads_back(tmp_path):
    lcr.write_stamp(str(tmp_path), REAL["inputs"], REAL["outputs"])
    assert lcr.read_stamp(str(tmp_path / "BUILD_STAMP.json")) == REAL


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=hostile.hostile_answers(REAL))
def test_a_stamp_of_any_shape_is_the_stamp_or_none(tmp_path, case):
    path, stamp = case
    target = tmp_path / "BUILD_STAMP.json"
    target.write_text(hostile.dumps(stamp))
    got = lcr.read_stamp(str(target))
    if got is None:
        return
    # what reads is typed: inputs an object, outputs' build number an int and commit a name
    assert isinstance(got["inputs"], dict) and isinstance(got["outputs"], dict)
    assert isinstance(got["outputs"].get("build_number", 0), int)
    assert isinstance(got["outputs"].get("commit", ""), str) and "\n" not in got["outputs"].get("commit", "")
    json.dumps(got, allow_nan=False)
