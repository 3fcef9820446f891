"""Payload adoption in the plan's checklist (issue 36, item 2), through the real playbook on this machine as the host
(a local connection): a manifest entry with a placeholder size and sha256 whose file is already in the models
directory gets the file's own values proposed in the checklist - under --check too, changing nothing - and the
entry's placeholder lines are replaced by the proposal; an entry whose file is not there stays to fill.

The sample inventory with a second -i: gpu-node-2 reached locally, planned for its recorded board
(tests/fixtures/gpu/rtx3090.facts.json), its target a generated GGUF in a temporary models directory. ~5 s a run."""
import hashlib
import json
import os
import subprocess
import sys

import gen_models
import pytest
import yaml

from ansible_collections.dankfleet.llm.tests.unit.ansible_cli import BIN, REPO, ansible_env

URL = "https://huggingface.co/org/t/resolve/main/t.gguf"


@pytest.fixture(scope="module")
def overlay(tmp_path_factory):
    root = tmp_path_factory.mktemp("adopt")
    (root / "models" / "t").mkdir(parents=True)
    model = gen_models.write_model("dense-llama", root / "models" / "t" / "t.gguf")
    manifest = [{"name": "t", "role": "target", "repo": "org/t", "revision": "main", "file": "t.gguf", "url": URL,
                 "size": 0, "sha256": "FILL-the-Hub-LFS-oid"},
                {"name": "t", "role": "mmproj", "repo": "org/t", "revision": "main", "file": "mm.gguf",
                 "url": URL + ".mm", "size": 0, "sha256": "FILL-the-Hub-LFS-oid"}]
    (root / "host_vars").mkdir()
    (root / "host_vars" / "gpu-node-2.yml").write_text(yaml.safe_dump(dict(
        gguf_fetch_manifest=manifest, gguf_fetch_models_dir=str(root / "models"), llama_server_vision=True,
        dankfleet_gpu_facts_file=os.path.join(REPO, "tests", "fixtures", "gpu", "rtx3090.facts.json"),
        ansible_connection="local", ansible_python_interpreter=sys.executable, ansible_become=False)))
    (root / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"llm_endpoints": {"hosts": {"gpu-node-2": {}}}}}}))
    return root, model


def checklist(overlay, *args):
    root, _ = overlay
    env = ansible_env(ANSIBLE_CONFIG=os.path.join(REPO, "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
                      PATH="%s:%s" % (BIN, os.environ["PATH"]))
    run = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", "inventory/sample", "-i", str(root / "hosts.yml"),
                          "--limit", "gpu-node-2", "playbooks/plan.yml"] + list(args),
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads(run.stdout)
    tasks = [t for play in result["plays"] for t in play["tasks"]]
    (task,) = [t for t in tasks if t["task"]["name"] == "Checklist - everything still to fill, every host"]
    return next(r["msg"] for r in task["hosts"].values() if "msg" in r)


@pytest.mark.parametrize("check", [True, False], ids=["check", "plan"])
def test_the_checklist_proposes_the_present_file_and_keeps_the_absent_one(overlay, check):
    root, model = overlay
    before = sorted(os.listdir(str(root / "models" / "t")))
    lines = checklist(overlay, *(["--check"] if check else []))
    with open(model["path"], "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    proposed = [line for line in lines if "proposed from the file on the host" in line]
    assert proposed == ["gpu-node-2: gguf_fetch_manifest [target]: proposed from the file on the host (%s, by one sha256 "
                        "pass) - confirm against the Hub's size and LFS oid, then write size: %d and sha256: %s"
                        % (model["path"], os.path.getsize(model["path"]), sha)]
    # the target's placeholders are replaced by the proposal; the absent mmproj's stay
    assert not any(line.startswith("gpu-node-2: gguf_fetch_manifest [target]: size") for line in lines), lines
    assert any(line.startswith("gpu-node-2: gguf_fetch_manifest [mmproj]: ") and "FILL-the-Hub-LFS-oid" in line
               for line in lines), lines
    assert sorted(os.listdir(str(root / "models" / "t"))) == before  # nothing written beside the file
