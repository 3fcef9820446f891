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

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils import gpu_facts as gf

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GPU = REPO / "tests" / "fixtures" / "gpu"
GIB = 1 << 30


def overlay(tmp_path, zealot_extra=None, dank_extra=None):
    """A second inventory: both hosts local, unprivileged, each with its recorded board."""
    local = {"ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable}
    hosts = {
        "dankserver": dict(local, dankfleet_gpu_facts_file=str(GPU / "b850-proart.facts.json"),
                           dankfleet_plan_host_ram_bytes=60 * GIB),
        "frank-zealot": dict(local, dankfleet_gpu_facts_file=str(GPU / "rtx3090.facts.json")),
    }
    path = tmp_path / "local"
    (path / "host_vars").mkdir(parents=True)
    (path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"llm_endpoints": {"hosts": {
        h: {} for h in hosts}}}}}))
    # host_vars of the later inventory source win over production's host_vars/<host>.yml (which names the
    # recorded boards of an offline run only)
    hosts["frank-zealot"].update(zealot_extra or {})
    hosts["dankserver"].update(dank_extra or {})
    for host, values in hosts.items():
        (path / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(values))
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


def assert_lines(lines, patterns):
    """One line per regex, each matching its line whole."""
    assert len(lines) == len(patterns), lines
    for line, pattern in zip(lines, patterns):
        assert re.fullmatch(pattern, line), (pattern, lines)


def fleet_summary(stdout, host):
    """The fleet summary's lines, as printed by the one host that ran it (run_once)."""
    (summary,) = debug_msgs(stdout, "Fleet summary (one verdict per host)")[host]
    return summary


# What the plan stage prints, line by line (regexes matched whole).
DANKSERVER_TABLE = [
    r"capacity of dankserver \(hip profile, headers recorded on the controller\)",
    r"split: 32:33 \(layer\)",
    r"context: 327680 \(2 x 163840\), cache-ram 16384 MiB",
    r"card ROCm0: \d+ layers, \d+\.\d\d GiB free of 31\.86 GiB",
    r"card ROCm1: \d+ layers, \d+\.\d\d GiB free of 31\.86 GiB",
    r"binding: ROCm1: \d+\.\d\d GiB free, \d+\.\d\d GiB above the 1\.50 GiB floor",
]
# frank-zealot with a payload that is on the "host" (the lab's MTP model, where gguf_fetch puts it): its
# headers are read there and the cuda profile plans the one 24 GiB card
ZEALOT_TABLE = [
    r"capacity of frank-zealot \(cuda profile, headers read on the host\)",
    r"split: none - one CUDA0",
    r"context: \d+, cache-ram \d+ MiB",
    r"card CUDA0: \d+ layers, \d+\.\d\d GiB free of 24\.00 GiB",
    r"binding: CUDA0: .* above the 1\.00 GiB floor",
]
DANKSERVER_FITS = r"dankserver: fits - split 32:33, context 327680 \(2 x 163840\), binding ROCm1: .*"


@pytest.mark.parametrize("zealot_named,tables,summary", [
    # the production inventory as it is: frank-zealot's manifest is FILL-, so it cannot be planned
    (False, {"dankserver": DANKSERVER_TABLE},
     [r"fleet: 2 host\(s\), 1 fit, 0 do not fit, 1 not planned", DANKSERVER_FITS,
      r"frank-zealot: cannot plan: the payload is still a placeholder in gguf_fetch_manifest "
      r"\(FILL-a-quant-that-fits-24GiB\.gguf, FILL-mmproj-f16\.gguf\).*"]),
    (True, {"dankserver": DANKSERVER_TABLE, "frank-zealot": ZEALOT_TABLE},
     [r"fleet: 2 host\(s\), 2 fit, 0 do not fit, 0 not planned", DANKSERVER_FITS,
      r"frank-zealot: fits - split none - one CUDA0, context .*"]),
], ids=["production-inventory", "zealot-named"])
def test_fleet_plan(tmp_path, request, zealot_named, tables, summary):
    zealot = None
    if zealot_named:
        mtp = request.getfixturevalue("lab_models")["qwen35-mtp"]
        models = tmp_path / "models"
        (models / "lab-mtp").mkdir(parents=True)
        (models / "lab-mtp" / "qwen35-mtp.gguf").symlink_to(mtp["path"])
        zealot = {"gguf_fetch_models_dir": str(models), "llama_server_vision": False,
                  "gguf_fetch_manifest": [{"name": "lab-mtp", "role": "target", "repo": "lab/mtp", "revision": "main",
                                           "file": "qwen35-mtp.gguf", "url": "http://127.0.0.1/qwen35-mtp.gguf",
                                           "size": mtp["size"], "sha256": mtp["sha256"]}]}
    run = plan_only("-i", str(overlay(tmp_path, zealot)))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    # nothing built, fetched, rendered or changed: only the plan stage ran
    assert re.search(r"dankserver\s*: ok=\d+\s+changed=0 .*failed=0", run.stdout), run.stdout[-1500:]
    assert re.search(r"frank-zealot\s*: ok=\d+\s+changed=0 .*failed=0", run.stdout), run.stdout[-1500:]
    for stage in ("llama_cpp_build : Build", "gguf_fetch : Fetch", "Render", "Retire"):
        assert "TASK [dankfleet.llm." + stage not in run.stdout

    printed = debug_msgs(run.stdout, "Show the capacity table")
    assert sorted(printed) == sorted(tables), printed   # a host that cannot be planned prints no table
    for host, patterns in tables.items():
        (table,) = printed[host]
        assert_lines(table, patterns)
    assert_lines(fleet_summary(run.stdout, "dankserver"), summary)


def test_a_host_that_does_not_fit_stops_alone_and_is_in_the_summary(tmp_path):
    # 50:15 puts 51 layers on ROCm0: dankserver is refused with its table; the summary (run by the host
    # still in the play) lists it, and frank-zealot goes on to its "cannot plan" row
    # (dankserver's own: frank-zealot's one card takes no two-way split - the settle step would refuse it there)
    run = plan_only("-i", str(overlay(tmp_path, dank_extra={"llama_server_tensor_split": [50, 15]})))
    assert run.returncode != 0
    assert re.search(r"dankserver\s*: ok=\d+\s+changed=0 .*failed=1", run.stdout), run.stdout[-1500:]
    assert re.search(r"frank-zealot\s*: ok=\d+\s+changed=0 .*failed=0", run.stdout), run.stdout[-1500:]
    (dank,) = debug_msgs(run.stdout, "Show the capacity table")["dankserver"]
    assert dank[1] == "split: 50:15 (layer)" and dank[-1].startswith("binding: does not fit - serve.ctx_size 327680")
    assert_lines(fleet_summary(run.stdout, "frank-zealot"),
                 [r"fleet: 2 host\(s\), 0 fit, 1 do not fit, 1 not planned", r"dankserver: DOES NOT FIT - split 50:15.*",
                  r"frank-zealot: cannot plan: .*"])


# --- the operator's first run: playbooks/plan.yml, and the deploy's plan stage offline ---------------------

def unreachable(tmp_path):
    """A second inventory that points both hosts at a closed local port: neither answers, as from a fresh clone."""
    path = tmp_path / "unreachable"
    (path / "host_vars").mkdir(parents=True)
    (path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"llm_endpoints": {"hosts": {
        "dankserver": {}, "frank-zealot": {}}}}}}))
    for host in ("dankserver", "frank-zealot"):
        (path / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(
            {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_ssh_common_args": "-o ConnectTimeout=3"}))
    return path


def ansible_playbook(*args):
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_ROLES_PATH=f"{REPO / 'roles'}:{REPO / 'tests/lab/roles'}", ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    return subprocess.run(["ansible-playbook", "-i", "inventory/production", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180)


def production_placeholders():
    """Every FILL- placeholder written in inventory/production's variables (comments are not values)."""
    found = set()

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str):
            found.update(re.findall(r"FILL[A-Za-z0-9_./-]*", value))

    for path in (REPO / "inventory" / "production").rglob("*.yml"):
        walk(yaml.safe_load(path.read_text()))
    return found


def assert_planned_offline(run):
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    for host in ("dankserver", "frank-zealot"):
        assert re.search(host + r"\s*: ok=\d+\s+changed=0 .*failed=0", run.stdout), run.stdout[-1500:]
    (table,) = debug_msgs(run.stdout, "Show the capacity table")["dankserver"]
    assert_lines(table, DANKSERVER_TABLE)
    assert_lines(fleet_summary(run.stdout, "dankserver"),
                 [r"fleet: 2 host\(s\), 1 fit, 0 do not fit, 1 not planned", DANKSERVER_FITS,
                  r"frank-zealot: cannot plan: the payload is still a placeholder .*"])
    (checklist,) = debug_msgs(run.stdout, "Checklist - everything still to fill, every host")["dankserver"]
    text = "\n".join(checklist)
    missing = sorted(p for p in production_placeholders() if p not in text)
    assert missing == [], (missing, checklist)
    # each line names the variable the operator edits, and both hosts have theirs
    assert any(line.startswith("dankserver: frank_medium_files.orcarouter_q8_0: size 0") for line in checklist), checklist
    assert any(line.startswith("dankserver: dankfleet_serving_now [radiance-tp2]: ") for line in checklist), checklist
    assert any(line.startswith("frank-zealot: gguf_fetch_manifest [target]: ") for line in checklist), checklist
    # no stage past the plan did anything (their always-tagged includes and spec checks may show, skipped)
    for block in run.stdout.split("\nTASK [")[1:]:
        name = block.split("]", 1)[0]
        if name.startswith(tuple("dankfleet.llm." + r + " : " for r in
                                 ("llama_cpp_build", "gguf_fetch", "llama_server", "runtime_retire"))) \
                and " : Validating arguments" not in name:
            assert not re.search(r"^(ok|changed): ", block, re.M), block[:1500]


def test_plan_playbook_plans_every_host_offline_in_one_run(tmp_path):
    expected = {"FILL-the-Hub-LFS-oid", "FILL-sha256-of-the-toolchain-tarball", "FILL-radiance-tp2-quadlet.container",
                "FILL-mmproj-f16.gguf"}
    assert production_placeholders() >= expected
    assert_planned_offline(ansible_playbook("-i", str(unreachable(tmp_path)), "playbooks/plan.yml"))


def test_deploy_plan_tag_offline_plans_and_changes_nothing():
    assert_planned_offline(ansible_playbook("deploy-frank-medium.yml", "--tags", "plan", "-e", "dankfleet_offline=true"))


def test_a_run_that_changes_a_host_refuses_every_placeholder_at_once():
    run = ansible_playbook("deploy-frank-medium.yml", "-e", "dankfleet_offline=true", "--limit", "dankserver")
    assert run.returncode != 0
    tasks = re.findall(r"^TASK \[(.*?)\]", run.stdout, re.M)
    assert tasks[-1].startswith("Settle the inventory"), tasks
    # the retire list, the payload and the toolchain: every kind in one failure
    msg = run.stdout + run.stderr
    for placeholder in ("dankfleet_serving_now [radiance-tp2]: files[0] FILL-radiance-tp2-dir/entrypoint.sh",
                        "frank_medium_files.orcarouter_q8_0: size 0", "FILL-the-Hub-LFS-oid",
                        "llama_cpp_build_toolchain_sha256: FILL-sha256-of-the-toolchain-tarball"):
        assert placeholder in msg, msg


@pytest.mark.parametrize("extra,words", [
    ({"llama_server_ctx_sise": 4096}, "llama_server_ctx_sise is not a variable of this collection: did you mean "
                                      "llama_server_ctx_size?"),
    ({"llama_server_parallel": "two"}, "llama_server_parallel is 'two', not a whole number"),
    ({"llama_server_tensor_split": "32,33"}, "llama_server_tensor_split is the string '32,33', not a list: write it "
                                             "as a YAML list, llama_server_tensor_split: [32, 33]"),
    ({"llama_server_parallel": 3}, "llama_server_ctx_size 327680 does not divide over llama_server_parallel 3 slots"),
], ids=["typo", "mistyped", "split-string", "slots"])
def test_a_bad_variable_is_refused_before_anything_else(tmp_path, extra, words):
    run = ansible_playbook("-i", str(unreachable(tmp_path)), "playbooks/plan.yml", "-e", json.dumps(extra),
                           "--limit", "dankserver")
    assert run.returncode != 0
    tasks = re.findall(r"^TASK \[(.*?)\]", run.stdout, re.M)
    # only the shape check ran before it, and nothing after it
    assert tasks[-1].startswith("Settle the inventory"), tasks
    assert all(t.startswith(("Refuse a frank-medium shape", "Say which shape")) for t in tasks[:-1]), tasks
    assert words in run.stdout, run.stdout[-3000:]


def test_a_shape_the_inventory_does_not_declare_is_named(tmp_path):
    run = ansible_playbook("-i", str(unreachable(tmp_path)), "playbooks/plan.yml", "-e", "frank_medium_shape=nope",
                           "--limit", "dankserver")
    assert run.returncode != 0 and "declares only dflash2 | mtp | dspark" in run.stdout, run.stdout[-3000:]
    assert "TASK [Settle the inventory" not in run.stdout
