"""Offline never reads the controller as a host (issue 37): an offline plan uses the recorded board, RAM and GGUF
headers of a host, or says which record it lacks and how to make it - the GPU and payload reads of the host never
run (they would run on the controller). An offline --check --diff plans, says nothing of the host was read, and
stops there (it used to show the controller's files, users and ports as the host's: changed=13).

The sample inventory (inventory/sample) with a second -i that fills one host the way an operator would:
gpu-node-2 gets a board (tests/fixtures/gpu/rtx3090.facts.json), its RAM and a header record of a generated model;
gpu-node-1 gets a filled payload and nothing recorded. ~3 s per run."""
import json
import os
import subprocess

import gen_models
import pytest
import range_http_server
import yaml

from ansible_collections.dankfleet.llm.plugins.module_utils.plan.gguf_facts import gguf_facts
from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import BIN, REPO, ansible_env

HOST_READS = ("Read the host's GPUs and PCIe topology", "Look for the payload and read its GGUF headers",
              "Read the host's RAM, when the play gathered no facts", "Read the host (its RAM for the cache-ram law)")
LATER_ROLES = ("llama_cpp_build", "gguf_fetch", "llama_server", "runtime_retire", "llm_observability")


@pytest.fixture(scope="module")
def overlay(tmp_path_factory):
    root = tmp_path_factory.mktemp("overlay")
    model = gen_models.write_model("dense-llama", root / "t.gguf")
    (root / "t.json").write_text(json.dumps(gguf_facts(model["path"])))
    manifest = [{"name": "t", "role": "target", "repo": "org/t", "revision": "main", "file": "t.gguf",
                 "url": "https://example.invalid/org/t/resolve/main/t.gguf", "size": model["size"],
                 "sha256": model["sha256"]}]
    payload = {"gguf_fetch_manifest": manifest, "dankfleet_plan_header_facts": {"t.gguf": str(root / "t.json")},
               "llama_server_vision": False, "llama_server_spec_type": []}
    (root / "host_vars").mkdir()
    (root / "host_vars" / "gpu-node-1.yml").write_text(yaml.safe_dump(payload))
    (root / "host_vars" / "gpu-node-2.yml").write_text(yaml.safe_dump(dict(
        payload, dankfleet_gpu_facts_file=os.path.join(REPO, "tests", "fixtures", "gpu", "rtx3090.facts.json"),
        dankfleet_plan_host_ram_bytes=64 << 30)))
    (root / "manifest.json").write_text(json.dumps(manifest))
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"llm_endpoints": {"hosts": {
        "gpu-node-1": {}, "gpu-node-2": {}}}}}}))
    return root


def playbook(overlay, playbook_path, *args):
    env = ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                      PATH="%s:%s" % (BIN, os.environ["PATH"]))
    run = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "inventory/sample", "-i", str(overlay / "hosts.yml"),
                          "-e", "dankfleet_offline=true", playbook_path] + list(args),
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(run.stdout)


def short(task):
    """A task's name without its role's prefix (the json callback names a role's task '<role> : <task>')."""
    return task["task"]["name"].split(" : ", 1)[-1]


def role_of(task):
    name = task["task"]["name"]
    return name.split(" : ", 1)[0].rsplit(".", 1)[-1] if " : " in name else None


def tasks(result):
    return [t for play in result["plays"] for t in play["tasks"]]


def ran(task, host):
    r = task["hosts"].get(host)
    return r is not None and not r.get("skipped")


def msg_of(result, name):
    (task,) = [t for t in tasks(result) if short(t) == name]
    return next(r["msg"] for r in task["hosts"].values() if "msg" in r)


def test_offline_plan_uses_records_or_names_the_missing_one(overlay):
    result = playbook(overlay, "playbooks/plan.yml")
    for task in tasks(result):
        if short(task) in HOST_READS:
            assert not any(ran(task, h) for h in ("gpu-node-1", "gpu-node-2")), task["task"]["name"]
    summary = msg_of(result, "Fleet summary (one verdict per host)")
    assert summary[0] == "fleet: 2 host(s), 1 fit, 0 do not fit, 1 not planned"
    # the recorded board's card, never the controller's
    assert summary[2].startswith("gpu-node-2: fits - split none - one CUDA0")
    assert summary[1] == ("gpu-node-1: cannot plan: no recorded board for gpu-node-1 (dankfleet_gpu_facts_file); no "
                          "recorded RAM for gpu-node-1 (dankfleet_plan_host_ram_bytes); offline, nothing of the host is "
                          "read: record it (checklist)")
    checklist = msg_of(result, "Checklist - everything still to fill, every host")
    dest = os.path.join(REPO, "inventory", "sample", "boards", "gpu-node-1.facts.json")
    assert ("gpu-node-1: dankfleet_gpu_facts_file: no recorded board to plan offline - record one: ansible gpu-node-1 "
            "-m dankfleet.llm.gpu_info --tree /tmp/dankfleet-boards && mv /tmp/dankfleet-boards/gpu-node-1 %s, then set "
            "dankfleet_gpu_facts_file: %s in its host_vars" % (dest, dest)) in checklist
    assert any(line.startswith("gpu-node-1: dankfleet_plan_host_ram_bytes: no recorded RAM") for line in checklist)
    assert not any(line.startswith("gpu-node-2: dankfleet_") for line in checklist), checklist


def test_a_board_file_the_controller_does_not_hold_is_no_record(overlay, tmp_path):
    result = playbook(overlay, "playbooks/plan.yml", "--limit", "gpu-node-2",
                      "-e", "dankfleet_gpu_facts_file=%s" % (tmp_path / "missing.json"))
    summary = msg_of(result, "Fleet summary (one verdict per host)")
    assert summary[1].startswith("gpu-node-2: cannot plan: no recorded board for gpu-node-2 (dankfleet_gpu_facts_file: "
                                 "%s is not a file on the controller)" % (tmp_path / "missing.json"))


def test_offline_check_diff_plans_only_and_says_nothing_was_read(overlay):
    result = playbook(overlay, "deploy.yml", "--check", "--diff", "--limit", "gpu-node-2")
    assert result["stats"]["gpu-node-2"]["changed"] == 0
    said = msg_of(result, "Offline - say that nothing of the host was read")
    assert said.startswith("offline: gpu-node-2 was planned from the controller's records only - nothing of the host "
                           "was read")
    # the port is checked at the first contact with the host; offline the note names it and what must be true
    assert said.endswith("Not checked: port 8080 must be free, or held by this service or a unit of "
                         "runtime_retire_runtimes (none declared).")
    names = [short(t) for t in tasks(result)]
    assert "Show the capacity table" in names
    # the play gathers no facts: its own read of the host is there, and skipped offline
    assert "Gathering Facts" not in names and "Read the host (its RAM for the cache-ram law)" in names
    for task in tasks(result):
        if short(task) in HOST_READS:
            assert not ran(task, "gpu-node-2"), task["task"]["name"]
        if role_of(task) in LATER_ROLES and not short(task).startswith("Validating arguments"):
            assert not ran(task, "gpu-node-2"), task["task"]["name"]


def test_a_header_without_a_record_is_read_from_the_manifest_url(overlay, tmp_path):
    """No record, the payload not on the host: the plan reads the header from the manifest's url (Range requests,
    the repo's range server) and plans what the record plans - without downloading the model."""
    by_record = msg_of(playbook(overlay, "playbooks/plan.yml", "--limit", "gpu-node-2"),
                       "Fleet summary (one verdict per host)")
    server, port = range_http_server.serve(str(overlay))
    try:
        manifest = json.loads((overlay / "manifest.json").read_text())
        manifest[0]["url"] = "http://127.0.0.1:%d/t.gguf" % port
        (tmp_path / "vars.json").write_text(json.dumps({"gguf_fetch_manifest": manifest,
                                                        "dankfleet_plan_header_facts": {}}))
        result = playbook(overlay, "playbooks/plan.yml", "--limit", "gpu-node-2", "-e", "@%s" % (tmp_path / "vars.json"))
        asked = [r for r in server.requests if r["path"] == "/t.gguf"]
    finally:
        server.close()
    assert msg_of(result, "Fleet summary (one verdict per host)") == by_record
    assert asked and all(r["status"] == 206 and r["range"].startswith("bytes=") for r in asked)
    assert sum(r["sent"] for r in asked) <= json.loads((overlay / "t.json").read_text())["tensor_data_offset"] + (1 << 20)
    # a url that cannot be read: cannot plan, saying why
    manifest[0]["url"] = "http://127.0.0.1:%d/t.gguf" % port      # the server is gone
    (tmp_path / "vars.json").write_text(json.dumps({"gguf_fetch_manifest": manifest, "dankfleet_plan_header_facts": {}}))
    gone = msg_of(playbook(overlay, "playbooks/plan.yml", "--limit", "gpu-node-2", "-e", "@%s" % (tmp_path / "vars.json")),
                  "Fleet summary (one verdict per host)")
    assert gone[1].startswith("gpu-node-2: cannot plan: the payload is not on the host and the controller holds no GGUF "
                              "header record of t.gguf (dankfleet_plan_header_facts: file name -> gguf_info JSON); its url "
                              "could not be read: http://127.0.0.1:%d/t.gguf: cannot read the header" % port), gone


def test_a_gated_url_is_read_with_the_plans_own_token_never_the_fetchs(overlay, tmp_path):
    """A gated repository (its url answers 401 without the token): the plan reads the header with llm_plan_url_token.
    gguf_fetch_token is the fetch role's input, which no other role reads (issue 32) and which the settle step does not
    carry in its printed result: set alone, the plan cannot read the url and says to set llm_plan_url_token."""
    summary = "Fleet summary (one verdict per host)"
    by_record = msg_of(playbook(overlay, "playbooks/plan.yml", "--limit", "gpu-node-2"), summary)
    server, port = range_http_server.serve(str(overlay), token="hf_g4ted")
    try:
        manifest = json.loads((overlay / "manifest.json").read_text())
        manifest[0]["url"] = "http://127.0.0.1:%d/t.gguf" % port
        fetch_only = {"gguf_fetch_manifest": manifest, "dankfleet_plan_header_facts": {}, "gguf_fetch_token": "hf_g4ted"}
        (tmp_path / "fetch.json").write_text(json.dumps(fetch_only))
        (tmp_path / "plan.json").write_text(json.dumps(dict(fetch_only, llm_plan_url_token="hf_g4ted")))
        denied = playbook(overlay, "playbooks/plan.yml", "--limit", "gpu-node-2", "-e", "@%s" % (tmp_path / "fetch.json"))
        read = playbook(overlay, "playbooks/plan.yml", "--limit", "gpu-node-2", "-e", "@%s" % (tmp_path / "plan.json"))
    finally:
        server.close()
    line = msg_of(denied, summary)[1]
    assert line.startswith("gpu-node-2: cannot plan:") and "HTTP 401" in line and "llm_plan_url_token" in line, line
    assert msg_of(read, summary) == by_record
    # the token is in no printed result: not the settle step's (dankfleet_settled), not the plan's
    assert "hf_g4ted" not in json.dumps(denied) + json.dumps(read)


def test_a_header_record_whose_file_is_missing_is_said_as_that(overlay, tmp_path):
    """The inventory names a record the controller does not hold (a moved file): not "no record", but the path."""
    gone = tmp_path / "moved.json"
    (tmp_path / "vars.json").write_text(json.dumps({"dankfleet_plan_header_facts": {"t.gguf": str(gone)}}))
    summary = msg_of(playbook(overlay, "playbooks/plan.yml", "--limit", "gpu-node-2", "-e", "@%s" % (tmp_path / "vars.json")),
                     "Fleet summary (one verdict per host)")
    assert summary[1].startswith("gpu-node-2: cannot plan: the payload is not on the host and the header record of t.gguf "
                                 "is missing: %s is not a file on the controller (dankfleet_plan_header_facts: record it "
                                 "again with dankfleet.llm.gguf_info, or fix the path)" % gone), summary
    assert "holds no GGUF header record" not in summary[1]


@pytest.fixture(scope="module")
def moe_overlay(tmp_path_factory):
    """One host, one 24 GiB card (the recorded RTX 3090 board), 64 GiB of RAM and the header record of a
    Qwen3-30B-A3B-class qwen3moe Q4_K_M (tests/fixtures/qwen3moe_30b_a3b.json): issue 38's operator."""
    root = tmp_path_factory.mktemp("moe")
    facts = os.path.join(REPO, "tests", "fixtures", "qwen3moe_30b_a3b.json")
    size = json.loads(open(facts).read())["file_size"]
    manifest = [{"name": "q", "role": "target", "repo": "Qwen/Qwen3-30B-A3B-GGUF", "revision": "main",
                 "file": "q.gguf", "url": "https://example.invalid/Qwen/Qwen3-30B-A3B-GGUF/resolve/main/q.gguf",
                 "size": size, "sha256": "a" * 64}]
    (root / "host_vars").mkdir()
    (root / "host_vars" / "moe-node.yml").write_text(yaml.safe_dump({
        "gguf_fetch_manifest": manifest, "dankfleet_plan_header_facts": {"q.gguf": facts},
        "llama_server_vision": False, "llama_server_spec_type": [], "llama_server_ctx_size": 65536,
        "dankfleet_gpu_facts_file": os.path.join(REPO, "tests", "fixtures", "gpu", "rtx3090.facts.json"),
        "dankfleet_plan_host_ram_bytes": 64 << 30}))
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"llm_endpoints": {"hosts": {
        "moe-node": {}}}}}}))
    return root


def test_a_30b_a3b_moe_on_one_24gib_card_plans_offline_with_experts_on_the_host(moe_overlay):
    """issue 38: 64k of a 30B-A3B does not fit one 24 GiB card with every expert on it; with
    llama_server_n_cpu_moe: 24 the offline plan fits, from the recorded board, RAM and header alone."""
    env = ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), PATH="%s:%s" % (BIN, os.environ["PATH"]))
    dense = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "inventory/sample", "-i",
                            str(moe_overlay / "hosts.yml"), "-e", "dankfleet_offline=true", "playbooks/plan.yml",
                            "--limit", "moe-node"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert dense.returncode != 0 and "llama_server_ctx_size 65536 does not fit" in dense.stdout, dense.stdout[-3000:]
    result = playbook(moe_overlay, "playbooks/plan.yml", "--limit", "moe-node", "-e", "llama_server_n_cpu_moe=24")
    summary = msg_of(result, "Fleet summary (one verdict per host)")
    assert summary[0] == "fleet: 1 host(s), 1 fit, 0 do not fit, 0 not planned", summary
    assert summary[1].startswith("moe-node: fits - split none - one CUDA0"), summary
    for task in tasks(result):
        if short(task) in HOST_READS:
            assert not ran(task, "moe-node"), task["task"]["name"]


def published_plan(result, host):
    (task,) = [t for t in tasks(result) if short(t).startswith("Publish the plan")]
    return task["hosts"][host]["ansible_facts"]["llm_plan"]


def test_the_planner_chooses_n_cpu_moe_offline_and_says_so(moe_overlay, tmp_path):
    """issue 38: llama_server_n_cpu_moe: auto with the split and the context left to the planner ([] and 0): two
    full 40960-token windows of the 30B-A3B do not fit the 24 GiB card with every expert on it, so the plan keeps
    the fewest blocks' experts on the host that reach them, publishes that number (origin planned) for the serve
    role's env file, and the capacity table says the planner chose it. Pinned, the same number plans the same."""
    (tmp_path / "auto.json").write_text(json.dumps({
        "llama_server_n_cpu_moe": "auto", "llama_server_tensor_split": [], "llama_server_ctx_size": 0,
        "llama_server_parallel": 2}))
    result = playbook(moe_overlay, "playbooks/plan.yml", "--limit", "moe-node", "-e", "@%s" % (tmp_path / "auto.json"))
    llm_plan = published_plan(result, "moe-node")
    n = llm_plan["n_cpu_moe"]
    assert llm_plan["fits"] and isinstance(n, int) and 0 < n < 48, llm_plan["capacity"]
    assert llm_plan["origin"]["n_cpu_moe"] == "planned" and llm_plan["ctx_size"] == 2 * 40960
    assert llm_plan["fit"]["n_cpu_moe_choice"]["reason"].startswith("llama_server_n_cpu_moe chosen by the planner: %d" % n)
    table = msg_of(result, "Show the capacity table")
    assert "experts on the host: blocks 0-%d (llama_server_n_cpu_moe %d, chosen by the planner)" % (n - 1, n) in " ".join(table)
    summary = msg_of(result, "Fleet summary (one verdict per host)")
    assert summary[1].startswith("moe-node: fits - split none - one CUDA0, context 81920 (2 x 40960)"), summary
    # the number pinned: the same plan, pinned, and nothing said of a choice
    result = playbook(moe_overlay, "playbooks/plan.yml", "--limit", "moe-node", "-e", "@%s" % (tmp_path / "auto.json"),
                      "-e", "llama_server_n_cpu_moe=%d" % n)
    pinned = published_plan(result, "moe-node")
    assert pinned["n_cpu_moe"] == n and pinned["origin"]["n_cpu_moe"] == "pinned"
    assert pinned["fit"]["devices"] == llm_plan["fit"]["devices"] and pinned["fit"]["n_cpu_moe_choice"] is None
    assert "chosen by the planner" not in " ".join(msg_of(result, "Show the capacity table"))


def test_named_shapes_are_the_collections_names_not_a_sites(overlay, tmp_path):
    # issue 37: the shipped plays read dankfleet_shape / dankfleet_shapes (inventory/production points them at its
    # frank_medium_* names); a shape the inventory declares is said with its why, another is refused by name
    shapes = {"small": {"why": "one slot of 4096"}, "wide": {"why": "two slots of 8192"}}
    (tmp_path / "shapes.yml").write_text(yaml.safe_dump({"dankfleet_shapes": shapes, "dankfleet_shape": "small"}))
    result = playbook(overlay, "playbooks/plan.yml", "--limit", "gpu-node-2", "-e", "@%s" % (tmp_path / "shapes.yml"))
    assert msg_of(result, "Say which shape this run deploys") == "serve shape: small - one slot of 4096"
    env = ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), PATH="%s:%s" % (BIN, os.environ["PATH"]))
    run = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "inventory/sample", "-i", str(overlay / "hosts.yml"),
                          "-e", "dankfleet_offline=true", "-e", "@%s" % (tmp_path / "shapes.yml"), "-e", "dankfleet_shape=huge",
                          "playbooks/plan.yml", "--limit", "gpu-node-2"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    said = " ".join(run.stdout.split())
    assert run.returncode != 0
    assert "The serve shape is 'huge' (dankfleet_shape), but the inventory declares only small | wide" in said, said[-2000:]
    assert "Settle the inventory" not in said
