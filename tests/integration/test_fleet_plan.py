"""The fleet's plan stage, as the operator runs it: `deploy-frank-medium.yml -i inventory/production
--check --tags plan`, over BOTH llm_endpoints hosts of the real production inventory, with a connection
overlay (a second -i) that only makes them local and hands each its recorded board:

- dankserver: tests/fixtures/gpu/b850-proart.facts.json (2x R9700) and dankserver's 60 GiB of RAM;
- frank-zealot: tests/fixtures/gpu/rtx3090.facts.json (one RTX 3090, 24 GiB; gpu_facts' result for
  nvidia-smi-rtx3090.csv - test_rtx3090_facts_fixture_is_what_gpu_facts_reports keeps it honest).

Neither payload is on this machine, as on a first deploy. dankserver is planned from the GGUF headers
recorded on the controller (its host_vars' dankfleet_plan_header_facts): the capacity table shows the
runbook's 32:33 at 327680 x 2 and the binding card. frank-zealot's manifest is still FILL-: it is a
"cannot plan" row in the fleet summary, and the run still succeeds. With its manifest filled (the lab's
MTP model, present on the "host") frank-zealot gets its own table from the cuda profile. A host that
does not fit stops alone, with its table, and the summary still lists it. Nothing is built, fetched or
changed. Three plan-only runs: ~16 s.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils import gpu_facts as gf

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GPU = REPO / "tests" / "fixtures" / "gpu"
GIB = 1 << 30


def overlay(tmp_path, zealot_extra=None):
    """A second inventory: both hosts local, unprivileged, each with its recorded board."""
    local = {"ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable}
    hosts = {
        "dankserver": dict(local, dankfleet_gpu_facts_file=str(GPU / "b850-proart.facts.json"),
                           dankfleet_plan_host_ram_bytes=60 * GIB),
        "frank-zealot": dict(local, dankfleet_gpu_facts_file=str(GPU / "rtx3090.facts.json")),
    }
    path = tmp_path / "local"
    (path / "host_vars").mkdir(parents=True)
    (path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"llm_endpoints": {"hosts": hosts}}}}))
    if zealot_extra:
        # host_vars of the later inventory source win over production's host_vars/frank-zealot.yml
        (path / "host_vars" / "frank-zealot.yml").write_text(yaml.safe_dump(zealot_extra))
    return path


def plan_only(*extra):
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_ROLES_PATH=f"{REPO / 'roles'}:{REPO / 'tests/lab/roles'}", ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    run = subprocess.run(["ansible-playbook", "-i", "inventory/production", *extra, "deploy-frank-medium.yml",
                          "--check", "--tags", "plan"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    return run


def debug_msgs(stdout, task):
    """{host: msg} of a debug task, from the default callback's json result format."""
    out = {}
    for block in stdout.split("\nTASK [")[1:]:
        # a role's task is named "<role> : <task>" (the plan stages are role dankfleet.llm.llm_plan)
        if not re.match(r"(?:[\w.]+ : )?" + re.escape(task) + r"\]", block):
            continue
        for host, body in re.findall(r"^ok: \[([^\]]+)\] => (\{.*?^\})", block, re.S | re.M):
            msg = json.loads(body)["msg"]
            out.setdefault(host, []).append(msg)
    return out


def test_rtx3090_facts_fixture_is_what_gpu_facts_reports(tmp_path):
    (tmp_path / "sys").mkdir()
    live = gf.collect(str(tmp_path), nvidia_smi_text=(GPU / "nvidia-smi-rtx3090.csv").read_text())
    recorded = json.loads((GPU / "rtx3090.facts.json").read_text())
    assert recorded["gpus"] == live["gpus"] and recorded["topology"] == live["topology"]
    (card,) = gf.load_facts(str(GPU / "rtx3090.facts.json"))["gpus"]
    assert (card["name"], card["backend"], card["vram_total_bytes"]) == ("CUDA0", "cuda", 24 * GIB)


def test_fleet_plan_from_the_production_inventory(tmp_path):
    run = plan_only("-i", str(overlay(tmp_path)))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    # nothing built, fetched, rendered or changed: only the plan stage ran
    assert re.search(r"dankserver\s*: ok=\d+\s+changed=0 .*failed=0", run.stdout), run.stdout[-1500:]
    assert re.search(r"frank-zealot\s*: ok=\d+\s+changed=0 .*failed=0", run.stdout), run.stdout[-1500:]
    for stage in ("llama_cpp_build : Build", "gguf_fetch : Fetch", "Render", "Retire"):
        assert "TASK [dankfleet.llm." + stage not in run.stdout

    tables = debug_msgs(run.stdout, "Show the capacity table")
    assert list(tables) == ["dankserver"], tables   # frank-zealot cannot be planned: no table
    (dank,) = tables["dankserver"]
    assert dank[0] == "capacity of dankserver (hip profile, headers recorded on the controller)"
    assert dank[1:3] == ["split: 32:33 (layer)", "context: 327680 (2 x 163840), cache-ram 16384 MiB"]
    assert re.fullmatch(r"card ROCm0: \d+ layers, \d+\.\d\d GiB free of 31\.86 GiB", dank[3]), dank
    assert re.fullmatch(r"card ROCm1: \d+ layers, \d+\.\d\d GiB free of 31\.86 GiB", dank[4]), dank
    assert re.fullmatch(r"binding: ROCm1: \d+\.\d\d GiB free, \d+\.\d\d GiB above the 1\.50 GiB floor", dank[5]), dank

    (summary,) = debug_msgs(run.stdout, "Fleet summary (one verdict per host)")["dankserver"]
    assert summary[0] == "fleet: 2 host(s), 1 fit, 0 do not fit, 1 not planned"
    assert summary[1].startswith("dankserver: fits - split 32:33, context 327680 (2 x 163840), binding ROCm1: ")
    assert summary[2].startswith("frank-zealot: cannot plan: the payload is still a placeholder in gguf_fetch_manifest "
                                 "(FILL-a-quant-that-fits-24GiB.gguf, FILL-mmproj-f16.gguf)"), summary


def test_fleet_plan_with_zealot_named(tmp_path, lab_models):
    # frank-zealot with a payload that is on the "host" (the lab's MTP model, where gguf_fetch puts it):
    # its headers are read there and the cuda profile plans the one 24 GiB card
    mtp = lab_models["qwen35-mtp"]
    models = tmp_path / "models"
    (models / "lab-mtp").mkdir(parents=True)
    (models / "lab-mtp" / "qwen35-mtp.gguf").symlink_to(mtp["path"])
    zealot = {"gguf_fetch_models_dir": str(models), "llama_server_vision": False,
              "gguf_fetch_manifest": [{"name": "lab-mtp", "role": "target", "repo": "lab/mtp", "revision": "main",
                                       "file": "qwen35-mtp.gguf", "url": "http://127.0.0.1/qwen35-mtp.gguf",
                                       "size": mtp["size"], "sha256": mtp["sha256"]}]}
    run = plan_only("-i", str(overlay(tmp_path, zealot)))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    tables = debug_msgs(run.stdout, "Show the capacity table")
    assert sorted(tables) == ["dankserver", "frank-zealot"], tables
    (zt,) = tables["frank-zealot"]
    assert zt[0] == "capacity of frank-zealot (cuda profile, headers read on the host)"
    assert zt[1] == "split: none - one CUDA0"
    assert re.fullmatch(r"context: \d+, cache-ram \d+ MiB", zt[2]), zt
    assert re.fullmatch(r"card CUDA0: \d+ layers, \d+\.\d\d GiB free of 24\.00 GiB", zt[3]), zt
    assert re.fullmatch(r"binding: CUDA0: .* above the 1\.00 GiB floor", zt[4]), zt
    (summary,) = debug_msgs(run.stdout, "Fleet summary (one verdict per host)")["dankserver"]
    assert summary[0] == "fleet: 2 host(s), 2 fit, 0 do not fit, 0 not planned"
    assert summary[2].startswith("frank-zealot: fits - split none - one CUDA0, context ")


def test_a_host_that_does_not_fit_stops_alone_and_is_in_the_summary(tmp_path):
    # 50:15 puts 51 layers on ROCm0: dankserver is refused with its table; the summary (run by the host
    # still in the play) lists it, and frank-zealot goes on to its "cannot plan" row
    run = plan_only("-i", str(overlay(tmp_path)), "-e", json.dumps({"llama_server_tensor_split": [50, 15]}))
    assert run.returncode != 0
    assert re.search(r"dankserver\s*: ok=\d+\s+changed=0 .*failed=1", run.stdout), run.stdout[-1500:]
    assert re.search(r"frank-zealot\s*: ok=\d+\s+changed=0 .*failed=0", run.stdout), run.stdout[-1500:]
    (dank,) = debug_msgs(run.stdout, "Show the capacity table")["dankserver"]
    assert dank[1] == "split: 50:15 (layer)" and dank[-1].startswith("binding: does not fit - serve.ctx_size 327680")
    (summary,) = debug_msgs(run.stdout, "Fleet summary (one verdict per host)")["frank-zealot"]
    assert summary[0] == "fleet: 2 host(s), 0 fit, 1 do not fit, 1 not planned"
    assert summary[1].startswith("dankserver: DOES NOT FIT - split 50:15")
    assert summary[2].startswith("frank-zealot: cannot plan: ")
