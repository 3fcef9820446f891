"""The settle step before any host contact (issue 32): `deploy-frank-medium.yml --check --diff` against a host out of
reach lists every inventory problem - the manifest's fields included - before a connection is tried, and
`playbooks/plan.yml` and the deploy's settle give the same list. The plan run's checklist lists what the deploy's
settle refuses.

inventory/production with a second -i that points dankserver at 127.0.0.1 port 9 (closed: a connection tried would
fail at once, UNREACHABLE, and show) and gives it several problems: a typo, a mistyped value and a manifest of five
malformed entries. production's placeholders stay. ~2-5 s a run.
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

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TARGET = {"name": "m", "role": "target", "repo": "o/m", "revision": "main", "file": "m.gguf",
          "url": "https://example.invalid/o/m/resolve/main/m.gguf", "size": 10, "sha256": "a" * 64}
# each malformed entry, and the field its refusal names
MANIFEST = [
    (dict(TARGET, size="big"), "gguf_fetch_manifest[0].size is 'big', not a whole number"),
    (dict(TARGET, role=["target"]), "gguf_fetch_manifest[1].role is a list, not a string"),
    (dict(TARGET, dest_dir=7), "gguf_fetch_manifest[2].dest_dir is an integer 7, not a path"),
    (dict(TARGET, url="ftp://example.invalid/m.gguf"),
     "gguf_fetch_manifest[3].url: 'ftp://example.invalid/m.gguf' is not an http(s) URL"),
    ({k: v for k, v in TARGET.items() if k != "sha256"}, "gguf_fetch_manifest[4].sha256 is missing"),
]
OTHERS = ["llama_server_ctx_sise is not a variable of this collection: did you mean llama_server_ctx_size?",
          "llama_server_parallel is 'two', not a whole number"]
UNREACHABLE = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_ssh_common_args": "-o ConnectTimeout=3"}
# what may run before the settle step: the shape preflight, and a role's argument check - all on the controller
BEFORE_SETTLE = ("Refuse a serve shape the inventory does not declare", "Say which shape", "dankfleet.llm.dankfleet : Validating arguments")
SETTLE = "Settle the inventory"
OFFLINE = "To plan without reaching or changing a host: ansible-playbook playbooks/plan.yml"


def overlay(tmp_path, **values):
    """A second inventory: dankserver out of reach, with values of its own."""
    path = tmp_path / "overlay"
    (path / "host_vars").mkdir(parents=True)
    (path / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"llm_endpoints": {"hosts": {
        "dankserver": {}}}}}}))
    (path / "host_vars" / "dankserver.yml").write_text(yaml.safe_dump(dict(UNREACHABLE, **values)))
    return path


@pytest.fixture
def broken(tmp_path):
    return overlay(tmp_path, gguf_fetch_manifest=[entry for entry, _ in MANIFEST], llama_server_ctx_sise=4096,
                   llama_server_parallel="two",
                   # a value of the host's facts is the roles' to read, after the host is reached: not a problem here
                   dankfleet_private_address="{{ ansible_facts['default_ipv4']['address'] }}")


def ansible_playbook(inventory, *args):
    env = dict(os.environ, PATH=f"{BIN}:{os.environ['PATH']}", ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
               ANSIBLE_ROLES_PATH=f"{REPO / 'roles'}:{REPO / 'tests/lab/roles'}", ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    return subprocess.run(["ansible-playbook", "-i", "inventory/production", "-i", str(inventory), "--limit", "dankserver",
                           *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)


def refused(run):
    """(the settle step's refusal lines, its message) of a run that stopped there, before any host was contacted."""
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    tasks = re.findall(r"^TASK \[(.*?)\]", run.stdout, re.M)
    assert tasks and tasks[-1].startswith(SETTLE), tasks
    assert all(t.startswith(BEFORE_SETTLE) for t in tasks[:-1]), tasks
    assert "UNREACHABLE" not in out and "Gathering Facts" not in out, out[-3000:]
    assert re.search(r"dankserver\s*: ok=\d+\s+changed=0\s+unreachable=0\s+failed=1", run.stdout), run.stdout[-1500:]
    (body,) = re.findall(r"^fatal: \[dankserver\]: FAILED! => (\{.*\})$", run.stdout, re.M)
    msg = json.loads(body)["msg"]
    lines = [line[2:] for line in msg.splitlines() if line.startswith("- ")]
    assert msg.startswith(f"{len(lines)} problem(s) in the inventory of dankserver, all listed; nothing was changed:\n")
    return lines, msg


def test_check_diff_against_a_host_out_of_reach_lists_every_problem_before_any_connection(broken):
    lines, msg = refused(ansible_playbook(broken, "deploy-frank-medium.yml", "--check", "--diff"))
    # every manifest field and every other problem in the one run, each a line of its own naming its variable
    for want in [words for _, words in MANIFEST] + OTHERS:
        assert sum(line.startswith(want) for line in lines) == 1, (want, lines)
    assert not any("dankfleet_private_address" in line for line in lines), lines
    # a refused manifest is the one cause: no second refusal for the drafter and projector it would name
    assert not any(line.startswith(("llama_server_spec_type", "llama_server_vision")) for line in lines), lines
    # production's placeholders: refused by a run that changes the host, one line each
    assert any(line.startswith("llama_cpp_build_toolchain_sha256: FILL-") and line.endswith(" - still to fill")
               for line in lines), lines
    # and the way to plan anyway
    assert msg.splitlines()[-1].startswith(OFFLINE) and "-e dankfleet_offline=true" in msg.splitlines()[-1], msg


def test_the_plan_and_the_deploy_and_the_rollback_give_the_same_list(broken):
    deploy, _ = refused(ansible_playbook(broken, "deploy-frank-medium.yml", "--check", "--diff"))
    plan, msg = refused(ansible_playbook(broken, "playbooks/plan.yml"))
    assert plan == deploy
    assert OFFLINE not in msg  # it is the plan
    rollback, _ = refused(ansible_playbook(broken, "rollback-frank-medium.yml", "--check"))
    assert rollback == deploy


def test_the_plan_runs_checklist_lists_everything_the_deploys_settle_refuses(tmp_path):
    """production as it is (placeholders only): the plan run goes on, offline, to its checklist; the deploy refuses
    exactly the checklist's lines."""
    inventory = overlay(tmp_path)
    plan = ansible_playbook(inventory, "playbooks/plan.yml")
    assert plan.returncode == 0, plan.stdout[-3000:]
    block = plan.stdout.rsplit("TASK [Checklist", 1)[1]
    (body,) = re.findall(r"^ok: \[dankserver\] => (\{.*?^\})", block, re.S | re.M)
    checklist = json.loads(body)["msg"]
    rows = [row.split("dankserver: ", 1)[1] for row in checklist[1:]]
    assert checklist[0] == f"checklist: {len(rows)} thing(s) still to fill (the deploy refuses while one remains)"
    deploy, _ = refused(ansible_playbook(inventory, "deploy-frank-medium.yml", "--check", "--diff"))
    assert rows and deploy == [row + " - still to fill" for row in rows]
