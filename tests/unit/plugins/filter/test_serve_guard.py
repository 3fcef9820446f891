"""serve_shadowed: extra args/env that would override a planned or guarded setting are named, with the fix."""
import os
import re

import pytest

from ansible_collections.dankfleet.llm.tests.unit import planner_testlib as lib
from ansible.errors import AnsibleFilterError
from ansible_collections.dankfleet.llm.plugins.filter.serve_shadowed import FilterModule
from ansible_collections.dankfleet.llm.plugins.module_utils.plan.serve_guard import FLAG_VARIABLE, shadowed

serve_shadowed = FilterModule().filters()["serve_shadowed"]
LAUNCHER = os.path.join(lib.ROOT, "roles", "llama_server", "templates", "serve-llama-server.sh.j2")


@pytest.mark.parametrize("args, variable", [
    (["--ctx-size", "8192"], "llama_server_ctx_size"),
    (["-c", "8192"], "llama_server_ctx_size"),
    (["--ctx-size=8192"], "llama_server_ctx_size"),
    (["-ts", "1,1"], "llama_server_tensor_split"),
    (["--tensor-split=3,1"], "llama_server_tensor_split"),
    (["-dev", "ROCm0"], "llama_server_devices"),
    (["--split-mode", "row"], "llama_server_split_mode"),
    (["-ngl", "10"], "llama_server_gpu_layers"),
    (["-np", "4"], "llama_server_parallel"),
    (["--port", "1"], "llama_server_port"),
    (["-md", "/x.gguf"], "llama_server_drafter_path"),
    (["--rpc", "10.0.0.2:50052"], "llama_server_rpc"),
    (["-lv", "5"], "llama_server_log_verbosity"),
    (["--cpu-moe"], "llama_server_cpu_moe"),
    (["-cmoe"], "llama_server_cpu_moe"),
    (["--n-cpu-moe", "24"], "llama_server_n_cpu_moe"),
    (["-ncmoe=24"], "llama_server_n_cpu_moe"),
    (["--load-mode", "none"], "llama_server_load_mode"),
    (["-lm=mmap"], "llama_server_load_mode"),
    # issue 34: where the projector runs and the image-token limits are settings the plan books
    (["--mmproj-device", "ROCm1"], "llama_server_mmproj_device"),
    (["-mmdev=ROCm1"], "llama_server_mmproj_device"),
    (["--no-mmproj-offload"], "llama_server_mmproj_offload"),
    (["--mmproj-offload"], "llama_server_mmproj_offload"),
    (["--image-min-tokens", "64"], "llama_server_image_min_tokens"),
    (["--image-max-tokens=8192"], "llama_server_image_max_tokens"),
])
def test_planned_flags_are_named_with_their_variable(args, variable):
    problems = serve_shadowed(args)
    assert len(problems) == 1 and args[0] in problems[0] and "set %s" % variable in problems[0]


@pytest.mark.parametrize("flag", ["-ot", "--override-tensor=blk.*=CPU", "--main-gpu", "-nkvo", "--n-cpu-moe-draft"])
def test_unplanned_placement_flags_are_named(flag):
    (problem,) = serve_shadowed([flag])
    assert "where fit_plan does not size them" in problem


@pytest.mark.parametrize("flag", ["-ot", "--override-tensor", "--override-tensor=blk\\..*_exps\\.=CPU"])
def test_a_tensor_override_names_the_expert_settings_the_plan_sizes(flag):
    """issue 38: -ot is how experts are kept on the CPU by hand; the settings do it with a plan behind them."""
    (problem,) = serve_shadowed([flag])
    assert "llama_server_n_cpu_moe" in problem and "llama_server_cpu_moe" in problem


def test_other_unplanned_flags_do_not_mention_experts():
    (problem,) = serve_shadowed(["--main-gpu"])
    assert "cpu_moe" not in problem


@pytest.mark.parametrize("name, hint", [
    ("HIP_VISIBLE_DEVICES", "llama_server_hip_visible_devices"),
    ("CUDA_VISIBLE_DEVICES", "llama_server_cuda_visible_devices"),
    ("ROCR_VISIBLE_DEVICES", "llama_server_hip_visible_devices"),
    ("LLAMA_ARG_CTX_SIZE", "llama_server_ctx_size"),
    ("LLAMA_ARG_TENSOR_SPLIT", "llama_server_tensor_split"),
    ("LLAMA_ARG_SOMETHING_NEW", "llama_server_extra_args"),
    ("MTMD_BACKEND_DEVICE", "llama_server_mmproj_device"),
    ("LLAMA_ARG_IMAGE_MAX_TOKENS", "llama_server_image_max_tokens"),
    ("LLAMA_ARG_MMPROJ_OFFLOAD", "llama_server_mmproj_offload"),
])
def test_guarded_env_is_named_with_the_fix(name, hint):
    (problem,) = serve_shadowed([], extra_env={name: "0"})
    assert name in problem and hint in problem


def test_harmless_extras_pass():
    assert serve_shadowed(["--jinja", "--no-webui", "--slot-save-path", "/var/lib/x", "-ctx", "--ctx-size-x"],
                          extra_env={"GGML_CUDA_NO_PINNED": "1", "ROCBLAS_LAYER": "0"}) == []
    assert serve_shadowed(None) == [] and serve_shadowed([], None) == []


def test_malformed_input_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="must be a list"):
        serve_shadowed({"--ctx-size": 1})
    with pytest.raises(AnsibleFilterError, match="must be a dict"):
        serve_shadowed([], extra_env=["HIP_VISIBLE_DEVICES=0"])


def test_every_flag_the_launcher_writes_is_guarded():
    """The launcher is the source of truth: a flag it passes and the table lacks would be shadowable."""
    text = open(LAUNCHER).read()
    written = set(re.findall(r"opt (--[a-z-]+) ", text)) | set(re.findall(r"args\+=\((--[a-z-]+)", text))
    written |= set(re.findall(r"(--[a-z-]+) \"\$", text.split("args=(", 1)[1].split(")", 1)[0]))
    assert written, "no flags parsed from the launcher"
    assert sorted(written - set(FLAG_VARIABLE)) == []
    assert shadowed(sorted(written)) and len(shadowed(sorted(written))) == len(written)
