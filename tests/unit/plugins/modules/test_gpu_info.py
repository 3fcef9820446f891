"""dankfleet.llm.gpu_info, the module: gguf_paths reads the payload's headers in the same call (llm_plan's facts in one
round trip), exactly what gguf_info's paths option returns; without it the result has no gguf_files.
A recorded board (tests/fixtures/gpu) and real GGUFs from tests/lab/gen_models.py.
"""
import os

import gen_models
import pytest

from ansible_collections.dankfleet.llm.plugins.modules import gguf_info
from ansible_collections.dankfleet.llm.plugins.modules import gpu_info as module
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
