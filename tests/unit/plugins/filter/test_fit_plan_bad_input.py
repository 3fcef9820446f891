"""Bad input: a clear error naming the field and the fix -- never a traceback, through the filter as well."""
import copy
import os
import subprocess
import sys

import pytest

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible.errors import AnsibleFilterError
from ansible_collections.dankfleet.llm.plugins.filter.fit_plan import FilterModule
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.fit_plan import FitPlanError, plan
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import ansible_env

GIB = lib.GIB
MODEL = lib.fixture("frank_medium")
DSPARK = lib.fixture("dspark")
MMPROJ = lib.fixture("mmproj_bf16")
SERVE = {"backend": "hip", "ctx_size": 262144, "parallel": 2, "tensor_split": "auto"}
fit_plan_filter = FilterModule().filters()["fit_plan"]


def _err(match, gpus=None, model=None, serve=None, **kw):
    with pytest.raises(FitPlanError, match=match):
        plan(lib.r9700s() if gpus is None else gpus, MODEL if model is None else model,
             SERVE if serve is None else serve, **kw)


def test_missing_gpu_fields():
    _err(r"gpus\[1\]\.vram_total_bytes is missing", gpus=[lib.r9700s()[0], {"name": "ROCm1"}])
    _err(r"gpus\[0\]\.name is missing", gpus=[{"vram_total_bytes": lib.R9700}])
    _err(r"gpus\[0\]\.vram_total_bytes must be an integer", gpus=[{"name": "x", "vram_total_bytes": "lots"}])
    _err(r"gpus\[0\] must be a dict", gpus=["ROCm0"])
    _err(r"gpus must be a list", gpus="ROCm0,ROCm1")


def test_zero_gpus():
    _err(r"gpus: no usable GPU", gpus=[])
    _err(r"integrated GPUs excluded: Raphael", gpus={"gpus": [{"name": "Raphael", "vram_total_bytes": 2 * GIB,
                                                               "integrated": True}]})
    _err(r"a dict must be gpu_facts' result with a 'gpus' list", gpus={"cards": []})


def test_split_length_mismatch():
    _err(r"serve\.tensor_split has 3 entries but there are 2 device\(s\) \(ROCm0, ROCm1\)",
         serve=dict(SERVE, tensor_split=[30, 30, 5]))
    _err(r"serve\.tensor_split entry 'x' is not a number", serve=dict(SERVE, tensor_split=[1, "x"]))
    _err(r"entries must be >= 0 and not all zero", serve=dict(SERVE, tensor_split=[0, 0]))


def test_missing_serve_fields():
    _err(r"serve\.backend is missing", serve={"ctx_size": 4096})
    _err(r"serve\.ctx_size is missing", serve={"backend": "hip"})
    _err(r"serve\.backend 'metal' is unknown", serve=dict(SERVE, backend="metal"))
    _err(r"serve\.split_mode 'row' is not planned", serve=dict(SERVE, split_mode="row"))
    _err(r"serve\.parallel must be >= 1", serve=dict(SERVE, parallel=0))
    _err(r"serve\.cache_type_k 'q3_k' is not a KV cache type", serve=dict(SERVE, cache_type_k="q3_k"))
    _err(r"serve\.cache_type_v q8_0 needs flash_attn on", serve=dict(SERVE, cache_type_v="q8_0", flash_attn="off"))
    _err(r"serve\.spec_type 'draft-magic' is not a llama\.cpp b11434 speculative type",
         serve=dict(SERVE, spec_type=["draft-magic"]))
    _err(r"serve\.draft_device 'ROCm7' names no device", serve=dict(SERVE, draft_device="ROCm7"))
    _err(r"serve must be a dict", serve="ctx=4096")


def test_missing_model_fields():
    m = copy.deepcopy(MODEL)
    del m["layers"]
    _err(r"model\.layers is missing: pass the result of dankfleet\.llm\.gguf_info", model=m)
    m = copy.deepcopy(MODEL)
    del m["layers"][3]["n_head_kv"]
    _err(r"model\.layers\[3\]\.n_head_kv is missing for a attention layer", model=m)
    m = copy.deepcopy(MODEL)
    m["layers"] = m["layers"][:10]
    _err(r"model\.layers must list block_count \(65\) layers, has 10", model=m)
    m = copy.deepcopy(MODEL)
    m["recurrent_state"] = {}
    _err(r"model\.recurrent_state\.bytes_per_layer_per_seq is missing", model=m)
    _err(r"model is an mmproj file", model=MMPROJ)
    _err(r"mmproj must be gguf_info facts of an mmproj GGUF", mmproj={"architecture": "qwen35"})
    _err(r"host_ram_bytes must be a positive integer", host_ram_bytes=-1)


def test_unknown_architecture():
    m = copy.deepcopy(MODEL)
    m["architecture"] = "frobnicator"
    m["architecture_supported"] = False
    _err(r"model\.architecture 'frobnicator' is not one fit_plan knows how to size", model=m)
    m = copy.deepcopy(MODEL)
    m["layers"][0]["kind"] = "mystery"
    _err(r"model\.layers\[0\]\.kind 'mystery' is unknown", model=m)


def test_ctx_that_cannot_fit_at_any_split():
    r = plan(lib.r9700s(), MODEL, dict(SERVE, ctx_size=2 * 1048576, floor_bytes=GIB))
    assert not r["fits"]
    msg = r["errors"][0]
    assert "serve.ctx_size 2097152 does not fit at any split" in msg
    assert "the largest ctx_size that fits is" in msg and "floor" in msg
    # the largest it names does fit
    n = int(msg.split("the largest ctx_size that fits is ")[1].split(" ")[0])
    assert plan(lib.r9700s(), MODEL, dict(SERVE, ctx_size=n, floor_bytes=GIB))["fits"]


def test_weights_alone_do_not_fit():
    small = [{"name": "GPU0", "vram_total_bytes": 8 * GIB}]
    r = plan(small, MODEL, dict(SERVE, ctx_size="max"))
    assert not r["fits"] and "not even 256 tokens per slot fit" in r["errors"][0]
    r = plan(small, MODEL, dict(SERVE, ctx_size=4096))
    assert not r["fits"] and "no ctx_size fits at all" in r["errors"][0]


def test_model_backed_spec_type_without_a_drafter():
    r = plan(lib.r9700s(), MODEL, dict(SERVE, spec_type=["draft-dspark"], spec_draft_n_max=6))
    assert not r["fits"] and any("needs a drafter model" in e for e in r["errors"])
    m = copy.deepcopy(MODEL)
    m["nextn_predict_layers"] = 0
    for L in m["layers"][64:]:
        L["kind"] = "attention"
    r = plan(lib.r9700s(), m, dict(SERVE, spec_type=["draft-mtp"]))
    assert not r["fits"] and any("nextn_predict_layers is 0" in e for e in r["errors"])


def test_cache_ram_unlimited_is_refused_and_zero_warns():
    r = plan(lib.r9700s(), MODEL, dict(SERVE, cache_ram_mib=-1), host_ram_bytes=60 * GIB)
    assert not r["fits"] and any("-1 (unlimited) is refused" in e for e in r["errors"])
    r = plan(lib.r9700s(), MODEL, dict(SERVE, cache_ram_mib=0), host_ram_bytes=60 * GIB)
    assert any("disables the prompt cache" in w for w in r["warnings"])
    r = plan(lib.r9700s(), MODEL, dict(SERVE, cache_ram_mib="auto"))
    assert any("host_ram_bytes not given" in w for w in r["warnings"])


# ------------------------------------------------------------------ the filter wrapper

def test_filter_returns_the_plan():
    r = fit_plan_filter(lib.r9700s(), model=MODEL, serve=dict(SERVE, ctx_size=131072))
    assert r["fits"] and set(r) >= {"fits", "tensor_split", "ctx_size", "ctx_per_slot", "devices", "gap_bytes",
                                    "cache_ram_mib", "warnings", "errors", "table"}
    assert set(r["devices"][0]) >= {"name", "layers", "weights_bytes", "kv_bytes", "recurrent_bytes", "draft_bytes",
                                    "mmproj_bytes", "compute_bytes", "total_bytes", "free_bytes"}


@pytest.mark.parametrize("kwargs, match", [
    (dict(gpus=[]), "dankfleet.llm.fit_plan: gpus: no usable GPU"),
    (dict(model=None), "model= is missing"),
    (dict(serve=None), "serve= is missing"),
    (dict(serve=dict(SERVE, tensor_split=[1, 2, 3])), "serve.tensor_split has 3 entries"),
    (dict(model={"architecture": "qwen35"}), "model.block_count is missing"),
    (dict(model=dict(MODEL, layers=[None] * 65)), r"model.layers\[0\].kind is missing"),
    (dict(model=dict(MODEL, architecture="frobnicator", architecture_supported=False)), "frobnicator"),
    (dict(model=dict(MODEL, layers="all of them")), "model.layers must list block_count"),
])
def test_filter_raises_ansible_filter_error_naming_the_input(kwargs, match):
    args = dict(kwargs)
    gpus = args.pop("gpus", lib.r9700s())
    args.setdefault("model", MODEL)
    args.setdefault("serve", SERVE)
    with pytest.raises(AnsibleFilterError, match=match):
        fit_plan_filter(gpus, **args)


def test_filter_wraps_unexpected_type_errors():
    m = copy.deepcopy(MODEL)
    m["layers"][5]["tensor_bytes"] = "a lot"
    with pytest.raises(AnsibleFilterError, match="malformed input"):
        fit_plan_filter(lib.r9700s(), model=m, serve=SERVE)


def test_filter_through_ansible_has_no_traceback(tmp_path):
    """A playbook calling the filter with a zero-GPU host fails the task with the message, not a traceback."""
    play = tmp_path / "play.yml"
    play.write_text("""
- hosts: localhost
  gather_facts: false
  vars:
    model: {}
  tasks:
    - ansible.builtin.debug:
        msg: "{{ [] | dankfleet.llm.fit_plan(model=model, serve={'backend': 'hip', 'ctx_size': 4096}) }}"
""")
    env = ansible_env(ANSIBLE_NOCOLOR="1",
                      ANSIBLE_CONFIG=os.path.join(lib.ROOT, "ansible.cfg"))
    bindir = os.path.dirname(sys.executable)
    out = subprocess.run([os.path.join(bindir, "ansible-playbook"), "-i", "localhost,", "-c", "local", str(play)],
                         capture_output=True, text=True, check=False, env=env, cwd=lib.ROOT, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    assert "dankfleet.llm.fit_plan: gpus: no usable GPU" in text
    assert "Traceback" not in text


@pytest.mark.parametrize("serve,field,variable", [
    (dict(SERVE, cache_type_k="q9"), "serve.cache_type_k", "llama_server_cache_type_k"),
    (dict(SERVE, tensor_split=[1, 2, 3]), "serve.tensor_split", "llama_server_tensor_split"),
    (dict(SERVE, spec_type=["draft-nope"]), "serve.spec_type", "llama_server_spec_type"),
])
def test_the_role_reads_a_refusal_in_the_names_the_operator_edits(serve, field, variable):
    with pytest.raises(AnsibleFilterError, match=field.replace(".", r"\.")):
        fit_plan_filter(lib.r9700s(), MODEL, serve)
    with pytest.raises(AnsibleFilterError) as exc:
        fit_plan_filter(lib.r9700s(), MODEL, serve, names="inventory")
    assert variable in str(exc.value) and "serve." not in str(exc.value)


def test_a_plan_that_does_not_fit_names_inventory_variables_when_asked():
    serve = dict(SERVE, tensor_split=[35, 30], ctx_size=4 * 1048576, floor_bytes=2 * GIB)
    assert any("serve.ctx_size" in e for e in fit_plan_filter(lib.r9700s(), MODEL, serve)["errors"])
    errors = fit_plan_filter(lib.r9700s(), MODEL, serve, names="inventory")["errors"]
    assert errors and not any("serve." in e for e in errors)
    assert any("llama_server_ctx_size" in e and "dankfleet_plan_floor_bytes" in e for e in errors)
    with pytest.raises(AnsibleFilterError, match="names is serve or inventory"):
        fit_plan_filter(lib.r9700s(), MODEL, serve, names="yaml")
