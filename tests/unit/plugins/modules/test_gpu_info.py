"""dankfleet.llm.gpu_info, the module: gguf_paths reads the payload's headers in the same call (llm_plan's facts in one
round trip), exactly what gguf_info's paths option returns; without it the result has no gguf_files.
A recorded board (tests/fixtures/gpu) and real GGUFs from tests/lab/gen_models.py.
"""
import json
import os

import gen_models
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ansible_collections.dankfleet.llm.plugins.module_utils.host import gpu_facts as gf
from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr
from ansible_collections.dankfleet.llm.plugins.modules import gguf_info
from ansible_collections.dankfleet.llm.plugins.modules import gpu_info as module
from ansible_collections.dankfleet.llm.tests.unit import hostile_testlib as hostile
from ansible_collections.dankfleet.llm.tests.unit.module_testlib import run_module as run

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
BOARD = os.path.join(REPO, "tests/fixtures/gpu/b850-proart.facts.json")


def test_gguf_paths_reads_the_payload_as_gguf_info_does(tmp_path, capsys):
    target = gen_models.write_model("qwen35-hybrid", tmp_path / "t.gguf", header_only=True)
    (tmp_path / "bad.gguf").write_bytes(b"not a model")
    paths = {"target": target["path"], "drafter": str(tmp_path / "missing.gguf"), "mmproj": str(tmp_path / "bad.gguf")}
    r = run(capsys, module.main, facts_file=BOARD, gguf_paths=paths)
    assert not r.get("failed") and not r["changed"]
    assert [g["name"] for g in r["gpus"] if g.get("name")] == ["ROCm0", "ROCm1"]
    assert r["gguf_files"] == run(capsys, gguf_info.main, paths=paths)["files"]
    assert r["gguf_files"]["target"]["block_count"] == target["block_count"]
    assert not r["gguf_files"]["drafter"]["exists"] and "not a GGUF file" in r["gguf_files"]["mmproj"]["error"]
    assert "gguf_files" not in run(capsys, module.main, facts_file=BOARD)


# --- issue 33: the saved facts and nvidia-smi output are outside input, read through a shape -----------------

with open(BOARD) as _handle:
    FACTS = json.load(_handle)
with open(os.path.join(REPO, "tests/fixtures/gpu/nvidia-smi-h200-x2.csv")) as _handle:
    SMI = _handle.read()


def _lawful(r, path):
    """The module's answer: facts whose VRAM a card can hold, or a failure whose message names the file."""
    if r.get("failed"):
        assert path in r["msg"] and not tr._CONTROL.search(r["msg"]), r["msg"]
        return
    for card in r["gpus"]:
        for key in ("vram_total_bytes", "vram_used_bytes"):
            assert card[key] is None or 0 <= card[key] <= gf.VRAM_MAX_BYTES


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=hostile.hostile_answers(FACTS))
def test_facts_file_of_any_shape_gives_facts_or_a_named_failure(tmp_path, capsys, case):
    path = str(tmp_path / "facts.json")
    with open(path, "w") as handle:
        handle.write(hostile.dumps(case[1]))
    _lawful(run(capsys, module.main, facts_file=path), path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=hostile.hostile_text(), field=st.integers(0, 7))
def test_nvidia_smi_output_of_any_shape_gives_facts_or_a_named_failure(tmp_path, capsys, value, field):
    fields = SMI.splitlines()[0].split(", ")
    fields[field] = value
    path = str(tmp_path / "smi.csv")
    with open(path, "w") as handle:
        handle.write(", ".join(fields) + "\n")
    root = tmp_path / "root"
    (root / "sys").mkdir(parents=True, exist_ok=True)
    _lawful(run(capsys, module.main, sysfs_root=str(root), nvidia_smi_output_file=path), path)
