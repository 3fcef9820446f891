"""Every generated lab model loads in the real llama-server (b11434, CPU) and answers;
the drafters really draft; the generator is deterministic and writes the headers we intend.
"""
from __future__ import annotations

import json
import subprocess
import sys

import gguf
import pytest

import gen_models

PROMPT = "the cat and the dog went to the park"
SERVED = ["dense-llama", "draft-small", "qwen35-hybrid", "qwen35-mtp", "swa-dense"]

# What each model's header must say. Written out by hand rather than read from the generator,
# so a drift in the generator fails here. None = the key must be absent.
EXPECTED_HEADERS = {
    "dense-llama": {"arch": "llama", "block_count": 4},
    "draft-small": {"arch": "llama", "block_count": 2},
    "qwen35-hybrid": {"arch": "qwen35", "block_count": 8, "full_attention_interval": 4,
                      "nextn_predict_layers": None, "ssm.conv_kernel": 4, "ssm.state_size": 16,
                      "ssm.group_count": 2, "ssm.time_step_rank": 4, "ssm.inner_size": 64},
    "qwen35-mtp": {"arch": "qwen35", "block_count": 9, "full_attention_interval": 4, "nextn_predict_layers": 1,
                   "ssm.conv_kernel": 4, "ssm.state_size": 16},
    "swa-dense": {"arch": "gemma3", "block_count": 6, "attention.sliding_window": 128,
                  "attention.sliding_window_pattern": 3},
    "draft-dflash": {"arch": "dflash", "block_count": 2, "attention.sliding_window": 2048, "block_size": 8,
                     "selector_top_k": 4, "selector_rank": 16, "attention.causal": False,
                     "target_layers": [1, 4, 7]},
}
# Layer kinds as the planner must derive them: A attention, R recurrent (Gated DeltaNet),
# S sliding-window attention, N nextn/MTP.
EXPECTED_LAYERS = {
    "dense-llama": "AAAA",
    "draft-small": "AA",
    "qwen35-hybrid": "RRRARRRA",
    "qwen35-mtp": "RRRARRRAN",
    "swa-dense": "SSASSA",
    "draft-dflash": "SS",
}


def _field(reader: gguf.GGUFReader, key: str):
    field = reader.get_field(key)
    return None if field is None else field.contents()


def _layer_code(tensor_names: set[str], il: int) -> str:
    b = f"blk.{il}."
    if b + "nextn.eh_proj.weight" in tensor_names:
        return "N"
    if b + "ssm_a" in tensor_names:
        return "R"
    assert b + "attn_k.weight" in tensor_names, f"layer {il} has neither attention nor recurrent tensors"
    return "A"


@pytest.mark.parametrize("name", gen_models.MODEL_NAMES)
def test_header_facts(lab_models, name):
    entry = lab_models[name]
    reader = gguf.GGUFReader(entry["path"])
    expected = EXPECTED_HEADERS[name]
    arch = _field(reader, "general.architecture")
    assert arch == expected["arch"]
    for key, want in expected.items():
        if key == "arch":
            continue
        assert _field(reader, f"{arch}.{key}") == want, f"{name}: {arch}.{key}"

    names = {t.name for t in reader.tensors}
    layers = EXPECTED_LAYERS[name]
    assert len(layers) == _field(reader, f"{arch}.block_count")
    if arch == "qwen35":
        assert "".join(_layer_code(names, il) for il in range(len(layers))) == layers
    if arch == "gemma3":
        # every layer has attention; which ones slide follows llama.cpp's set_swa_pattern law
        assert "".join("S" if gen_models.gemma3_layer_is_swa(il, 3) else "A" for il in range(6)) == layers
    if arch == "dflash":
        assert _field(reader, f"{arch}.attention.sliding_window_pattern") == [True] * len(layers)
        mask = _field(reader, "tokenizer.ggml.mask_token_id")
        assert _field(reader, "tokenizer.ggml.tokens")[mask] == "<|mask|>"
        # the DFlash2 selector and the per-layer dynamic convolutions are what b11434 keys DFlash2 on
        assert {"selector_hidden.weight", "selector_predecessor.weight", "selector_successor.weight",
                "fc.weight", "blk.0.attn_conv_base", "blk.0.ffn_conv_proj.weight"} <= names
    # the manifest tells the planner the same story as the header
    assert "".join({"attention": "A", "recurrent": "R", "swa": "S", "nextn": "N"}[k]
                   for k in entry["layer_kinds"]) == layers
    assert len(_field(reader, "tokenizer.ggml.tokens")) == entry["n_vocab"] == 320


def test_vocab_is_shared(lab_models):
    vocabs = {name: gguf.GGUFReader(e["path"]).get_field("tokenizer.ggml.tokens").contents()
              for name, e in lab_models.items() if name in gen_models.MODEL_NAMES}  # projectors have none
    first = vocabs["dense-llama"]
    assert all(v == first for v in vocabs.values())


def test_generator_is_deterministic(tmp_path, lab_models):
    a = gen_models.generate(tmp_path / "a")
    # the CLI, in another process: same bytes, and its stdout manifest says so
    cli = subprocess.run([sys.executable, gen_models.__file__, "--out", str(tmp_path / "b")],
                         check=True, capture_output=True, text=True)
    b = json.loads(cli.stdout)
    assert json.loads((tmp_path / "b" / "MANIFEST.json").read_text()) == b
    for name in gen_models.MODEL_NAMES:
        assert a[name]["sha256"] == b[name]["sha256"], name
        assert a[name]["sha256"] == lab_models[name]["sha256"], name
        assert (tmp_path / "a" / f"{name}.gguf").read_bytes() == (tmp_path / "b" / f"{name}.gguf").read_bytes()
    # the seed is really what fixes the bytes
    other = gen_models.write_model("dense-llama", tmp_path / "seed1.gguf", seed=1)
    assert other["sha256"] != a["dense-llama"]["sha256"]


def test_rerun_reuses_files(tmp_path):
    first = gen_models.generate(tmp_path, ["draft-small"])
    path = tmp_path / "draft-small.gguf"
    mtime = path.stat().st_mtime_ns
    again = gen_models.generate(tmp_path, ["draft-small"])
    assert again == first and path.stat().st_mtime_ns == mtime
    path.write_bytes(path.read_bytes()[:-1] + b"\x01")  # corrupt: must be rewritten, not trusted
    fixed = gen_models.generate(tmp_path, ["draft-small"])
    assert fixed["draft-small"]["sha256"] == first["draft-small"]["sha256"]
    assert gen_models.file_sha256(path) == first["draft-small"]["sha256"]


def test_bad_overrides_name_the_cause(tmp_path):
    with pytest.raises(ValueError, match="unknown override.*sliding_window"):
        gen_models.write_model("dense-llama", tmp_path / "x.gguf", sliding_window=4)
    with pytest.raises(ValueError, match="n_head .* multiple of n_head_kv"):
        gen_models.write_model("dense-llama", tmp_path / "x.gguf", n_head=4, n_head_kv=3)
    with pytest.raises(ValueError, match="selector lattice"):
        gen_models.write_model("draft-dflash", tmp_path / "x.gguf", selector_top_k=16)
    assert not list(tmp_path.iterdir()), "a refused model must leave nothing behind"


def _complete(srv, n_predict=16):
    return srv.post_json("/completion", {"prompt": PROMPT, "n_predict": n_predict, "temperature": 0,
                                         "ignore_eos": True, "cache_prompt": False, "return_tokens": True})


@pytest.mark.parametrize("name", SERVED)
def test_model_answers(lab_models, llama_server, name):
    with llama_server(lab_models[name]["path"], "-np", "1") as srv:
        chat = srv.post_json("/v1/chat/completions", {
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 8, "temperature": 0, "ignore_eos": True})
        assert chat["usage"]["completion_tokens"] >= 1, chat
        assert chat["choices"][0]["message"]["role"] == "assistant"
        one = _complete(srv)
        two = _complete(srv)
        assert one["tokens_predicted"] == 16 and len(one["tokens"]) == 16, one
        assert one["tokens"] == two["tokens"], "greedy decoding must be deterministic"


# (target, extra args, a line b11434 logs at the default verbosity when that drafter is set up).
# draft-simple and draft-mtp log "adding speculative implementation" only at trace level (-lv 4)
# in b11434; draft-dflash logs it at info. The metric is the proof either way.
@pytest.mark.parametrize("kind,overrides,want_types", [
    ("qwen35-mtp", {"tensor_type": "q8_0"}, {"Q8_0", "F32"}),
    ("dense-llama", {"tensor_type": "f32", "n_layer": 3}, {"F32"}),
    ("swa-dense", {"tensor_type": "q8_0", "sliding_window": 64}, {"Q8_0", "F32"}),
], ids=["qwen35-mtp-q8_0", "dense-llama-f32", "swa-dense-q8_0"])
def test_variant_answers(tmp_path, llama_server, kind, overrides, want_types):
    entry = gen_models.write_model(kind, tmp_path / f"{kind}.gguf", **overrides)
    stored = {t.tensor_type.name for t in gguf.GGUFReader(entry["path"]).tensors}
    assert stored == want_types == set(entry["stored_types"])
    with llama_server(entry["path"], "-np", "1") as srv:
        assert _complete(srv, n_predict=4)["tokens_predicted"] == 4


SPEC_CASES = {
    "dense-llama+draft-simple": ("dense-llama", ["--spec-type", "draft-simple", "--spec-draft-model", "@draft-small"],
                                 "common_speculative_init_result: loading draft model"),
    "qwen35-mtp+draft-mtp": ("qwen35-mtp", ["--spec-type", "draft-mtp"],
                             "creating MTP draft context against the target model"),
    "qwen35-hybrid+draft-dflash": ("qwen35-hybrid",
                                   ["--spec-type", "draft-dflash", "--spec-draft-model", "@draft-dflash"],
                                   "adding speculative implementation 'draft-dflash'"),
    # the runbook's DFlash2 era: a target that carries its own MTP head, drafted by DFlash2 at n_max 7
    "qwen35-mtp+draft-dflash@7": ("qwen35-mtp",
                                  ["--spec-type", "draft-dflash", "--spec-draft-model", "@draft-dflash",
                                   "--spec-draft-n-max", "7"],
                                  "block_size=8, mask_token_id="),
}


@pytest.mark.parametrize("case", list(SPEC_CASES))
def test_drafter_drafts(lab_models, llama_server, case):
    target, args, init_line = SPEC_CASES[case]
    args = [lab_models[a[1:]]["path"] if a.startswith("@") else a for a in args]
    with llama_server(lab_models[target]["path"], "-np", "1") as srv:
        plain = _complete(srv, n_predict=32)
    with llama_server(lab_models[target]["path"], "-np", "1", "--metrics", *args) as srv:
        before = srv.metrics()
        out = _complete(srv, n_predict=32)
        after = srv.metrics()
        log = srv.log_text()
    assert init_line in log, "drafter not set up; log tail:\n" + log[-3000:]
    key = "llamacpp:spec_decode_num_drafts_total"
    assert after.get(key, 0) - before.get(key, 0) > 0, f"{key} stayed at {after.get(key)}: the drafter never drafted"
    assert out["tokens_predicted"] == 32, out
    # speculation buys speed, never a different answer (greedy)
    assert out["tokens"] == plain["tokens"]
