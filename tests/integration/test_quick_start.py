"""The README's quick start, run as written (issue 37): the block under its `<!-- quick-start` marker, in an empty
directory with a clean HOME and no venv of ours on PATH. Two things are served locally instead of fetched: Galaxy
(the tarball `ansible-galaxy collection build` makes of this tree) and the Hub (tests/lab/range_http_server.py
serving a lab model under the quick start's file name). Each substitution must find its text, so a quick start
that drifts from what this runs fails here.

- the venv the block makes holds ansible-core and its own dependencies, nothing of the development toolchain;
- the host cannot be reached (192.0.2.10 is TEST-NET-1): one line says so, and the plan refuses it by name (no
  recorded board), from records only, never from the controller's GPUs, and lists in its checklist the command
  that records one;
- with the board and RAM recorded as the checklist says, the same command plans the host from the model's URL
  alone: ranged reads of the header, no download, and the facts are those `gguf_info path=` reads from the file.
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import range_http_server

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HUB_URL = "https://huggingface.co/Qwen/Qwen3-8B-GGUF/resolve/main/Qwen3-8B-Q4_K_M.gguf"
GALAXY_INSTALL = "ansible-galaxy collection install dankfleet.llm"
BOARD = REPO / "tests" / "fixtures" / "gpu" / "rtx3090.facts.json"
# the Python packages ansible-core 2.19 brings with it: the controller venv holds these and nothing else
CONTROLLER_PACKAGES = {"ansible-core", "cffi", "cryptography", "jinja2", "markupsafe", "packaging", "pycparser",
                       "pyyaml", "resolvelib", "pip", "setuptools"}


def quick_start_block():
    text = (REPO / "README.md").read_text()
    marker = text.index("<!-- quick-start")
    match = re.compile(r"```sh\n(.*?)\n```", re.S).search(text, marker)
    assert match, "README.md: no ```sh block after the quick-start marker"
    return match.group(1)


def substitute(block, old, new):
    assert old in block, "the quick start no longer says %r: update tests/integration/test_quick_start.py" % old
    return block.replace(old, new)


@pytest.fixture(scope="module")
def tarball(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    run = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", str(REPO), "--output-path", str(dist)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    (built,) = dist.glob("dankfleet-llm-*.tar.gz")
    return built


@pytest.fixture(scope="module")
def hub(tmp_path_factory, lab_models):
    root = tmp_path_factory.mktemp("hub")
    shutil.copy(lab_models["dense-llama"]["path"], root / "Qwen3-8B-Q4_K_M.gguf")
    server, port = range_http_server.serve(str(root))
    yield {"url": "http://127.0.0.1:%d/Qwen3-8B-Q4_K_M.gguf" % port, "file": root / "Qwen3-8B-Q4_K_M.gguf"}
    server.close()


def bash(script, cwd, home, timeout=600):
    env = {"HOME": str(home), "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "ANSIBLE_NOCOLOR": "1",
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CACHE_DIR": os.path.expanduser("~/.cache/pip")}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def checklist(stdout):
    """The msg lines of the plan's last checklist task."""
    block = stdout.rsplit("TASK [Checklist", 1)[1]
    return re.findall(r'^\s+"(.*)",?$', block.split("PLAY RECAP")[0], re.M)


def test_the_quick_start_runs_as_written(tmp_path, tarball, hub):
    block = quick_start_block()
    block = substitute(block, GALAXY_INSTALL, "ansible-galaxy collection install --offline %s" % tarball)
    block = substitute(block, HUB_URL, hub["url"])
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()

    run = bash(block + "\npip freeze --all", work, home)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    frozen = {line.split("==")[0].lower() for line in run.stdout.splitlines() if "==" in line}
    assert "ansible-core" in frozen and frozen <= CONTROLLER_PACKAGES, frozen - CONTROLLER_PACKAGES

    # unreachable: refused by name from records only, the record's command in the checklist
    assert re.search(r"gpu-box: cannot plan: no recorded board for gpu-box \(dankfleet_gpu_facts_file\)", run.stdout), \
        run.stdout[-3000:]
    assert re.search(r"gpu-box: unreachable \(.*\): planned offline, from records only", run.stdout), run.stdout[-3000:]
    assert "UNREACHABLE" not in run.stdout and "[ERROR]" not in run.stdout + run.stderr, run.stdout[-3000:]
    items = checklist(run.stdout)
    assert any(i.startswith("gpu-box: dankfleet_gpu_facts_file: no recorded board") and "dankfleet.llm.gpu_info" in i
               for i in items), items
    assert any(i.startswith("gpu-box: gguf_fetch_manifest [target]: size 0") for i in items), items
    assert re.search(r"gpu-box\s*: ok=\d+\s+changed=0 ", run.stdout), run.stdout[-1500:]

    # recorded as the checklist says: planned from the URL alone
    llm = work / "llm"
    (llm / "boards").mkdir()
    shutil.copy(BOARD, llm / "boards" / "gpu-box.facts.json")
    with open(llm / "host_vars" / "gpu-box.yml", "a") as handle:
        handle.write('dankfleet_gpu_facts_file: "{{ inventory_dir }}/boards/gpu-box.facts.json"\n'
                     "dankfleet_plan_host_ram_bytes: 68719476736\n")
    plan = block.rsplit("\n", 1)[1]
    assert plan.startswith("ansible-playbook -i hosts.yml dankfleet.llm.plan"), plan
    run = bash(". ~/.venvs/ansible/bin/activate && cd llm && %s -e dankfleet_offline=true -v" % plan, work, home)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    assert re.search(r"gpu-box: fits - split none - one CUDA0", run.stdout), run.stdout[-3000:]
    assert re.search(r"gpu-box\s*: ok=\d+\s+changed=0 ", run.stdout), run.stdout[-1500:]
    assert [i for i in checklist(run.stdout) if "gguf_fetch_manifest [target]" in i], run.stdout[-2000:]
    assert not list(work.rglob("*.gguf")) and not list(home.rglob("*.gguf")), "the model was downloaded"

    # the facts read from the URL are those gguf_info reads from the file
    module = ("ansible localhost -m dankfleet.llm.gguf_info -a %s -o")
    by_url = bash(". ~/.venvs/ansible/bin/activate && " + module % ("url=" + hub["url"]), work, home)
    by_path = bash(". ~/.venvs/ansible/bin/activate && " + module % ("path=%s" % hub["file"]), work, home)
    assert by_url.returncode == 0 and by_path.returncode == 0, by_url.stdout + by_path.stdout
    url_facts, path_facts = (json.loads(r.stdout.split(" => ", 1)[1]) for r in (by_url, by_path))
    # what only a file has (its owner, mode, times) and what only a URL read has (requests, bytes fetched) aside
    transport = {"changed", "path", "url", "invocation", "warnings", "bytes_fetched", "requests"}
    only_file = set(path_facts) - set(url_facts) - transport
    assert only_file <= {"uid", "gid", "owner", "group", "mode", "mtime", "inode", "ctime", "size", "state"}, only_file
    assert {k: v for k, v in url_facts.items() if k not in transport} == \
        {k: v for k, v in path_facts.items() if k not in transport | only_file}
