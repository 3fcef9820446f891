"""inventory/production's shapes (frank_medium_shape: dflash2 | mtp | dspark), each planned like the deploy
plans it (roles/llm_plan/tasks/plan.yml's serve dict) against the recorded B850 board and the recorded
GGUF headers (tests/fixtures/). The pinned split and context must fit, and the shape must be what the
runbook says it is.

Headers: the Swift UD-Q8_K_XL header stands in for the orcarouter Q8_0 target (the same qwen35 27B trunk;
the Q8_0's own header is not recorded - the deploy reads the fetched file's on the host), the recorded
DFlash2 Q8_0 header for the Q4_K_M drafter (larger, so the check is conservative).
"""
import json
import os

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import plan
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.plan_result import plan_result

HOST_VARS = os.path.join(lib.ROOT, "inventory", "production", "host_vars", "dankserver.yml")
B850 = os.path.join(lib.FIXTURES, "gpu", "b850-proart.facts.json")
PAYLOAD_DRAFTERS = {"dflash2_q4_k_m": "dflash2", "dspark_q8_0": "dspark"}
HOST_RAM = 60 * lib.GIB  # dankserver: 60 GiB (runbook Hardware)


def _vars():
    with open(HOST_VARS) as fh:
        return yaml.safe_load(fh)


def _serve(v, shape):
    s = v["frank_medium_shapes"][shape]
    return {"backend": v["llama_server_backend"], "split_mode": v["llama_server_split_mode"],
            "tensor_split": s["tensor_split"], "ctx_size": s["ctx_size"], "parallel": s["parallel"],
            "batch_size": s["batch_size"], "ubatch_size": s["ubatch_size"],
            "cache_type_k": v["llama_server_cache_type_k"], "cache_type_v": v["llama_server_cache_type_v"],
            "flash_attn": True, "spec_type": s["spec_type"], "spec_draft_n_max": s["spec_draft_n_max"],
            "floor_bytes": s["floor_bytes"], "lean_layers": 0, "cache_ram_mib": s["cache_ram"],
            "draft_device": v["llama_server_spec_draft_device"], "mmproj_device": s.get("mmproj_device"),
            "image_max_tokens": v["llama_server_image_max_tokens"]}


def _plan(shape):
    v = _vars()
    s = v["frank_medium_shapes"][shape]
    with open(B850) as fh:
        gpus = json.load(fh)
    # the drafter the payload carries, as the deploy passes it (used or not: plan.yml hands fit_plan the payload's)
    key = s["payload"].get("drafter")
    drafter = lib.fixture(PAYLOAD_DRAFTERS[key]) if key else None
    mmproj = lib.fixture("mmproj_bf16") if s["vision"] else None
    return plan(gpus, lib.fixture("frank_medium"), _serve(v, shape), drafter=drafter, mmproj=mmproj,
                host_ram_bytes=HOST_RAM)


@pytest.mark.parametrize("shape", ["dflash2", "mtp", "dspark"])
def test_each_shape_is_planned_and_fits_as_pinned(shape):
    s = _vars()["frank_medium_shapes"][shape]
    r = _plan(shape)
    assert r["errors"] == [] and r["fits"], r["table"]
    assert r["tensor_split"] == s["tensor_split"] and r["ctx_size"] == s["ctx_size"]
    assert r["ctx_per_slot"] == s["ctx_size"] // s["parallel"]
    assert r["cache_ram_mib"] == s["cache_ram"]
    if s["vision"]:
        # issue 34: the largest image b11434 admits by default (4096 tokens, 2048x2048) keeps the floor
        assert r["mmproj"]["image_max_tokens"] == r["mmproj"]["largest_image_tokens"] == 4096, r["warnings"]


def test_the_default_is_the_runbooks_final_deployed_state():
    v = _vars()
    assert v["frank_medium_shape"] == "dflash2"
    s = v["frank_medium_shapes"]["dflash2"]
    files = v["frank_medium_files"]
    assert files[s["payload"]["target"]]["repo"] == "orcarouter/Qwen3.8-27B-Uncensored-GGUF"
    assert files[s["payload"]["target"]]["file"].endswith("-Q8_0.gguf")
    assert files[s["payload"]["drafter"]]["file"].endswith("DFlash2-Q4_K_M.gguf")
    assert (s["tensor_split"], s["ctx_size"], s["parallel"]) == ([32, 33], 327680, 2)
    assert (s["batch_size"], s["ubatch_size"], s["ctx_checkpoints"], s["cache_ram"]) == (6144, 512, 0, 16384)
    assert s["spec_type"][0] == "draft-dflash" and s["spec_draft_n_max"] == 7 and s["vision"]
    assert v["llama_server_port"] == 7770 and v["llama_server_alias"] == "frank-medium"
    # one release path: the serve role is handed the build role's prefix, nothing of its own
    assert "llama_server_install_prefix" not in v and v["llama_cpp_build_prefix"] == "/home/dank/llama.cpp"


def test_unknown_sizes_and_hashes_stay_refusable_placeholders():
    v = _vars()
    for key, f in v["frank_medium_files"].items():
        assert str(f["sha256"]).startswith("FILL"), key      # never a locally observed oid
        assert isinstance(f["size"], int)
    # the seeds record these sizes; the others stay 0, which the fetch preflight refuses
    sizes = {k: f["size"] for k, f in v["frank_medium_files"].items()}
    assert sizes["swift_ud_q8_k_xl"] == 31457990112 and sizes["dspark_q8_0"] == 1455376576
    assert sizes["orcarouter_q8_0"] == 0 and sizes["dflash2_q4_k_m"] == 0
    assert v["llama_cpp_build_toolchain_sha256"].startswith("FILL")
    serving = json.dumps(v["dankfleet_serving_now"])
    assert "FILL" in serving and '"ports": [7770]' in serving


def test_the_mtp_shape_keeps_the_dflash2_sidecar_unused_and_uncharged():
    """000_: under MTP the DFlash2 sidecar "stays on disk and in the fetch script"; the plan carries it as
    present and unused and charges nothing for it (the same bytes as without it). The MTP era ran draft-mtp
    alone: ngram-mod was never measured beside it."""
    v = _vars()
    s = v["frank_medium_shapes"]["mtp"]
    assert v["frank_medium_files"][s["payload"]["drafter"]]["file"] == "Qwen3.8-27B-DFlash2-Q4_K_M.gguf"
    assert s["spec_type"] == ["draft-mtp"]
    r = _plan("mtp")
    assert r["fits"] and "is present and unused" in r["drafter_unused"]
    with open(B850) as fh:
        gpus = json.load(fh)
    bare = plan(gpus, lib.fixture("frank_medium"), _serve(v, "mtp"), mmproj=lib.fixture("mmproj_bf16"),
                host_ram_bytes=HOST_RAM)
    assert [d["total_bytes"] for d in r["devices"]] == [d["total_bytes"] for d in bare["devices"]]


def test_the_shapes_run_reasoning_as_the_seeds_did():
    """002_: REASONING=on, CHAT_TEMPLATE_KWARGS='{"enable_thinking":true,"preserve_thinking":true}'."""
    v = _vars()
    assert v["llama_server_reasoning"] == "on" and v["llama_server_reasoning_format"] == "deepseek"
    assert v["llama_server_chat_template_kwargs"] == {"enable_thinking": True, "preserve_thinking": True}


def _doc_block(path, after):
    """The first ``` block after the line holding `after` in a doc of the repo."""
    with open(os.path.join(lib.ROOT, path)) as fh:
        text = fh.read()
    assert after in text, (path, after)
    return text.split(after, 1)[1].split("```\n", 1)[1].split("```", 1)[0]


def test_the_docs_figures_are_what_the_planner_prints_today():
    # issue 37: the dry run's fit table (inventory/production/README.md) and dankserver's fleet summary line (README,
    # "The fleet's capacity") are the B850 board with the dflash2 shape as planned here; a planner change that moves
    # them fails this test until the docs say the new figures
    r = _plan("dflash2")
    block = _doc_block(os.path.join("inventory", "production", "README.md"), "is read from the fetched file on the host):")
    table = [line for line in block.splitlines() if " | " in line]
    assert table == r["table"].splitlines()
    summary = plan_result(r, _serve(_vars(), "dflash2"), host="dankserver")["capacity"]["summary"]
    fleet = _doc_block("README.md", "then one fleet summary:")
    assert summary in fleet.splitlines(), (summary, fleet)
