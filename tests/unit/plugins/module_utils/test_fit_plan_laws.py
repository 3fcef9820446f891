"""fit_plan's llama.cpp b11434 laws on small synthetic facts (numbers checkable by hand)."""
import os
import subprocess
import sys

import pytest

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import PROFILES, assign_slots, context_shape, counts_to_split, plan, swa_cells

GIB, MIB = lib.GIB, lib.MIB
ZERO = dict((k, 0) for k in PROFILES["cpu"] if k != "source")


def facts(kinds, tensor_bytes=100 * MIB, n_head_kv=2, head_dim=128, ctx=8192, arch="llama", output=50 * MIB,
          window=None, vocab=1000, nextn=0, rs=0):
    layers = []
    for i, k in enumerate(kinds):
        kv = k in ("attention", "swa", "nextn")
        layers.append({"index": i, "kind": k, "n_head_kv": n_head_kv if kv else 0, "key_length": head_dim if kv else 0,
                       "value_length": head_dim if kv else 0, "n_ff": 256, "tensor_bytes": tensor_bytes})
    return {"architecture": arch, "architecture_supported": True, "block_count": len(kinds), "layers": layers,
            "layer_kinds": list(kinds), "embedding_length": 256, "feed_forward_length": 256, "vocab_size": vocab,
            "context_length": ctx, "output_bytes": output, "token_embd_bytes": 70 * MIB, "sliding_window": window,
            "nextn_predict_layers": nextn, "head_count": 8, "recurrent_state": {"bytes_per_layer_per_seq": rs},
            "rs_rollback": arch == "qwen35"}


def gpus(n=2, vram=24 * GIB):
    return [{"name": "GPU%d" % i, "vram_total_bytes": vram} for i in range(n)]


@pytest.fixture
def bare(monkeypatch):
    """A profile with every compute constant zero: only the laws remain."""
    monkeypatch.setitem(PROFILES, "cpu", dict(ZERO, source="test"))


def test_slot_law_matches_llama_model_cpp():
    # 65 blocks + output = 66 slots; -ts 34,31: slot il -> first device whose cumulative share > il/66
    slots = assign_slots(65, [34, 31], 2)
    assert slots.count(0) == 35 and slots[34] == 0 and slots[35] == 1 and slots[-1] == 1
    assert assign_slots(65, [1, 1], 2).count(0) == 33
    # integer shares summing to the block count: -ts a:b puts blocks 0..a on the first card
    for a in range(1, 64):
        assert assign_slots(65, [a, 65 - a], 2).count(0) == a + 1
        assert counts_to_split([a + 1, 65 - a], 65) == [a, 65 - a]
    three = assign_slots(10, [3, 3, 4], 3)
    assert three == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2]


def test_context_padding_and_slots():
    assert context_shape(393216, 2) == (393216, 196608)
    assert context_shape(100000, 2) == (100352, 50176)       # pad256(100000)=100096; /2=50048 -> 50176
    assert context_shape(1000, 3) == (1536, 512)              # 1024/3=341 -> 512 per slot, n_ctx = 3*512
    assert context_shape(5000, 4, kv_unified=True) == (5120, 5120)
    assert swa_cells(131072, 2048, 1, 512, False) == 2560
    assert swa_cells(1024, 2048, 1, 512, False) == 1024      # never more than the base cache
    assert swa_cells(131072, 2048, 2, 512, True) == 4608      # unified: the window per sequence


def test_kv_only_on_attention_layers_on_their_device(bare):
    kinds = ["recurrent", "recurrent", "recurrent", "attention"] * 2
    m = facts(kinds, arch="qwen35", rs=1000)
    serve = {"backend": "cpu", "ctx_size": 8192, "parallel": 2, "tensor_split": [3, 5]}
    r = plan(gpus(), m, serve)
    # -ts 3,5 over 9 slots: blocks 0..3 on GPU0 (one attention layer), 4..7 + output on GPU1
    assert r["layer_devices"] == [0, 0, 0, 0, 1, 1, 1, 1] and r["output_device"] == 1
    per_cell = 2 * (2 * 128 * 2)                 # K + V, 2 heads x 128, f16
    assert [d["kv_bytes"] for d in r["devices"]] == [per_cell * 8192] * 2
    # recurrent: rows = n_seq_max (no model drafter -> no rollback rows)
    assert [d["recurrent_bytes"] for d in r["devices"]] == [3 * 1000 * 2] * 2
    assert r["devices"][0]["weights_bytes"] == 4 * 100 * MIB
    assert r["devices"][1]["weights_bytes"] == 4 * 100 * MIB + 50 * MIB
    # compute: logits n_outputs (= parallel, no spec) x vocab x 4 on the output device only
    assert [d["compute_bytes"] for d in r["devices"]] == [0, 2 * 1000 * 4]


def test_quantized_kv_and_rollback_rows(bare):
    kinds = ["recurrent", "attention"]
    m = facts(kinds, arch="qwen35", rs=1000, nextn=0)
    serve = {"backend": "cpu", "ctx_size": 4096, "parallel": 1, "tensor_split": [1], "cache_type_k": "q8_0",
             "cache_type_v": "q8_0"}
    r = plan(gpus(1), m, serve)
    assert r["devices"][0]["kv_bytes"] == 2 * (256 // 32 * 34) * 4096
    # a model-backed drafter on a rollback-capable arch keeps 1 + n_max rows per sequence (common.h need_n_rs_seq)
    dr = facts(["attention"], tensor_bytes=10 * MIB, arch="dflash", output=0)
    dr["drafter"] = {"block_size": 8}
    dr["block_size"] = 8
    r = plan(gpus(1), m, dict(serve, spec_type=["draft-dflash"], spec_draft_n_max=5), drafter=dr)
    assert r["devices"][0]["recurrent_bytes"] == 1000 * 1 * (1 + 5) and r["n_rs_seq"] == 5


def test_swa_layers_are_capped_by_the_window(bare):
    kinds = ["swa", "swa", "attention"]
    m = facts(kinds, window=1024)
    r = plan(gpus(1), m, {"backend": "cpu", "ctx_size": 65536, "parallel": 2, "ubatch_size": 512})
    per_cell = 2 * 128 * 2 * 2
    # per stream: swa pad256(min(32768, 1024 + 512)) = 1536 cells; full: 32768 cells; 2 streams
    assert r["devices"][0]["kv_bytes"] == per_cell * 2 * (2 * 1536 + 32768)


def test_mtp_on_the_last_layers_card_and_sized_from_the_target(bare):
    kinds = ["recurrent", "recurrent", "recurrent", "attention"] * 2 + ["nextn"]
    m = facts(kinds, arch="qwen35", nextn=1, rs=0)
    serve = {"backend": "cpu", "ctx_size": 16384, "parallel": 2, "tensor_split": [4, 5]}
    off = plan(gpus(), m, serve)
    on = plan(gpus(), m, dict(serve, spec_type=["draft-mtp"], spec_draft_n_max=3))
    assert off["devices"][1]["layers"] == 3 and off["devices"][1]["draft_bytes"] == 0   # the nextn block is not loaded
    dd = on["devices"][1]["draft_detail"]
    assert dd["weights_bytes"] == 100 * MIB and dd["kv_bytes"] == 2 * 128 * 2 * 2 * 16384
    assert on["devices"][0]["draft_bytes"] == 0
    assert on["cache_ram"]["draft_kv_bytes_per_token"] == 2 * 128 * 2 * 2


def test_auto_split_keeps_the_floor_and_max_ctx(bare):
    kinds = ["attention"] * 8
    m = facts(kinds, tensor_bytes=1 * GIB, output=1 * GIB)
    serve = {"backend": "cpu", "ctx_size": 8192, "parallel": 1, "tensor_split": "auto", "floor_bytes": 1 * GIB}
    r = plan(gpus(2, 8 * GIB), m, serve)
    assert r["fits"] and sum(r["tensor_split"]) == 8
    free = [d["free_bytes"] for d in r["devices"]]
    assert min(free) >= 1 * GIB and r["gap_bytes"] == max(free) - min(free)
    mx = plan(gpus(2, 8 * GIB), m, dict(serve, ctx_size="max", max_ctx_per_slot=1 << 20))
    assert mx["fits"] and mx["ctx_size"] % 256 == 0
    per_cell = 2 * 128 * 2 * 2
    # one more 256-token step must not fit
    over = plan(gpus(2, 8 * GIB), m, dict(serve, ctx_size=mx["ctx_size"] + 256))
    assert not over["fits"]
    assert mx["ctx_size"] * per_cell * 8 < 16 * GIB
    # three and four devices are searched too
    assert plan(gpus(3, 8 * GIB), m, serve)["fits"]
    r4 = plan(gpus(4, 8 * GIB), m, serve)
    assert r4["fits"] and len(r4["tensor_split"]) == 4 and sum(r4["tensor_split"]) == 8


def test_max_ctx_defaults_to_the_trained_window(bare):
    m = facts(["attention"] * 2, ctx=4096)
    r = plan(gpus(1, 80 * GIB), m, {"backend": "cpu", "ctx_size": "max", "parallel": 2})
    assert r["ctx_size"] == 8192 and r["ctx_per_slot"] == 4096 and not r["warnings"]


def test_no_flash_attention_pays_the_kq_matrix(bare):
    m = facts(["attention"] * 2)
    serve = {"backend": "cpu", "ctx_size": 4096, "parallel": 1, "ubatch_size": 512}
    fa = plan(gpus(1), m, serve)["devices"][0]["compute_bytes"]
    nofa = plan(gpus(1), m, dict(serve, flash_attn="off"))["devices"][0]["compute_bytes"]
    assert nofa - fa == 4 * 4096 * 512 * 8


def test_profiles_are_documented():
    for name, prof in PROFILES.items():
        assert prof["source"], name
        assert set(prof) == set(PROFILES["hip"]), name


def test_fit_plan_imports_without_ansible():
    # Ansible made unimportable in a fresh interpreter; the collection on its one import path
    code = ("import sys; sys.modules['ansible'] = None; "
            "from ansible_collections.dankfleet.llm.plugins.module_utils.plan import fit_plan; print(fit_plan.plan.__name__)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60, env=env)
    assert out.returncode == 0 and out.stdout.strip() == "plan", out.stderr


def test_fixtures_are_up_to_date():
    script = os.path.join(lib.FIXTURES, "build_runbook_fixtures.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))  # the collection, as this process imports it
    out = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True, check=False, timeout=120,
                         env=env)
    assert out.returncode == 0, out.stdout + out.stderr
