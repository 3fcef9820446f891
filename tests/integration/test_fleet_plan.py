"""The fleet's plan stage, as the operator runs it: `deploy-frank-medium.yml -i inventory/production
--check --tags plan`, over BOTH llm_endpoints hosts of the real production inventory, with a connection
overlay (a second -i) that only makes them local and hands each its recorded board:

- dankserver: tests/fixtures/gpu/b850-proart.facts.json (2x R9700) and dankserver's 60 GiB of RAM;
- frank-zealot: tests/fixtures/gpu/rtx3090.facts.json (one RTX 3090, 24 GiB; gpu_facts' result for
  nvidia-smi-rtx3090.csv - test_rtx3090_facts_fixture_says_what_the_recorded_csv_says checks it against
  the recording).

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
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils.host import gpu_facts as gf

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


def playbook(*args):
    """ansible-playbook -i inventory/production <args> deploy-frank-medium.yml, default callback."""
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_ROLES_PATH=f"{REPO / 'roles'}:{REPO / 'tests/lab/roles'}", ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    return subprocess.run(["ansible-playbook", "-i", "inventory/production", *args, "deploy-frank-medium.yml"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def plan_only(*extra):
    return playbook(*extra, "--check", "--tags", "plan")


# Tasks of the stages after the plan, as the default callback heads them (`TASK [<role> : <task>] ***`):
# a plan-only run prints none of them. Each must be a task of the playbook, outside the plan tag
# (test_the_later_stages_looked_for_are_tasks_of_the_playbook): a name no task has can never appear.
LATER_STAGES = (
    "dankfleet.llm.llama_cpp_build : Preflight | plan the release",
    "dankfleet.llm.gguf_fetch : Verify each model file",
    "dankfleet.llm.llama_server : Write the env file, launcher and unit (each validated; a change of values restarts "
    "the service)",
    "dankfleet.llm.runtime_retire : Check the runtimes to retire",
    "dankfleet.llm.llama_server : Enable the unit",
    "dankfleet.llm.llm_observability : Template the Prometheus rule file (promtool-validated) and the Grafana dashboard",
)
# a task the plan stage itself always prints: proves the header format the check relies on
PLAN_TASK = "dankfleet.llm.llm_plan : Show the capacity table"
TASK_HEADER = re.compile(r"^TASK \[(.*)\] \**$", re.M)


def ran_tasks(stdout):
    """The task names a run's default-callback output heads."""
    return set(TASK_HEADER.findall(stdout))


def listed_tasks(*args):
    """The task names `ansible-playbook --list-tasks` lists (`<role> : <task>` for a role's task)."""
    run = playbook("--list-tasks", *args)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return {line.strip().split("\tTAGS:", 1)[0] for line in run.stdout.splitlines() if "\tTAGS:" in line}


def unknown(names, listed):
    return [name for name in names if name not in listed]


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


# The one line of nvidia-smi-rtx3090.csv, as nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,
# memory.used,compute_cap,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader,nounits prints it,
# and what frank-zealot's facts_file must say about that card - worked out by hand, not by gpu_facts: MiB to
# bytes, the 8-digit PCI domain cut to 4, sm_86 from 8.6, and Gen4 x16 = 16 GT/s * 128/130 * 16 / 8 = 31.5 GB/s.
RTX3090_CSV = "0, NVIDIA GeForce RTX 3090, 00000000:01:00.0, 24576, 297, 8.6, 4, 16"
RTX3090_CARD = {"name": "CUDA0", "index": 0, "runtime_index": 0, "backend": "cuda", "vendor": "nvidia",
                "marketing_name": "NVIDIA GeForce RTX 3090", "integrated": False, "hidden": False,
                "pci_address": "0000:01:00.0", "vram_total_bytes": 24576 * 1024 * 1024,
                "vram_used_bytes": 297 * 1024 * 1024, "compute_cap": "8.6", "cuda_arch": "86",
                "link_gen": 4, "link_width": 16, "narrowest_link_gen": 4, "narrowest_link_width": 16,
                "narrowest_link_gbps": 31.5}


def test_rtx3090_facts_fixture_says_what_the_recorded_csv_says():
    """frank-zealot's facts_file against the raw nvidia-smi recording and a hand-worked expectation (not
    against gpu_facts' own output, which generated it: that comparison could not fail on a gpu_facts bug)."""
    assert (GPU / "nvidia-smi-rtx3090.csv").read_text().strip() == RTX3090_CSV
    recorded = json.loads((GPU / "rtx3090.facts.json").read_text())
    (card,) = recorded["gpus"]
    assert {key: card[key] for key in RTX3090_CARD} == RTX3090_CARD
    assert (recorded["cuda_visible_devices"], recorded["cuda_architectures"], recorded["hip_visible_devices"]) == (
        "0", "86", "")
    assert recorded["collectives_legal"] is True and recorded["facts_warnings"] == []
    # the planner reads it through load_facts: the same card comes back
    (loaded,) = gf.load_facts(str(GPU / "rtx3090.facts.json"))["gpus"]
    assert (loaded["name"], loaded["backend"], loaded["vram_total_bytes"]) == ("CUDA0", "cuda", 24 * GIB)


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
    r"capacity of dankserver \(hip profile, headers recorded on the controller; profile within .+\)",
    r"split: 32:33 \(layer\)",
    r"context: 327680 \(2 x 163840\), cache-ram 16384 MiB",
    r"card ROCm0: \d+ layers, \d+\.\d\d GiB free of 31\.86 GiB",
    r"card ROCm1: \d+ layers, \d+\.\d\d GiB free of 31\.86 GiB",
    r"layers: -ts 32:33 shares 65 slots, the 64 blocks then the output layer \(one slot, on the last card\): "
    r"ROCm0 blocks 0-32, ROCm1 blocks 33-63 \+ output",
    # issue 34: the projector's device, what it holds at load and at the largest image the limit admits
    r"projector qwen3vl_merger on ROCm0: \d+\.\d\d GiB at load, \d+\.\d\d GiB at its peak \(images up to 4096 tokens .*\)",
    r"binding: ROCm1: \d+\.\d\d GiB free, \d+\.\d\d GiB above the 1\.50 GiB floor",
]
# frank-zealot with a payload that is on the "host" (the lab's MTP model, where gguf_fetch puts it): its
# headers are read there and the cuda profile plans the one 24 GiB card
ZEALOT_TABLE = [
    r"capacity of frank-zealot \(cuda profile, headers read on the host; profile within .+\)",
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
    ran = ran_tasks(run.stdout)
    assert PLAN_TASK in ran, sorted(ran)
    assert not ran & set(LATER_STAGES), sorted(ran & set(LATER_STAGES))

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
    assert dank[1] == "split: 50:15 (layer)" and dank[-1].startswith("binding: does not fit - llama_server_ctx_size 327680")
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


def test_a_reachable_host_is_told_who_holds_its_port_and_the_plan_goes_on(tmp_path):
    """plan.yml asks a host that answers who holds llama_server_port (the deploy's first-contact check, reported
    with llama_server_port_check: report): a holder the deploy would refuse is named, and the plan still ends in its
    summary and checklist with nothing failed."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        run = ansible_playbook("-i", str(overlay(tmp_path)), "playbooks/plan.yml", "--limit", "dankserver",
                               "-e", json.dumps({"llama_server_port": port}))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert re.search(r"dankserver\s*: ok=\d+\s+changed=0 .*failed=0", run.stdout), run.stdout[-1500:]
    said = [json.loads(m) for m in re.findall(r'"msg": ("(?:[^"\\]|\\.)*")', run.stdout)]
    said = [m for m in said if m.startswith("port %d is held now by " % port)]
    assert len(said) == 1, run.stdout[-4000:]
    assert "pid=%d" % os.getpid() in said[0] and said[0].endswith(
        "a deploy (not --check) refuses here. Declare that runtime in runtime_retire_runtimes or choose another "
        "llama_server_port."), said[0]
    assert "TASK [Checklist" in run.stdout


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
    assert all(t.startswith(("Refuse a serve shape", "Say which shape")) for t in tasks[:-1]), tasks
    assert words in run.stdout, run.stdout[-3000:]


def test_a_shape_the_inventory_does_not_declare_is_named(tmp_path):
    run = ansible_playbook("-i", str(unreachable(tmp_path)), "playbooks/plan.yml", "-e", "frank_medium_shape=nope",
                           "--limit", "dankserver")
    assert run.returncode != 0 and "declares only dflash2 | mtp | dspark" in run.stdout, run.stdout[-3000:]
    assert "TASK [Settle the inventory" not in run.stdout


def test_the_later_stages_looked_for_are_tasks_of_the_playbook():
    """The names the plan-only runs must not print are tasks of the fleet playbook (so a run of their stage
    would print them), and none is a task of the plan tag (so a plan-only run can pass). The check itself can
    fail: the names this file once looked for (`TASK [dankfleet.llm.Render`, `... Retire`) are no task."""
    everything = listed_tasks()
    assert PLAN_TASK in everything
    assert not unknown(LATER_STAGES, everything), unknown(LATER_STAGES, everything)
    assert not set(LATER_STAGES) & listed_tasks("--tags", "plan")
    assert unknown(["dankfleet.llm.Render", "dankfleet.llm.Retire"], everything) == [
        "dankfleet.llm.Render", "dankfleet.llm.Retire"]
