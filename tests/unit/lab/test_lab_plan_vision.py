"""The planner charges the lab's projector: the lab shape (inventory/lab) planned with and without
vision differs by exactly the mmproj's tensor bytes plus the profile's mmproj compute term, on the
device that holds it, and still fits (the lab and the rehearsal serve with vision on)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

import gen_models
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import plan
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts

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
    # issue 34: the projector at the peak a request reaches - its weights, clip's reserve for the warm-up image
    # (46 x 46 tokens) and what the largest image the limit admits (4096 tokens) adds
    vis = with_vision["mmproj"]
    assert vis["projector_type"] == "qwen3vl_merger" and vis["modelled"] and vis["warmup_tokens"] == 46 * 46
    assert vis["image_max_tokens"] == 4096 and vis["max_image_px"] == 64 * mmproj["mmproj"]["patch_size"] * 2
    charged = mmproj["mmproj_bytes"] + vis["reserve_bytes"] + vis["request_bytes"]
    assert vis["peak_bytes"] == charged and vis["request_bytes"] > 0
    assert mmproj["mmproj_bytes"] == 192384     # the tensor bytes of the 195264-byte file
    (dev,), (plain,) = with_vision["devices"], text_only["devices"]
    assert dev["mmproj_peak_bytes"] == vis["request_bytes"] and text_only["mmproj"] is None
    assert dev["mmproj_bytes"] == charged and plain["mmproj_bytes"] == 0
    assert dev["total_bytes"] - plain["total_bytes"] == charged
