"""tests/gpu/render_serve.yml, the way the device scripts run it here (tests/gpu/make_bundle.sh: the role's values
alone; tests/gpu/make_bundle_27b.sh: render_plan=true, the plan made from the H200 as recorded and a header-only
model). Both must render, and the env file must carry the plan's shape: the plan path once failed before any file
(llm_plan's facts and plan stages ran without its preflight, so llm_plan_serve was {}: "object of type 'dict' has
no attribute 'ctx_size'"). ~4 s per run, no GPU."""
import json
import os
import subprocess

import gen_models

from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import BIN, REPO, ansible_env

SMI = os.path.join(REPO, "tests", "fixtures", "gpu", "nvidia-smi-h200.csv")


def render(out, settings, *extra):
    env = ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), PATH="%s:%s" % (BIN, os.environ["PATH"]))
    run = subprocess.run([os.path.join(BIN, "ansible-playbook"), "tests/gpu/render_serve.yml",
                          "-e", "@tests/gpu/%s" % settings, "-e", "render_dir=%s" % out] + list(extra),
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    with open(os.path.join(str(out), "llama-server.env")) as handle:
        return dict(line.split("=", 1) for line in handle.read().splitlines() if line and not line.startswith("#"))


def test_the_role_values_render_as_set(tmp_path):
    env = render(tmp_path / "serve", "serve_device.yml")
    assert (env["CTX_SIZE"], env["TENSOR_SPLIT"], env["DEVICES"], env["MODEL_PATH"]) == \
        ("8192", "", "CUDA0", "/root/gpu9/models/dense_g.gguf")
    assert sorted(os.listdir(str(tmp_path / "serve"))) == ["llama-server.env", "llama-server.service", "serve-llama-server"]


def test_the_plan_path_renders_the_plans_shape(tmp_path):
    model = gen_models.write_model("qwen35-mtp", tmp_path / "model" / "q.gguf", header_only=True)
    (tmp_path / "sys").mkdir()
    out = tmp_path / "serve27"
    env = render(out, "serve_27b.yml", "-e", "render_plan=true", "-e", "render_plan_model=%s" % model["path"],
                 "-e", "render_sysfs_root=%s" % tmp_path, "-e", "render_nvidia_smi_file=%s" % SMI)
    with open(str(out / "plan.json")) as handle:
        plan = json.load(handle)
    assert plan["fits"] and plan["errors"] == [] and plan["ctx_size"] > 0     # the inventory left ctx to the planner
    assert env["CTX_SIZE"] == str(plan["ctx_size"])
    assert len(plan["tensor_split"]) == 1
    assert env["TENSOR_SPLIT"] == ""          # one device: every layer on it, no split for llama.cpp to read
    assert env["CACHE_RAM"] == str(plan["cache_ram_mib"])
    assert env["SPEC_TYPE"] == "draft-mtp,ngram-mod" and env["DEVICES"] == "CUDA0"
    with open(str(out / "gpu_facts.json")) as handle:
        assert [(g["name"], g["marketing_name"]) for g in json.load(handle)["gpus"]] == [("CUDA0", "NVIDIA H200")]
