"""Stage ahead, switch fast (issue 36, item 3): the deploy and the rollback split into --tags stage and --tags switch.
What each half selects, read from ansible-playbook --list-tasks over the production inventory (the real plays, the
real roles): stage builds or adopts, fetches, plans, renders and records - no retire, no start, no gate; switch checks
the staged record before anything renders or stops, then retires, starts, gates, verifies and marks it - no build,
no download. The hold on the restart handler and the staged restart are the serve role's own inputs. ~6 s."""
import glob
import json
import os
import re
import subprocess

import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import BIN, REPO, ansible_env


def listed(playbook, tag):
    """{play name: [task names]} of ansible-playbook --list-tasks --tags tag."""
    run = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "inventory/production", playbook, "--list-tasks",
                          "--tags", tag], cwd=REPO, env=ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg")),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    plays, current = {}, None
    for line in run.stdout.splitlines():
        play = re.match(r"\s+play #\d+ \([^)]*\): (.*?)\tTAGS", line)
        if play:
            current = plays.setdefault(play.group(1), [])
        elif current is not None and "\tTAGS: " in line:
            current.append(line.strip().split("\tTAGS: ")[0])
    return plays


def names(plays):
    return [t for tasks in plays.values() for t in tasks]


def index(tasks, fragment):
    hits = [i for i, t in enumerate(tasks) if fragment in t]
    assert hits, "no task with %r in %s" % (fragment, tasks)
    return hits[0]


@pytest.mark.parametrize("playbook", ["deploy-frank-medium.yml", "rollback-frank-medium.yml"])
def test_stage_builds_fetches_renders_and_records_and_stops_nothing(playbook):
    tasks = names(listed(playbook, "stage"))
    for wanted in ("Adopt | prove a built tree", "Preflight | plan the release", "Fetch each missing, partial or wrong file",
                   "Write the env file, launcher and unit", "Stage - record the staged shape on the host"):
        index(tasks, wanted)
    assert index(tasks, "Write the env file, launcher and unit") < index(tasks, "Stage - record the staged shape")
    for unwanted in ("Retire each runtime", "Enable the unit", "Start the unit when it is down", "Switch - ",
                     "Restart onto the staged shape", "Ask the endpoint for one real completion"):
        assert not [t for t in tasks if unwanted in t], (unwanted, tasks)


@pytest.mark.parametrize("playbook", ["deploy-frank-medium.yml", "rollback-frank-medium.yml"])
def test_switch_checks_the_record_first_then_retires_starts_gates_and_adds_no_build_or_download(playbook):
    tasks = names(listed(playbook, "switch"))
    check = index(tasks, "Switch - refuse when nothing is staged")
    # before anything renders or stops
    assert check < index(tasks, "Write the env file, launcher and unit") < index(tasks, "Retire each runtime")
    assert index(tasks, "Retire each runtime") < index(tasks, "Restart onto the staged shape") \
        < index(tasks, "Gate the new shape") < index(tasks, "Switch - mark the staged shape switched")
    for unwanted in ("Fetch each missing", "Verify each model file", "Preflight | plan the release", "Adopt | ",
                     "Install | bundle", "Stage - record"):
        assert not [t for t in tasks if unwanted in t], (unwanted, tasks)


def test_the_rollback_decides_in_both_halves_and_restores_a_recorded_shape_only_in_the_switch():
    stage, switch = listed("rollback-frank-medium.yml", "stage"), listed("rollback-frank-medium.yml", "switch")
    decide = "Decide which layer-split shape to bring back"
    assert "Find the last gated shape (checked when there is one)" in stage[decide] == switch[decide]
    assert stage["Roll back to the recorded shape"] == []
    assert switch["Roll back to the recorded shape"] == ["Retire what serves the endpoint now",
                                                         "Restore the shape, restart and gate it"]


def _service_restart():
    with open(os.path.join(REPO, "roles", "llama_server", "tasks", "service.yml")) as f:
        (block,) = [t for t in yaml.safe_load(f) if "block" in t]
    return dict((t["name"], t) for t in block["block"])


def test_the_stage_holds_the_restart_and_the_switch_restarts_onto_the_staged_files():
    assert "not (llama_server_stage_only | bool)" in _service_restart()["Restart llama-server"]["when"]
    with open(os.path.join(REPO, "playbooks", "deploy_endpoints.yml")) as f:
        play = yaml.safe_load(f)[0]
    tasks = dict((t["name"], t) for t in play["tasks"])
    prepare = tasks["Serve, prepare - every preflight, env file, launcher and unit validated (nothing stops)"]
    assert prepare["vars"] == {"llama_server_stage_only": "{{ _dankfleet_stage_only }}"}
    (start,) = [t for t in tasks["Retire, restart, gate - a failed first deploy brings the predecessor back"]["block"]
                if t.get("ansible.builtin.import_role", {}).get("tasks_from") == "start"]
    assert start["vars"] == {"llama_server_restart_staged": "{{ __dankfleet_staged.pending | default(false) }}"}
    assert play["vars"]["_dankfleet_stage_only"] == "{{ 'stage' in ansible_run_tags and 'switch' not in ansible_run_tags }}"


def test_the_staged_restart_reads_the_gate_pending_mark_the_stage_left():
    """The switch restarts an active unit onto staged files only when the stage changed them (gate-pending); each
    condition is an expression (unquoted, YAML once read this one as a mapping, which is always true)."""
    with open(os.path.join(REPO, "roles", "llama_server", "tasks", "service.yml")) as f:
        tasks = dict((t["name"], t) for t in yaml.safe_load(f))
    when = tasks["Restart onto the staged shape (rendered by the stage half, never gated)"]["when"]
    assert all(isinstance(w, str) for w in when), when
    assert "llama_server_restart_staged | bool" in when and any("_llama_server_gate_pending" in w for w in when)
    with open(os.path.join(REPO, "roles", "llama_server", "tasks", "config.yml")) as f:
        (mark,) = [t for t in yaml.safe_load(f) if t.get("ansible.builtin.import_tasks") == "gate_pending.yml"]
    # the stage half restarts nothing but still leaves the mark when it changed the files
    assert mark["when"] == ["llama_server_stage_only | bool", "__llama_server_files is changed"]
    assert _service_restart()["Mark the gate pending before the restart"]["when"] == "_llama_server_restart_wanted | bool"


def import_vars(node, found):
    """Every variable a play passes to a role through an import_role/include_role task's vars, anywhere in node."""
    if isinstance(node, dict):
        if any(k in node for k in ("ansible.builtin.import_role", "ansible.builtin.include_role")):
            found.update(node.get("vars") or {})
        for value in node.values():
            import_vars(value, found)
    elif isinstance(node, list):
        for value in node:
            import_vars(value, found)
    return found


def test_no_handler_reads_a_variable_a_playbook_passes_through_an_import():
    """A role imported twice in one play (the deploy: llama_server's prepare, then its start) runs its handlers in
    the scope of another import than the one that notified them: a variable passed in one import's vars is not what
    the handler sees. That held no restart: the stage's handler restarted the unit into a crash loop behind the
    predecessor's port, and the switch found :7770 taken by it. A handler reads role defaults, inventory and facts."""
    passed = set()
    for path in sorted(glob.glob(os.path.join(REPO, "*.yml")) + glob.glob(os.path.join(REPO, "playbooks", "*.yml"))):
        with open(path) as f:
            import_vars(yaml.safe_load(f), passed)
    assert "llama_server_stage_only" in passed  # what this rule is about: the deploy's stage half sets it so
    handlers = os.path.join(REPO, "roles")
    for role in sorted(os.listdir(handlers)):
        path = os.path.join(handlers, role, "handlers", "main.yml")
        if os.path.exists(path):
            with open(path) as f:
                text = json.dumps(yaml.safe_load(f))  # the handlers as Ansible reads them (their comments left out)
            read = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
            assert not read & passed, (path, sorted(read & passed))
