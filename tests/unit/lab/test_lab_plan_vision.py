"""The planner charges the lab's projector: the lab shape (inventory/lab) planned with and without
vision differs by exactly the mmproj's tensor bytes plus the profile's mmproj compute term, on the
device that holds it, and still fits (the lab and the rehearsal serve with vision on)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import gen_models
from ansible_collections.dankfleet.llm.plugins.module_utils.fit_plan import PROFILES, plan
from ansible_collections.dankfleet.llm.plugins.module_utils.gguf_facts import gguf_facts

GIB = 1 << 30
LAB = Path(__file__).resolve().parents[3] / "inventory/lab/group_vars/llm_endpoints/lab.yml"


@pytest.fixture(scope="module")
def payload(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan")
    target = gen_models.write_model("qwen35-mtp", out / "qwen35-mtp.gguf")
    mmproj = gen_models.write_projector("mmproj-qwen35", out / "mmproj-qwen35.gguf")
    return gguf_facts(target["path"]), gguf_facts(mmproj["path"])


def lab_serve():
    v = yaml.safe_load(LAB.read_text())
    return {"backend": v["llama_server_backend"], "split_mode": v["llama_server_split_mode"], "tensor_split": "auto",
            "ctx_size": v["llama_server_ctx_size"], "parallel": v["llama_server_parallel"],
            "batch_size": v["llama_server_batch_size"], "ubatch_size": v["llama_server_ubatch_size"],
            "cache_type_k": "f16", "cache_type_v": "f16", "flash_attn": True,
            "spec_type": v["llama_server_spec_type"], "spec_draft_n_max": v["llama_server_spec_draft_n_max"],
            "floor_bytes": v["dankfleet_plan_floor_bytes"], "lean_layers": 0, "cache_ram_mib": v["llama_server_cache_ram"]}


@pytest.mark.parametrize("ram_gib", [2, 8, 24])
def test_the_lab_plan_charges_the_projector_and_fits(payload, ram_gib):
    target, mmproj = payload
    assert mmproj["is_mmproj"] and mmproj["mmproj"]["projection_dim"] == target["embedding_length"] == 64
    gpus = [{"name": "CPU", "vram_total_bytes": ram_gib * GIB, "vram_reserved_bytes": 0}]
    serve = lab_serve()
    with_vision = plan(gpus, target, serve, mmproj=mmproj, host_ram_bytes=ram_gib * GIB)
    text_only = plan(gpus, target, serve, host_ram_bytes=ram_gib * GIB)
    assert with_vision["fits"] and text_only["fits"], with_vision.get("errors")
    charged = mmproj["mmproj_bytes"] + PROFILES[serve["backend"]]["mmproj_compute_bytes"]
    assert mmproj["mmproj_bytes"] == 192384     # the tensor bytes of the 195264-byte file
    (dev,), (plain,) = with_vision["devices"], text_only["devices"]
    assert dev["mmproj_bytes"] == charged and plain["mmproj_bytes"] == 0
    assert dev["total_bytes"] - plain["total_bytes"] == charged
