"""What the operator-path verifiers check by hand on a lab host (molecule `default` and `production`):
run a playbook against the scenario's inventory, list every touched path with its checksum (a dry run
must leave the listing unchanged), and ask the endpoint for a real completion.

Not a scenario (no molecule.yml): the verifiers import it through the collection's one import path,
`ansible_collections.dankfleet.llm.molecule.shared.endpoint_checks` (pytest.ini).
"""
import json
import os
import re
import shlex
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def scenario_inventory():
    """The inventory molecule wrote for this scenario."""
    return os.environ["MOLECULE_INVENTORY_FILE"]


def playbook(*args, inventory=None, timeout=900):
    """ansible-playbook from the repo root with the Makefile's collection/roles paths;
    inventory: the scenario's when given (MOLECULE_INVENTORY_FILE)."""
    env = dict(os.environ)
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / "collections"))
    env.setdefault("ANSIBLE_ROLES_PATH", f"{REPO / 'roles'}:{REPO / 'tests/lab/roles'}")
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_NOCOLOR"] = "1"
    command = ["ansible-playbook"] + (["-i", inventory] if inventory else []) + list(args)
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def snapshot(host, paths, unit):
    """Every path under `paths` (type, mode, owner, size, mtime, link target), the sha256 of every file,
    and the unit's MainPID/NRestarts/start time: equal before and after means nothing changed.
    Every path must exist and hold a file: a listing of nothing compares equal to itself and proves nothing."""
    # each path its own word: host.run's %s quotes an argument whole, and find of one path named
    # "/a /b ..." lists nothing (the empty listing this check once compared)
    quoted = " ".join(shlex.quote(path) for path in paths)
    listing = host.run(
        "find " + quoted + " -xdev -printf '%p %y %m %U:%G %s %T@ %l\\n' 2>/dev/null | sort; "
        "find " + quoted + " -xdev -type f -print0 2>/dev/null | sort -z | xargs -0 -r sha256sum; "
        "systemctl show -p MainPID -p NRestarts -p ActiveEnterTimestampMonotonic " + shlex.quote(unit))
    assert listing.rc == 0, listing.stderr
    check_listing(listing.stdout, paths)
    return listing.stdout


def check_listing(text, paths):
    """The snapshot's listing names each of `paths` itself and holds at least one file checksum, or
    AssertionError naming what is missing."""
    listed = {line.split(" ", 1)[0] for line in text.splitlines()}
    missing = [path for path in paths if path not in listed]
    assert not missing, "the listing lacks %s (not on the host?): it would compare nothing" % missing
    assert re.search(r"(?m)^[0-9a-f]{64}  /", text), "the listing holds no file checksum: it would compare nothing"


def chat(host, port):
    """A real chat completion (8 tokens, temperature 0) from frank-medium on 127.0.0.1:port."""
    out = host.run(
        "curl -sf -m 120 http://127.0.0.1:%s/v1/chat/completions -H 'Content-Type: application/json' "
        "-d '{\"model\": \"frank-medium\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
        "\"max_tokens\": 8, \"temperature\": 0}'", port)
    assert out.rc == 0, out.stderr
    return json.loads(out.stdout)


def retire_playbook(path, name, runtime, port, trash_dir=None):
    """Write at `path` a one-play playbook named `name` that retires frank-medium.service with
    dankfleet.llm.runtime_retire as the runtime `runtime` holding `port` (into `trash_dir` when given):
    the state a rollback starts from. Returns `path`."""
    retire = {"runtime_retire_runtimes": [{"name": runtime, "units": [{"name": "frank-medium.service"}],
                                           "ports": [int(port)]}]}
    if trash_dir:
        retire["runtime_retire_trash_dir"] = trash_dir
    path.write_text(json.dumps([{"name": name, "hosts": "llm_endpoints", "gather_facts": False,
                                 "roles": [{"role": "dankfleet.llm.runtime_retire", "vars": retire}]}]))
    return path


def models(host, port):
    """What /v1/models answers, parsed."""
    return json.loads(host.run("curl -sf http://127.0.0.1:%s/v1/models", port).stdout)
