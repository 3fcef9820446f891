"""gguf_facts / the gguf_info module: layer kinds as llama.cpp b11434 derives them, sizes, drafter and mmproj keys."""
import json
import os
import subprocess
import sys

import gguf
import pytest

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_reader import GGUFError, read_gguf


def test_qwen35_interval_and_nextn(tmp_path):
    p = lib.write_gguf(tmp_path / "q.gguf", "qwen35", lib.qwen35_kv(n_layer_all=9, nextn=1), lib.qwen35_tensors(9))
    f = gguf_facts(p)
    # qwen35.cpp: recurrent iff il < n_layer && (il + 1) % full_attention_interval != 0; the last
    # nextn_predict_layers blocks are the MTP head
    assert f["layer_kinds"] == ["recurrent"] * 3 + ["attention"] + ["recurrent"] * 3 + ["attention", "nextn"]
    assert f["n_layer"] == 8 and f["nextn_predict_layers"] == 1 and f["block_count"] == 9
    assert f["layer_counts"] == {"recurrent": 6, "attention": 2, "nextn": 1}
    att = f["layers"][3]
    assert (att["n_head_kv"], att["key_length"], att["value_length"]) == (2, 32, 32)
    assert att["kv_bytes_per_token_f16"] == 2 * 2 * 32 * 2
    assert f["layers"][0]["n_head_kv"] == 0 and f["layers"][0]["kv_bytes_per_token_f16"] == 0
    assert f["layers"][8]["kv_bytes_per_token_f16"] == 256       # the MTP layer has KV in its draft context
    # n_embd_r = (conv-1) * (inner + 2*groups*state) = 3*(128+64); n_embd_s = state*inner = 16*128
    assert f["recurrent_state"] == {"r_floats": 576, "s_floats": 2048, "bytes_per_layer_per_seq": (576 + 2048) * 4}
    assert f["ssm"] == {"conv_kernel": 4, "inner_size": 128, "state_size": 16, "group_count": 2, "time_step_rank": 8}
    assert f["context_length"] == 4096 and f["embedding_length"] == 64 and f["vocab_size"] == 96
    g = read_gguf(p)
    assert f["layers"][2]["tensor_bytes"] == sum(t.nbytes for t in g.tensors if t.name.startswith("blk.2."))
    assert f["token_embd_bytes"] == g.tensor("token_embd.weight").nbytes
    assert f["output_bytes"] == g.tensor("output.weight").nbytes + g.tensor("output_norm.weight").nbytes
    assert f["file_size"] == os.path.getsize(p) and f["architecture_supported"] and not f["is_mmproj"]
    assert f["rs_rollback"] is True


def test_qwen35_recurrent_layers_array_wins(tmp_path):
    kv = lib.qwen35_kv(n_layer_all=4, nextn=0)
    kv["qwen35.attention.recurrent_layers"] = ([True, False, True, False], gguf.GGUFValueType.ARRAY)
    p = lib.write_gguf(tmp_path / "q.gguf", "qwen35", kv, lib.qwen35_tensors(4))
    assert gguf_facts(p)["layer_kinds"] == ["recurrent", "attention", "recurrent", "attention"]


def test_gemma3_sliding_window_pattern(tmp_path):
    kv = {"gemma3.block_count": 8, "gemma3.context_length": 8192, "gemma3.embedding_length": 64,
          "gemma3.attention.head_count": 4, "gemma3.attention.head_count_kv": 1, "gemma3.attention.key_length": 32,
          "gemma3.attention.value_length": 32, "gemma3.attention.sliding_window": 512}
    p = lib.write_gguf(tmp_path / "g.gguf", "gemma3", kv, {"token_embd.weight": ([64, 40], "F16")})
    f = gguf_facts(p)
    # load_swa_pattern(ml, 6): swa iff il % 6 < 5
    assert f["layer_kinds"] == ["swa"] * 5 + ["attention"] + ["swa"] * 2
    assert f["sliding_window"] == 512 and f["swa_type"] == "standard"
    # tied: llama.cpp duplicates token_embd onto the output device
    assert f["output_tied"] and f["output_bytes"] == f["token_embd_bytes"]
    kv["gemma3.attention.sliding_window_pattern"] = 4
    p2 = lib.write_gguf(tmp_path / "g4.gguf", "gemma3", kv, {"token_embd.weight": ([64, 40], "F16")})
    assert gguf_facts(p2)["layer_kinds"] == ["swa", "swa", "swa", "attention"] * 2


def test_dflash_drafters(tmp_path):
    base = {"dflash.block_count": 2, "dflash.context_length": 4096, "dflash.embedding_length": 64,
            "dflash.attention.head_count": 4, "dflash.attention.head_count_kv": 2, "dflash.attention.key_length": 16,
            "dflash.attention.value_length": 16, "dflash.block_size": 8, "tokenizer.ggml.mask_token_id": 95}
    dflash2 = dict(base, **{"dflash.attention.sliding_window": 2048,
                            "dflash.attention.sliding_window_pattern": ([True, True], gguf.GGUFValueType.ARRAY),
                            "dflash.selector_top_k": 16, "dflash.selector_rank": 32})
    tensors = {"fc.weight": ([128, 64], "Q8_0"), "selector_hidden.weight": ([64, 32], "F16")}
    p = lib.write_gguf(tmp_path / "d2.gguf", "dflash", dflash2, tensors)
    f = gguf_facts(p)
    assert f["layer_kinds"] == ["swa", "swa"] and f["sliding_window"] == 2048
    assert f["block_size"] == 8 and f["selector_top_k"] == 16 and f["mask_token_id"] == 95
    assert f["drafter"]["kind"] == "dflash2" and not f["output_tied"]
    assert f["output_bytes"] == read_gguf(p).tensor_bytes          # fc/selector live with the output layer
    dspark = dict(base, **{"dflash.block_size": 7})
    p = lib.write_gguf(tmp_path / "ds.gguf", "dflash", dspark, {"markov_w1.weight": ([32, 96], "F16")})
    f = gguf_facts(p)
    assert f["layer_kinds"] == ["attention", "attention"] and f["sliding_window"] is None
    assert f["drafter"]["kind"] == "dspark" and f["block_size"] == 7


def test_mmproj_detected(tmp_path):
    p = lib.write_gguf(tmp_path / "mm.gguf", "clip", {"clip.projector_type": "qwen3vl_merger",
                                                      "clip.has_vision_encoder": True},
                       {"v.blk.0.w": ([64, 8], "BF16"), "mm.0.weight": ([64, 4], "F16")})
    f = gguf_facts(p)
    assert f["is_mmproj"] and f["mmproj_bytes"] == 64 * 8 * 2 + 64 * 4 * 2
    assert f["mmproj"]["projector_type"] == "qwen3vl_merger" and f["mmproj"]["has_vision_encoder"]


def test_unknown_architecture_is_flagged_not_guessed(tmp_path):
    p = lib.write_gguf(tmp_path / "x.gguf", "frobnicator", {"frobnicator.block_count": 2,
                                                            "frobnicator.embedding_length": 64},
                       {"blk.0.w": ([64, 2], "F16")})
    f = gguf_facts(p)
    assert f["architecture_supported"] is False and f["architecture"] == "frobnicator"


def test_no_architecture_key(tmp_path):
    p = tmp_path / "noarch.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = bytearray(p.read_bytes())
    # rename the key so it is no longer general.architecture (same length keeps the file valid)
    i = data.index(b"general.architecture")
    data[i:i + 20] = b"general.architectura"
    p.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="noarch.gguf: no general.architecture key"):
        gguf_facts(str(p))


def test_large_arrays_are_summarised_in_metadata(tmp_path):
    kv = lib.qwen35_kv()
    kv["tokenizer.ggml.tokens"] = ["t%d" % i for i in range(500)]
    p = lib.write_gguf(tmp_path / "q.gguf", "qwen35", kv, lib.qwen35_tensors())
    f = gguf_facts(p)
    assert f["metadata"]["tokenizer.ggml.tokens"] == {"type": "ARRAY[STRING]", "length": 500}
    assert f["vocab_size"] == 500
    json.dumps(f)     # module results must be JSON


# ------------------------------------------------------------------ the module itself

def _run_module(args, tmp_path):
    """Run plugins/modules/gguf_info.py the way Ansible does (args file), return (rc, result)."""
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))  # the collection, as this process imports it
    proc = subprocess.run([sys.executable, os.path.join(lib.ROOT, "plugins", "modules", "gguf_info.py"), str(argsfile)],
                          capture_output=True, text=True, check=False, env=env, timeout=60)
    return proc.returncode, json.loads(proc.stdout)


def test_module_reports_facts_and_never_changes(tmp_path):
    p = lib.write_gguf(tmp_path / "q.gguf", "qwen35", lib.qwen35_kv(), lib.qwen35_tensors())
    rc, res = _run_module({"path": p, "_ansible_check_mode": True}, tmp_path)
    assert rc == 0 and res["changed"] is False
    assert res["layer_kinds"][-1] == "nextn" and "tensors" not in res
    rc, res = _run_module({"path": p, "tensors": True}, tmp_path)
    assert rc == 0 and len(res["tensors"]) == res["tensor_count"]
    assert res["tensors"][0].keys() == {"name", "shape", "type", "offset", "nbytes"}


def test_module_fails_cleanly_on_truncated_file(tmp_path):
    p = lib.write_gguf(tmp_path / "q.gguf", "qwen35", lib.qwen35_kv(), lib.qwen35_tensors())
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(open(p, "rb").read()[:-10])
    rc, res = _run_module({"path": str(cut)}, tmp_path)
    assert rc == 1 and res["failed"] and str(cut) in res["msg"] and "truncated" in res["msg"]
    assert "Traceback" not in res["msg"]
